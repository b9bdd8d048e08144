// The charts and the shadow candidate's answer in Chromium: every fixture
// decided against the real binary, with a candidate in shadow; the charts
// of refusals by reason must count exactly the refusals the API answered
// (a refusal read from each result schema's x-arbiter-allow, as the pages
// read it), over time, per revision and per replica; a decision's page
// shows what the candidate answered. Nothing here names a decision, a
// reason or an outcome: they come from the fixtures, the schemas and the
// answers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, copyFileSync, cpSync, readdirSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startArbiter, api, fixtures, launch, openPage, outDir, repoRoot } from './harness.mjs';

const replica = 'replica-charts';
let srv, browser, answers, candidate;

before(async () => {
  mkdirSync(outDir, { recursive: true });
  // The candidate: the same rules with a comment more, so another
  // revision that answers as the live one does.
  const cand = mkdtempSync(join(tmpdir(), 'arbiter-candidate-'));
  cpSync(join(repoRoot, 'policies'), join(cand, 'policies'), { recursive: true });
  const dir = join(cand, 'policies', 'decisions');
  const rego = readdirSync(dir, { recursive: true }).find(f => String(f).endsWith('.rego'));
  appendFileSync(join(dir, String(rego)), '\n# a candidate revision: the same rules\n');
  srv = await startArbiter(['--replica-id', replica, '--shadow-policies', join(cand, 'policies')]);
  candidate = (await api(srv, 'GET', '/v1/shadow')).json.candidate.policy_revision;
  assert.ok(candidate, 'a candidate is in shadow');

  const schemas = new Map((await api(srv, 'GET', '/v1/decisions')).json.decisions.map(d => [d.name, d.result_schema]));
  answers = [];
  for (const fx of fixtures()) {
    const res = await api(srv, 'POST', `/v1/decisions/${fx.decision}`, fx.input);
    if (res.status !== 200) continue; // the charts count answers, and errors by code; the fixtures are answered
    const schema = schemas.get(fx.decision);
    const key = schema['x-arbiter-outcome'] ?? 'outcome';
    const allow = schema['x-arbiter-allow'];
    const refused = !Array.isArray(allow) || !allow.some(a => a === res.json.result[key]);
    answers.push({ id: res.json.decision_id, revision: res.json.policy_revision, refused, reasons: [...new Set((res.json.result.reasons ?? []).slice(0, 16))] });
  }
  assert.ok(answers.filter(a => a.refused).length >= 10, 'the fixtures hold refusals');
  assert.ok(answers.some(a => !a.refused), 'the fixtures hold allowances');
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await srv?.stop();
});

const open = path => openPage(browser, srv, path);

// counts sums a chart's segments by reason ('other' for the lumped rest).
async function counts(p, id) {
  return p.locator(`#${id} rect[data-count]`).evaluateAll(rects => {
    const out = {};
    for (const r of rects) {
      const k = r.hasAttribute('data-other') ? '\u0000other' : r.getAttribute('data-reason');
      out[k] = (out[k] ?? 0) + Number(r.getAttribute('data-count'));
    }
    return out;
  });
}

test('the charts count the refusals the API answered, by reason, over time, per revision and per replica', async () => {
  const refusals = answers.filter(a => a.refused);
  const want = {};
  for (const a of refusals) for (const r of (a.reasons.length ? a.reasons : [''])) want[r] = (want[r] ?? 0) + 1;
  const occurrences = Object.values(want).reduce((x, y) => x + y, 0);

  // From the list, with its filter: the link to the charts.
  const p = await open('/ui/decisions');
  await p.locator('#chart-link').click();
  await p.waitForURL(/\/ui\/charts/);
  const src = p.locator('#chart-source');
  assert.equal(await src.getAttribute('data-source'), 'memory');
  assert.match(await src.innerText(), /this replica's memory/);
  assert.equal(Number(await src.getAttribute('data-refusals')), refusals.length);

  for (const id of ['chart-time', 'chart-revision', 'chart-replica']) {
    const got = await counts(p, id);
    const total = Object.values(got).reduce((x, y) => x + y, 0);
    assert.equal(total, occurrences, `${id}: the segments count ${total} reasons, the answers gave ${occurrences}`);
    for (const [reason, n] of Object.entries(got)) {
      if (reason !== '\u0000other') assert.equal(n, want[reason], `${id}: reason ${JSON.stringify(reason)}`);
    }
  }
  // Each bar of a revision and of the replica says its refusals.
  const byRevision = {};
  for (const a of refusals) byRevision[a.revision] = (byRevision[a.revision] ?? 0) + 1;
  for (const [rev, n] of Object.entries(byRevision)) {
    assert.equal(Number(await p.locator(`#chart-revision g.bar[data-key="${rev}"]`).getAttribute('data-total')), n, `revision ${rev}`);
  }
  assert.equal(Number(await p.locator(`#chart-replica g.bar[data-key="${replica}"]`).getAttribute('data-total')), refusals.length);

  // Hovering a bar reads its numbers: the segment's <title>.
  const seg = p.locator('#chart-time rect[data-reason]').first();
  const [reason, n] = [await seg.getAttribute('data-reason'), await seg.getAttribute('data-count')];
  assert.ok((await seg.locator('title').textContent()).includes(`${reason}, ${n} of`), 'the title says the reason and its count');
  // The table under each chart has the same numbers; the legend links the list.
  assert.equal(await p.locator('#chart-time + details table.chart-numbers').count(), 1);
  const first = p.locator('ul.legend li[data-reason] a').first();
  const legendReason = await first.innerText();
  await first.click();
  await p.waitForURL(/\/ui\/decisions/);
  // The list's reason filter: every decision giving it, allowed or not.
  const giving = answers.filter(a => a.reasons.includes(legendReason)).length;
  const listed = await p.locator('table.decisions tbody tr[data-reasons]').count();
  assert.equal(listed, Math.min(giving, 50), `the list of ${legendReason}`);

  // The page stays within 1280 px.
  await p.goto(srv.base + '/ui/charts');
  await p.screenshot({ path: join(outDir, 'charts.png'), fullPage: true });
  if (process.env.UPDATE_SCREENSHOTS) copyFileSync(join(outDir, 'charts.png'), join(repoRoot, 'docs/ui/charts.png'));
  const w = await p.evaluate(() => [document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]);
  assert.ok(w[0] <= w[1], `the charts scroll sideways: ${w}`);
  await p.close();
});

test("a decision's page shows the shadow candidate's answer", async () => {
  const a = answers[0];
  const p = await open(`/ui/decisions/${a.id}`);
  // The candidate decides after the answer, off the request path: its
  // outcome record reaches the page when it has been logged.
  for (const deadline = Date.now() + 60_000; await p.locator('.shadow-answer').count() === 0; ) {
    assert.ok(Date.now() < deadline, 'no shadow answer within 60 s');
    await new Promise(r => setTimeout(r, 200));
    await p.reload();
  }
  const ans = p.locator('.shadow-answer').first();
  assert.equal(await ans.getAttribute('data-revision'), candidate);
  assert.equal(await ans.getAttribute('data-agreed'), 'true');
  assert.match(await ans.locator('.verdict').innerText(), /Agreed with the live answer/);
  await p.close();
});
