// A page load with 10,000 decisions in the ring, in Chromium against the
// real binary. It prints what it measured (docs/PAGES.md quotes it) and
// asserts only that the page is bounded: one page of rows, whatever the
// ring holds. No wall-clock threshold: timings on a shared machine are
// reported, not tested.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startArbiter, post, fixtures, launch } from './harness.mjs';

const N = 10_000;
let srv, browser;

before(async () => {
  srv = await startArbiter(['--ui-recent', String(N)]);
  const all = fixtures();
  const statuses = await post(srv, Array.from({ length: N }, (_, i) => {
    const fx = all[i % all.length];
    return { path: `/v1/decisions/${fx.decision}`, body: fx.input };
  }));
  assert.deepEqual(statuses.filter(s => s !== 200), [], 'every decision answered 200');
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await srv?.stop();
});

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

test(`the newest page of decisions with ${N} in memory`, async () => {
  const page = await browser.newPage();
  await page.goto(srv.base + '/ui/login');
  await page.fill('#token', srv.token);
  await page.keyboard.press('Enter');
  await page.waitForURL(/\/ui\/decisions/);
  for (const [label, query] of [['newest page', ''], ['filtered to errors (a scan of the whole ring)', '?outcome=error']]) {
    const samples = [];
    let bytes = 0;
    for (let i = 0; i < 7; i++) {
      await page.goto(srv.base + '/ui/decisions' + query);
      const t = await page.evaluate(() => {
        const n = performance.getEntriesByType('navigation')[0];
        return { ttfb: n.responseStart - n.requestStart, response: n.responseEnd - n.requestStart, load: n.loadEventEnd - n.startTime, size: n.transferSize };
      });
      samples.push(t);
      bytes = t.size;
    }
    const inMemory = await page.locator('#count').innerText();
    assert.match(inMemory, new RegExp(`${N} decisions in memory`), inMemory);
    const rows = await page.locator('table.decisions tbody tr[data-seq]').count();
    assert.ok(rows <= 50, `${rows} rows on one page`);
    if (query === '') assert.equal(rows, 50, 'a full first page');
    const fmt = k => `median ${median(samples.map(s => s[k])).toFixed(1)} ms, max ${Math.max(...samples.map(s => s[k])).toFixed(1)} ms`;
    console.log(`# measured: ${label}: ${rows} rows, ${bytes} bytes; server answer ${fmt('response')}; page load ${fmt('load')} (7 loads, 1280x800, ${N} decisions in memory)`);
  }
  await page.close();
});
