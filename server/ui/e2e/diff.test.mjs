// The diff and the promotion gate on the policy page, in Chromium at
// 1280x800: a candidate that the diff corpus's budget edit loosens, loaded
// from a deep folder, shows the gate's verdict and evidence beside its
// impact, its found example opens in what-if beside both answers with the
// reasons only one side gives, and a forced promotion is marked in the
// history; nothing is wider than the window. The edit comes from
// diff/testdata/edits, so nothing here names a rule.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startArbiter, launch, openPage, outDir, repoRoot } from './harness.mjs';

let srv, browser, cand;

before(async () => {
  mkdirSync(outDir, { recursive: true });
  srv = await startArbiter(['--diff-timeout', '10m', '--shadow-admins', 'reliability-engineer', '--shadow-min-decisions', '0']);
  // The candidate: the served files in a folder whose path is long, the
  // corpus's edit applied, its fixtures (not its Rego tests) re-recorded
  // by arbiter test --update.
  cand = join(srv.dir, 'candidates', 'a-candidate-folder-with-a-name-long-enough-to-overflow-a-table-cell', 'reviewed-by-the-reliability-team-on-a-long-day', 'rev');
  for (const d of ['policies', 'schemas', 'policy_test/fixtures']) cpSync(join(srv.dir, d), join(cand, d), { recursive: true });
  const edit = JSON.parse(readFileSync(join(repoRoot, 'diff/testdata/edits/budget_plus_one/edit.json'), 'utf8'));
  for (const e of edit.edits) {
    const f = join(cand, e.file);
    const text = readFileSync(f, 'utf8');
    assert.ok(text.includes(e.old), `${f} does not hold ${e.old}`);
    writeFileSync(f, text.replace(e.old, e.new));
  }
  const bin = process.env.ARBITER_BIN || join(repoRoot, 'bin/arbiter');
  execFileSync(bin, ['test', '--update', '--policies', join(cand, 'policies'), '--schemas', join(cand, 'schemas'), '--tests', join(cand, 'policy_test')]);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await srv?.stop();
});

async function admin(method, path, body) {
  const res = await fetch(srv.base + path, {
    method, headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${srv.token}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

const page = path => openPage(browser, srv, path);

// fits asserts that nothing on the page is wider than the 1280 px window,
// the page or any box holding a table.
async function fits(p, what) {
  const r = await p.evaluate(() => ({
    page: [document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth],
    boxes: [...document.querySelectorAll('table, .gate, .diff-example')].map(el => el.parentElement)
      .filter(b => b.scrollWidth > b.clientWidth + 1).map(b => `${b.tagName}.${b.className}: ${b.scrollWidth} > ${b.clientWidth}`),
  }));
  assert.ok(r.page[0] <= r.page[1], `${what}: the page scrolls sideways, ${r.page[0]} > ${r.page[1]}`);
  assert.deepEqual(r.boxes, [], `${what}: boxes wider than their container`);
}

test('the gate beside the impact, the found example in what-if, a forced promotion in the history', async () => {
  const loaded = await admin('POST', '/v1/shadow', { policies: join(cand, 'policies'), schemas: join(cand, 'schemas'), tests: join(cand, 'policy_test') });
  assert.equal(loaded.status, 200, JSON.stringify(loaded.json));
  let shadow;
  for (const deadline = Date.now() + 300_000; ; await new Promise(r => setTimeout(r, 250))) {
    shadow = (await admin('GET', '/v1/shadow')).json;
    if (shadow.diff && !['queued', 'running'].includes(shadow.diff.state)) break;
    assert.ok(Date.now() < deadline, `the diff did not answer within 5 minutes: ${JSON.stringify(shadow.diff)}`);
  }
  assert.equal(shadow.diff.state, 'done', JSON.stringify(shadow.diff));
  assert.equal(shadow.evidence[0].evidence, 'found', JSON.stringify(shadow.evidence));
  assert.equal(shadow.promotable, false);

  const p = await page('/ui/policy');
  await fits(p, 'policy with a candidate');
  assert.match(await p.locator('#gate-verdict').innerText(), /refuses/);
  assert.equal(await p.locator('.gate-beside .gate [data-evidence=found]').first().isVisible(), true);
  assert.ok(await p.locator('.gate .refusals li').count() >= 1, 'the refusals are listed');
  await p.screenshot({ path: join(outDir, 'policy-gate.png'), fullPage: true });

  // The found example opens in what-if beside both answers.
  await p.locator('form.open-example button').first().click();
  await p.waitForURL(/\/ui\/whatif/);
  await fits(p, 'what-if of the example');
  assert.equal(await p.locator('#eval-live').count(), 1, 'the live answer');
  assert.equal(await p.locator('#eval-candidate').count(), 1, 'the candidate answer');
  assert.match(await p.locator('#whatif-result .note').first().innerText(), /differently/);
  assert.ok(await p.locator('#reasons-diff code.reason').count() >= 1, 'the reasons only one side gives');

  // What-if on its own starts from an example, not {}.
  await p.goto(srv.base + '/ui/whatif');
  assert.notEqual((await p.locator('#w-input').inputValue()).trim(), '{}');

  const forced = await admin('POST', '/v1/shadow/promote', { force: true });
  assert.equal(forced.status, 200, JSON.stringify(forced.json));
  assert.equal(forced.json.promotion.forced, true);
  await p.goto(srv.base + '/ui/policy');
  await fits(p, 'policy after the promotion');
  const row = p.locator('table.reloads tbody tr.promotion').first();
  assert.match(await row.innerText(), /promote by reliability-engineer\s+forced/);
  assert.match(await row.locator('.origin').innerText(), /a-candidate-folder-with-a-name-long-enough/);
  await p.screenshot({ path: join(outDir, 'policy-promoted.png'), fullPage: true });
  await p.close();
});
