// The real arbiter binary, the repository's fixtures and Debian's Chromium,
// for the browser tests of the /ui pages. Nothing here names a decision, a
// rule, a field or an outcome: they come from the fixtures and the API.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, existsSync, cpSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import http from 'node:http';
import { chromium } from 'playwright-core';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
export const outDir = join(repoRoot, 'server/ui/e2e/out');

async function freePort() {
  return new Promise((res, rej) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
    s.on('error', rej);
  });
}

// startArbiter runs `arbiter serve` with a token file, a fresh decision log
// and the repository's policies; it resolves once /health answers.
export async function startArbiter(extraArgs = []) {
  const bin = process.env.ARBITER_BIN || join(repoRoot, 'bin/arbiter');
  if (!existsSync(bin)) throw new Error(`no arbiter binary at ${bin}: make build, or set ARBITER_BIN`);
  const dir = mkdtempSync(join(tmpdir(), 'arbiter-ui-'));
  const token = randomBytes(16).toString('hex');
  writeFileSync(join(dir, 'tokens'), `reliability-engineer ${token}\nhost-preparation ${token}-host\n`);
  const port = await freePort();
  const log = join(dir, 'decisions.log');
  // A copy of the policies, so that a test can break one and reload.
  for (const d of ['policies', 'schemas', 'policy_test']) cpSync(join(repoRoot, d), join(dir, d), { recursive: true });
  const args = ['serve', '--addr', `127.0.0.1:${port}`, '--auth-token-file', join(dir, 'tokens'),
    '--decision-log', log, '--state-dir', '', '--log-level', 'error', '--reload-debounce', '1h',
    '--policies', join(dir, 'policies'), '--schemas', join(dir, 'schemas'), '--tests', join(dir, 'policy_test'), ...extraArgs];
  const proc = spawn(bin, args, { stdio: ['ignore', 'inherit', 'inherit'] });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`arbiter exited with ${proc.exitCode}`);
    try { if ((await fetch(base + '/health')).ok) break; } catch { /* not listening yet */ }
    if (Date.now() > deadline) throw new Error('arbiter did not answer /health within 60s');
    await new Promise(r => setTimeout(r, 50));
  }
  // stop ends the process and removes its folder.
  const stop = async () => {
    if (proc.exitCode === null) {
      const done = new Promise(r => proc.once('exit', r));
      proc.kill('SIGTERM');
      await done;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  return { base, token, log, dir, proc, stop };
}

// api calls the API as host preparation does.
export async function api(srv, method, path, body) {
  const res = await fetch(srv.base + path, {
    method, headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${srv.token}-host` },
    body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

// post sends many decisions as api does, over a few kept-alive connections
// (node:http: fetch costs several times its CPU a request), and resolves
// with each answer's status.
export async function post(srv, requests, connections = 8) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
  const statuses = new Array(requests.length);
  let next = 0;
  const one = ({ path, body }) => new Promise((res, rej) => {
    const data = Buffer.from(JSON.stringify(body));
    const req = http.request(srv.base + path, {
      method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': data.length, Authorization: `Bearer ${srv.token}-host` },
    }, r => { r.resume(); r.on('end', () => res(r.statusCode)); });
    req.on('error', rej);
    req.end(data);
  });
  const worker = async () => {
    for (let i = next++; i < requests.length; i = next++) statuses[i] = await one(requests[i]);
  };
  try {
    await Promise.all(Array.from({ length: connections }, worker));
  } finally {
    agent.destroy();
  }
  return statuses;
}

// exact is whether JSON.parse kept every number of a document (a u64
// counter beyond 2^53 does not survive it; those fixtures are for the Go
// tests, which keep every digit).
function exact(v) {
  if (typeof v === 'number') return Number.isSafeInteger(v) || !Number.isInteger(v);
  if (v && typeof v === 'object') return Object.values(v).every(exact);
  return true;
}

// fixtures are the accepted inputs of policy_test/fixtures, by decision.
export function fixtures() {
  const root = join(repoRoot, 'policy_test/fixtures');
  const out = [];
  for (const decision of readdirSync(root)) {
    for (const file of readdirSync(join(root, decision))) {
      const cases = JSON.parse(readFileSync(join(root, decision, file), 'utf8'));
      for (const [name, c] of Object.entries(cases)) {
        if (c.input !== undefined && !c.want_error && exact(c.input)) out.push({ decision, name, input: c.input });
      }
    }
  }
  return out;
}

export function getPointer(doc, ptr) {
  let cur = doc;
  for (const raw of ptr.split('/').slice(1)) {
    const tok = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    if (cur === null || typeof cur !== 'object' || !(tok in cur)) return { found: false };
    cur = cur[tok];
  }
  return { found: true, value: cur };
}

export function setPointer(doc, ptr, found, value) {
  const toks = ptr.split('/').slice(1).map(t => t.replaceAll('~1', '/').replaceAll('~0', '~'));
  let cur = doc;
  for (const tok of toks.slice(0, -1)) {
    if (cur[tok] === null || typeof cur[tok] !== 'object') cur[tok] = {};
    cur = cur[tok];
  }
  const last = toks[toks.length - 1];
  if (found) cur[last] = structuredClone(value); else delete cur[last];
}

// launch starts Debian's Chromium, headless, with a fresh profile (Playwright
// passes it as --user-data-dir) and no network but loopback.
export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), 'chromium-profile-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 800 },
  });
  // close also removes the profile, once the browser has exited.
  const close = ctx.close.bind(ctx);
  ctx.close = async (...args) => {
    await close(...args);
    rmSync(profile, { recursive: true, force: true });
  };
  return ctx;
}

// logLines counts the records of the decision log.
export function logLines(srv) {
  if (!existsSync(srv.log)) return 0;
  return readFileSync(srv.log, 'utf8').split('\n').filter(l => l.trim() !== '').length;
}

// logged waits until the decision log holds the record of decision id
// (the log is written in batches, after the answer), up to 30 s.
export async function logged(srv, id) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (existsSync(srv.log) && readFileSync(srv.log, 'utf8').includes(`"decision_id":"${id}"`)) return;
    await new Promise(r => setTimeout(r, 20));
  }
  throw new Error(`decision ${id} is not in the decision log after 30 s`);
}

// openPage opens path of srv in a new page of browser, signing in with
// srv's token when the page asks for it (and opening path again then).
export async function openPage(browser, srv, path) {
  const p = await browser.newPage();
  await p.goto(srv.base + path);
  if (/\/ui\/login/.test(p.url())) {
    await p.fill('#token', srv.token);
    await p.keyboard.press('Enter');
    await p.waitForURL(u => !/\/ui\/login/.test(u.pathname));
    await p.goto(srv.base + path);
  }
  return p;
}
