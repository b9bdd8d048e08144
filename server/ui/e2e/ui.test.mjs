// End-to-end tests of the /ui pages: Debian's Chromium, driven by
// playwright-core, against the real arbiter binary. Run: make ui-e2e.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, copyFileSync, writeFileSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startArbiter, api, fixtures, getPointer, setPointer, launch, logLines, logged, outDir, repoRoot } from './harness.mjs';

let srv, browser, flip;
// Where the decision page links a trace (--ui-trace-url); nothing listens.
const traceURL = 'http://127.0.0.1:9/trace/{trace_id}?from=arbiter';

// flipCase finds, from the fixtures alone, a refusal that the values of an
// allowed input of the same decision, put at the refusal's evidence
// pointers, turn into an allowance: what an engineer does with the page.
async function flipCase(all) {
  const keys = new Map();
  for (const d of (await api(srv, 'GET', '/v1/decisions')).json.decisions) {
    keys.set(d.name, d.result_schema['x-arbiter-outcome'] ?? 'outcome');
  }
  const allowed = new Map();
  const refused = [];
  for (const fx of all) {
    const r = await api(srv, 'POST', `/v1/decisions/${fx.decision}?explain=true`, fx.input);
    assert.equal(r.status, 200, `${fx.decision}/${fx.name}: ${JSON.stringify(r.json)}`);
    const reasons = r.json.result.reasons ?? [];
    if (reasons.length === 0) {
      if (!allowed.has(fx.decision)) allowed.set(fx.decision, fx);
    } else if (reasons.length === 1) {
      refused.push({ fx, id: r.json.decision_id, reason: reasons[0], outcome: String(r.json.result[keys.get(fx.decision)]), explanation: r.json.explanation });
    }
  }
  for (const ref of refused) {
    const ok = allowed.get(ref.fx.decision);
    if (!ok) continue;
    const evidence = ref.explanation.filter(e => e.fired).flatMap(e => e.evidence ?? []).filter(ev => ev.path !== undefined);
    const input = structuredClone(ref.fx.input);
    const changed = [];
    for (const ev of evidence) {
      const { found, value } = getPointer(ok.input, ev.path);
      const cur = getPointer(input, ev.path);
      if (JSON.stringify(cur) === JSON.stringify({ found, value })) continue;
      setPointer(input, ev.path, found, value);
      changed.push({ path: ev.path, value });
    }
    if (changed.length === 0) continue;
    const check = await api(srv, 'POST', `/v1/decisions/${ref.fx.decision}`, input);
    if (check.status === 200 && (check.json.result.reasons ?? []).length === 0) {
      return { ...ref, fixedInput: input, changed, allowedInput: ok.input };
    }
  }
  throw new Error('no refusal among the fixtures flips with an allowed input\'s values at its evidence');
}

before(async () => {
  mkdirSync(outDir, { recursive: true });
  srv = await startArbiter(['--ui-trace-url', traceURL]);
  flip = await flipCase(fixtures());
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await srv?.stop();
});

async function login(page) {
  await page.goto(srv.base + '/ui/decisions');
  assert.match(page.url(), /\/ui\/login/, 'an unauthenticated page goes to the login page');
  await page.fill('#token', srv.token);
  await page.keyboard.press('Enter');
  await page.waitForURL(/\/ui\/decisions/);
}

async function shot(page, name, fullPage = false) {
  await page.screenshot({ path: join(outDir, name + '.png'), fullPage });
  if (process.env.UPDATE_SCREENSHOTS) {
    mkdirSync(join(repoRoot, 'docs/ui'), { recursive: true });
    copyFileSync(join(outDir, name + '.png'), join(repoRoot, 'docs/ui', name + '.png'));
  }
}

// readable checks what 1280x800 shows: nothing wider than the window, body
// text of at least 14px, and every control labelled.
async function readable(page, what) {
  const r = await page.evaluate(() => {
    const unlabelled = [...document.querySelectorAll('select, input:not([type=hidden]), textarea')]
      .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')).map(el => el.outerHTML.slice(0, 80));
    return {
      scrollWidth: document.scrollingElement.scrollWidth,
      fontSize: parseFloat(getComputedStyle(document.body).fontSize),
      unlabelled,
      h1: document.querySelectorAll('h1').length,
      // A table wider than its box spills over its neighbours.
      spilling: [...document.querySelectorAll('table')].filter(t => t.getBoundingClientRect().width > 0 &&
        t.scrollWidth > t.parentElement.clientWidth + 1).map(t => t.className + ' in ' + t.parentElement.className),
    };
  });
  assert.ok(r.scrollWidth <= 1280, `${what}: the page is ${r.scrollWidth}px wide at 1280`);
  assert.ok(r.fontSize >= 14, `${what}: body text is ${r.fontSize}px`);
  assert.deepEqual(r.unlabelled, [], `${what}: controls without a label`);
  assert.equal(r.h1, 1, `${what}: one h1`);
  assert.deepEqual(r.spilling, [], `${what}: tables wider than their box`);
}

test('filter to a refusal, open it, read its evidence, flip it with a what-if', async () => {
  const page = await browser.newPage();
  await login(page);
  await readable(page, 'decisions');
  await shot(page, 'decisions');

  // Filter to the refusal's decision, outcome and reason.
  await page.selectOption('#f-decision', flip.fx.decision);
  await page.selectOption('#f-outcome', flip.outcome);
  await page.selectOption('#f-reason', flip.reason);
  await page.click('text=Apply filters');
  await page.waitForURL(/reason=/);
  const rows = page.locator('table.decisions tbody tr[data-seq]');
  assert.ok(await rows.count() >= 1, 'the filter keeps the refusal');
  for (const reasons of await rows.evaluateAll(trs => trs.map(tr => tr.dataset.reasons.split(' ')))) {
    assert.ok(reasons.includes(flip.reason), `a filtered row without ${flip.reason}: ${reasons}`);
  }
  await shot(page, 'decisions-filtered');

  // Open the refusal logged for the fixture.
  await page.goto(srv.base + '/ui/decisions/' + flip.id);
  await page.waitForSelector('li.rule.fired');
  const evidence = await page.locator('li.rule.fired code.ptr').allInnerTexts();
  for (const c of flip.changed) {
    assert.ok(evidence.includes(c.path), `the page's evidence ${evidence} lacks ${c.path}`);
  }
  await readable(page, 'decision');
  await shot(page, 'decision');

  // What if: the input with the allowed values at the evidence pointers
  // (its explanation asked of the API first: that one is logged).
  const asked = (await api(srv, 'POST', `/v1/decisions/${flip.fx.decision}?explain=true`, flip.fixedInput)).json;
  const held = asked.explanation;
  await logged(srv, asked.decision_id);
  const linesBefore = logLines(srv);
  await page.fill('#w-input', JSON.stringify(flip.fixedInput, null, 2));
  await page.click('#w-run');
  await page.waitForSelector('#whatif-result');
  const verdict = await page.locator('#whatif-result .verdict').first().innerText();
  assert.match(verdict, /with no reasons/, `the what-if did not flip: ${verdict}`);
  assert.equal(await page.locator('#whatif-result li.rule.fired').count(), 0);
  // The allowance lists every rule as a condition that held, with the
  // values the API's explanation says each checked: among them the values
  // the what-if changed.
  const shownHeld = await page.locator('#whatif-result li.rule.held').evaluateAll(lis => lis.map(li =>
    [...li.querySelectorAll('table.evidence tbody tr')].map(tr => [tr.querySelector('th').innerText, tr.querySelector('td').innerText])));
  assert.equal(shownHeld.length, held.length, 'every rule held');
  assert.ok(await page.locator('#whatif-result li.rule.held').first().isVisible(), 'an allowance shows the conditions that held open');
  held.forEach((r, i) => {
    assert.equal(r.fired, false);
    const want = r.checked.map(ev => [ev.data ? 'data.' + ev.data : ev.path, ev.absent ? 'absent' : ev.summary ?? JSON.stringify(ev.value)]);
    assert.deepEqual(shownHeld[i].map(([at, was]) => [at, was.startsWith('{') || was.startsWith('[') ? JSON.stringify(JSON.parse(was)) : was]), want, `rule ${r.reason}`);
  });
  for (const c of flip.changed) {
    const ev = held.flatMap(r => r.checked).find(ev => ev.path === c.path);
    assert.ok(ev, `no held rule checked ${c.path}`);
    if (c.value === undefined) assert.equal(ev.absent, true, c.path);
    else if (ev.summary === undefined) assert.deepEqual(ev.value, c.value, c.path);
  }
  await page.locator('#whatif-result').scrollIntoViewIfNeeded();
  await shot(page, 'whatif');

  // Paste a document read from a file (a runner-state.json): the allowed
  // input's largest object member goes, by default, where it belongs.
  const ok = flip.allowedInput;
  const member = Object.keys(ok).filter(k => ok[k] && typeof ok[k] === 'object' && !Array.isArray(ok[k]))
    .sort((a, b) => Object.keys(ok[b]).length - Object.keys(ok[a]).length)[0];
  const file = join(outDir, 'runner-state.json');
  writeFileSync(file, JSON.stringify(ok[member], null, 2));
  await page.fill('#w-input', JSON.stringify({ ...flip.fx.input, [member]: null }, null, 2));
  await page.click('details.paste summary');
  await page.setInputFiles('#w-file', file);
  await page.waitForFunction(() => document.getElementById('w-paste').value.length > 0);
  await page.click('#w-run');
  await page.waitForSelector('#whatif-result');
  const merged = JSON.parse(await page.inputValue('#w-input'));
  assert.deepEqual(merged[member], ok[member], `the pasted document is not at /${member}`);
  assert.equal(await page.inputValue('#w-at'), `/${member}`);

  // Nothing evaluated from the page is logged: a marker decision made after
  // it is the only new record.
  const marker = await api(srv, 'POST', `/v1/decisions/${flip.fx.decision}`, flip.fx.input);
  await logged(srv, marker.json.decision_id);
  assert.equal(logLines(srv), linesBefore + 1, 'the decision log gained a record for the what-if');
  await page.close();
});

test('keyboard only: log in, filter, open a decision, run a what-if', async () => {
  const ctx = browser; // the same profile: log out first
  const page = await ctx.newPage();
  await page.goto(srv.base + '/ui/decisions');
  if (!/\/ui\/login/.test(page.url())) {
    await page.evaluate(() => document.querySelector('form.logout button').click());
    await page.waitForURL(/\/ui\/login/);
  }
  // The token field takes the focus (autofocus, applied once the page is
  // rendered); type and Enter.
  await page.waitForFunction(() => document.activeElement && document.activeElement.id === 'token');
  await page.keyboard.type(srv.token);
  await page.keyboard.press('Enter');
  await page.waitForURL(/\/ui\/decisions/);

  const focused = () => page.evaluate(() => {
    const el = document.activeElement;
    return { tag: el.tagName.toLowerCase(), id: el.id, text: (el.innerText || el.value || '').trim().slice(0, 60), href: el.getAttribute('href') };
  });
  async function tabTo(pred, what, max = 80) {
    for (let i = 0; i < max; i++) {
      await page.keyboard.press('Tab');
      const f = await focused();
      if (pred(f)) return f;
    }
    throw new Error(`Tab never reached ${what}`);
  }
  // The skip link comes first.
  await page.keyboard.press('Tab');
  assert.equal((await focused()).text, 'Skip to content');

  // The decision and reason filters: selects, changed with the keyboard.
  for (const [id, value] of [['f-decision', flip.fx.decision], ['f-reason', flip.reason]]) {
    await tabTo(f => f.id === id, id);
    const options = await page.locator(`#${id} option`).allInnerTexts();
    const target = options.indexOf(value);
    assert.ok(target > 0, `${value} is not offered by ${id}`);
    for (let i = 0; i < target; i++) await page.keyboard.press('ArrowDown');
    assert.equal(await page.inputValue(`#${id}`), value);
  }
  await tabTo(f => f.text === 'Apply filters', 'Apply filters');
  await page.keyboard.press('Enter');
  await page.waitForURL(/reason=/);

  // The first row's link, then Enter.
  const link = await tabTo(f => f.tag === 'a' && /\/ui\/decisions\/[^?]+$/.test(f.href || ''), 'a decision link');
  await page.keyboard.press('Enter');
  await page.waitForURL(u => u.pathname === link.href);
  await page.waitForSelector('li.rule.fired');

  // The what-if input: select all, type the fixed input, Tab to the button.
  await tabTo(f => f.id === 'w-input', 'the what-if input', 200);
  await page.keyboard.press('Control+A');
  await page.keyboard.insertText(JSON.stringify(flip.fixedInput));
  await tabTo(f => f.id === 'w-run', 'Evaluate');
  await page.keyboard.press('Enter');
  // The result takes the focus, so the keyboard continues from it.
  await page.waitForFunction(() => document.activeElement && document.activeElement.id === 'whatif-result');
  assert.match(await page.locator('#whatif-result .verdict').first().innerText(), /with no reasons/);
  // Focus is visible: the outline of a focused link is drawn.
  await page.keyboard.press('Shift+Tab');
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  assert.notEqual(outline, 'none', 'the focused element has no visible outline');
  await page.close();
});

test('live updates: a new decision appears on the open page', async () => {
  const page = await browser.newPage();
  await page.goto(srv.base + '/ui/decisions');
  if (/\/ui\/login/.test(page.url())) { await login(page); }
  await page.waitForSelector('table.decisions[data-connected="true"]');
  const r = await api(srv, 'POST', `/v1/decisions/${flip.fx.decision}`, flip.fx.input);
  await page.waitForSelector(`table.decisions tbody tr:first-child a[href$="${r.json.decision_id}"]`, { timeout: 30_000 });
  assert.match(await page.locator('#live-status').innerText(), /1 new decision/);
  await page.close();
});

test('policy status: a refused candidate\'s problems as file:line; readable at 1280x800', async () => {
  // Break a policy file of the served copy, reload (refused), mend it.
  const policies = join(srv.dir, 'policies');
  const rego = readdirSync(policies, { recursive: true }).map(f => join(policies, f)).find(f => f.endsWith('.rego'));
  const good = readFileSync(rego, 'utf8');
  writeFileSync(rego, good + '\nthis line is not rego\n');
  const refused = await api(srv, 'POST', '/v1/reload');
  assert.equal(refused.json.ok, false, JSON.stringify(refused.json));
  writeFileSync(rego, good);

  const page = await browser.newPage();
  await page.goto(srv.base + '/ui/policy');
  if (/\/ui\/login/.test(page.url())) { await login(page); await page.goto(srv.base + '/ui/policy'); }
  await readable(page, 'policy');
  const rows = page.locator('table.reloads tbody tr');
  assert.ok(await rows.count() >= 2, 'the reload history has the first load and the refusal');
  const newest = await rows.first().innerText();
  assert.match(newest, /refused/);
  const problems = await rows.first().locator('ul.problems li').allInnerTexts();
  const lines = good.split('\n').length;
  assert.ok(problems.some(p => p.startsWith(`${rego}:${lines + 1}:`)), `no problem at ${rego}:${lines + 1} in ${problems}`);
  assert.match(await rows.nth(1).innerText(), /activated/);
  await shot(page, 'policy');
  await page.goto(srv.base + '/ui/whatif');
  await readable(page, 'whatif');
  await page.close();
});

test('a decision\'s page links the trace its caller sent, with no exporter', async () => {
  const traceID = randomBytes(16).toString('hex');
  const res = await fetch(`${srv.base}/v1/decisions/${flip.fx.decision}`, {
    method: 'POST', body: JSON.stringify(flip.fx.input),
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${srv.token}-host`, traceparent: `00-${traceID}-00f067aa0ba902b7-01` },
  });
  assert.equal(res.status, 200);
  const { decision_id: id } = await res.json();
  const page = await browser.newPage();
  await page.goto(srv.base + '/ui/decisions/' + id);
  if (/\/ui\/login/.test(page.url())) { await login(page); await page.goto(srv.base + '/ui/decisions/' + id); }
  const link = page.locator('a.trace');
  assert.equal(await link.innerText(), traceID);
  assert.equal(await link.getAttribute('href'), traceURL.replace('{trace_id}', traceID));
  await readable(page, 'decision with a trace');
  await page.close();
});
