// The run view in Chromium: filter the list to one run, follow its run id
// to the run's page, read its decisions in time order with what changed
// between them, open one; a run id with markup stays text. Nothing here
// names a decision or a field: where each decision names its run is read
// from its input schema's x-arbiter-run-id, as the pages read it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startArbiter, api, fixtures, setPointer, launch, outDir, repoRoot } from './harness.mjs';

let srv, browser, ptrs;

// runPointer is where a schema marks its run id, as a JSON pointer: through
// properties and local $refs, as server/ui's runPointer walks it.
function runPointer(root) {
  const walk = (node, path, depth) => {
    if (!node || typeof node !== 'object' || depth > 32) return null;
    if (typeof node.$ref === 'string' && node.$ref.startsWith('#')) {
      let t = root;
      for (const tok of node.$ref.slice(1).split('/').slice(1)) t = t?.[tok.replaceAll('~1', '/').replaceAll('~0', '~')];
      return walk(t, path, depth + 1);
    }
    if (node['x-arbiter-run-id'] === true && path.length) return '/' + path.map(t => t.replaceAll('~', '~0').replaceAll('/', '~1')).join('/');
    for (const k of Object.keys(node.properties ?? {}).sort()) {
      const p = walk(node.properties[k], [...path, k], depth + 1);
      if (p) return p;
    }
    return null;
  };
  return walk(root, [], 0);
}

before(async () => {
  mkdirSync(outDir, { recursive: true });
  srv = await startArbiter();
  ptrs = new Map();
  for (const d of (await api(srv, 'GET', '/v1/decisions')).json.decisions) {
    const p = runPointer(d.input_schema);
    if (p) ptrs.set(d.name, p);
  }
  assert.ok(ptrs.size >= 2, `the input schemas mark ${ptrs.size} run ids; want one per decision`);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await srv?.stop();
});

async function login(page, path) {
  await page.goto(srv.base + path);
  if (/\/ui\/login/.test(page.url())) {
    await page.fill('#token', srv.token);
    await page.keyboard.press('Enter');
    await page.waitForURL(u => !/\/ui\/login/.test(u.pathname));
  }
}

// aRun posts, for each decision that names a run, two of its fixtures'
// inputs naming run (and, before each, the same input naming another run),
// interleaved; it resolves with the run's decision ids, oldest first.
async function aRun(run) {
  const all = fixtures();
  const ids = [];
  for (const k of [0, 1]) {
    for (const [decision, ptr] of [...ptrs].sort()) {
      const fx = all.filter(f => f.decision === decision)[k];
      for (const r of ['other-' + run, run]) {
        const input = structuredClone(fx.input);
        setPointer(input, ptr, true, r);
        const res = await api(srv, 'POST', `/v1/decisions/${decision}`, input);
        assert.equal(res.status, 200, `${decision}/${fx.name} naming ${r}: ${JSON.stringify(res.json)}`);
        if (r === run) ids.push(res.json.decision_id);
      }
    }
  }
  return ids;
}

async function readable(page, what) {
  const r = await page.evaluate(() => ({
    scrollWidth: document.scrollingElement.scrollWidth,
    fontSize: parseFloat(getComputedStyle(document.body).fontSize),
    h1: document.querySelectorAll('h1').length,
  }));
  assert.ok(r.scrollWidth <= 1280, `${what}: the page is ${r.scrollWidth}px wide at 1280`);
  assert.ok(r.fontSize >= 14, `${what}: body text is ${r.fontSize}px`);
  assert.equal(r.h1, 1, `${what}: one h1`);
}

test('a run: filter the list by it, open its run view, read what changed, open a decision', async () => {
  const run = 'run-e2e-' + randomBytes(4).toString('hex');
  const ids = await aRun(run);
  const page = await browser.newPage();
  await login(page, '/ui/decisions');

  // The list's run filter: exactly the run's decisions, newest first, each
  // showing its run id.
  await page.fill('#f-run', run);
  await page.click('text=Apply filters');
  await page.waitForURL(/run=/);
  const rows = page.locator('table.decisions tbody tr[data-seq]');
  const listed = await rows.evaluateAll(trs => trs.map(tr => tr.querySelector('td a').getAttribute('href').split('/').pop()));
  assert.deepEqual(listed, [...ids].reverse(), 'the run filter lists the run\'s decisions, newest first');
  const runCells = await page.locator('table.decisions tbody td.run').allInnerTexts();
  assert.deepEqual(runCells, ids.map(() => run), 'each row shows its run id');

  // Its run id links the run view: every decision, oldest first.
  await page.locator('table.decisions tbody td.run a').first().click();
  await page.waitForURL(/\/ui\/runs\//);
  await page.waitForSelector('#run-steps');
  const steps = await page.locator('#run-steps li.step').evaluateAll(lis => lis.map(li => li.dataset.id));
  assert.deepEqual(steps, ids, 'the run view lists the run\'s decisions oldest first');
  assert.match(await page.locator('#run-steps li.step').first().innerText(), /first decision of this run/);
  // Two decisions of one decision with different fixtures' inputs: the
  // later one shows what changed, as JSON pointers.
  const third = page.locator('#run-steps li.step').nth(2);
  assert.ok(await third.locator('table.changes tbody tr').count() >= 1, 'the third decision shows no change in its input');
  for (const p of await third.locator('table.changes tbody td:first-child code').allInnerTexts()) {
    assert.match(p, /^\//, `a change at ${p}, not a JSON pointer`);
  }
  await readable(page, 'run');
  await page.screenshot({ path: join(outDir, 'run.png'), fullPage: false });
  if (process.env.UPDATE_SCREENSHOTS) copyFileSync(join(outDir, 'run.png'), join(repoRoot, 'docs/ui/run.png'));

  // Each decision links its page.
  await page.locator('#run-steps li.step').last().locator('a').first().click();
  await page.waitForURL(/\/ui\/decisions\//);
  assert.equal(await page.locator('h1 code.id').innerText(), ids[ids.length - 1]);
  await page.close();
});

test('a run id with markup is text on the list and the run view', async () => {
  const run = `<img src=x onerror="document.title='owned'">` + randomBytes(2).toString('hex');
  // A decision whose run id the schema leaves free: the first one posts.
  let posted = null;
  for (const [decision, ptr] of [...ptrs].sort()) {
    const fx = fixtures().find(f => f.decision === decision);
    const input = structuredClone(fx.input);
    setPointer(input, ptr, true, run);
    const res = await api(srv, 'POST', `/v1/decisions/${decision}`, input);
    if (res.status === 200) { posted = res.json.decision_id; break; }
  }
  assert.ok(posted, 'no decision takes a run id with markup');
  const page = await browser.newPage();
  await login(page, '/ui/decisions?run=' + encodeURIComponent(run));
  assert.equal(await page.locator('table.decisions tbody td.run').first().innerText(), run);
  await page.locator('table.decisions tbody td.run a').first().click();
  await page.waitForSelector('#run-steps');
  assert.equal(await page.locator('h1 code.id').innerText(), run);
  assert.deepEqual(await page.locator('#run-steps li.step').evaluateAll(lis => lis.map(li => li.dataset.id)), [posted]);
  assert.equal(await page.locator('main img').count(), 0, 'the run id became an element');
  assert.notEqual(await page.title(), 'owned');
  await page.close();
});
