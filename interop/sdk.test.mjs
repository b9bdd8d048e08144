// OPA's official TypeScript SDK, pointed at Arbiter, gets Arbiter's decisions.
// Run by cmd/arbiter's TestTypeScriptSDKInterop, which boots the real binary
// and sets ARBITER_URL (and ARBITER_TOKEN when it enables authentication).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { OPAClient } from "@open-policy-agent/opa";
import { ClientError, ServerError, SDKError } from "@open-policy-agent/opa/sdk/models/errors";

const url = process.env.ARBITER_URL;
if (!url) throw new Error("ARBITER_URL is not set");
const token = process.env.ARBITER_TOKEN;
const headers = token ? { authorization: `Bearer ${token}` } : undefined;
const opa = new OPAClient(url, headers ? { headers } : undefined);

const fixturesDir = new URL("../policy_test/fixtures/", import.meta.url).pathname;

// JavaScript numbers are float64: integers beyond 2^53 cannot survive
// JSON.parse, so fixtures holding them are decided through the raw-bytes path
// below instead (see docs/API.md, "For TypeScript callers").
const unsafeInteger = /(?<![\d.eE])\d{16,}(?![\d.eE])/;

function fixtures() {
  const out = [];
  for (const decision of readdirSync(fixturesDir)) {
    for (const file of readdirSync(join(fixturesDir, decision))) {
      const cases = JSON.parse(readFileSync(join(fixturesDir, decision, file), "utf8"));
      for (const [name, fx] of Object.entries(cases)) {
        if (!("want_result" in fx)) continue;
        const raw = JSON.stringify(fx.input);
        out.push({ decision, name, fx, exact: !unsafeInteger.test(readRawInput(decision, file, name)) && !unsafeInteger.test(raw) });
      }
    }
  }
  return out;
}

// The raw text of one fixture's input, to spot u64 values JSON.parse rounded.
const rawFiles = new Map();
function readRawInput(decision, file, name) {
  const key = join(decision, file);
  if (!rawFiles.has(key)) rawFiles.set(key, readFileSync(join(fixturesDir, decision, file), "utf8"));
  const text = rawFiles.get(key);
  const at = text.indexOf(JSON.stringify(name) + ":");
  const next = text.indexOf('"want_', at);
  return text.slice(at, next);
}

const all = fixtures();

test("the SDK decides every fixture exactly as the fixture wants", async () => {
  let decided = 0;
  for (const { decision, name, fx, exact } of all) {
    if (!exact) continue;
    const result = await opa.evaluate(`decisions/${decision}/decision`, fx.input);
    assert.deepEqual(result, fx.want_result, `${decision}/${name}`);
    decided++;
  }
  assert.ok(decided >= 50, `only ${decided} fixtures decided through the SDK`);
});

test("u64 counters: raw bytes forwarded as they are stay exact", async () => {
  let decided = 0;
  for (const { decision, name, fx, exact } of all) {
    if (exact) continue;
    // Re-serialising the parsed object would round the counters; forward
    // the original text instead (here: the fixture's own text of the input).
    const raw = extractInputText(decision, name);
    const res = await fetch(`${url}/v1/decisions/${decision}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(headers ?? {}) },
      body: raw,
    });
    assert.equal(res.status, 200, `${decision}/${name}`);
    const body = await res.json();
    assert.deepEqual(body.result, fx.want_result, `${decision}/${name}`);
    decided++;
  }
  assert.ok(decided >= 1, "no u64 boundary fixture was exercised");
});

test("a rejected input makes the SDK throw, so the caller refuses", async () => {
  await assert.rejects(opa.evaluate("decisions/bootstrap_restart/decision", { run: {} }));
  await assert.rejects(opa.evaluate("decisions/no_such_decision/decision", {}));
});

// OPA's error body on the Data API path ({code, message, errors}) is what the
// SDK parses into its typed errors: a ClientError on a 400, a ServerError on
// a 500, each with the contract's code, so that host preparation can tell a
// bad input from a broken service.
test("malformed input: a typed ClientError with code malformed_json", async () => {
  let deep = {};
  for (let i = 0; i < 1001; i++) deep = { d: deep }; // nesting over 1000: not strict JSON for Arbiter
  await assert.rejects(opa.evaluate("decisions/failure_disposition/decision", deep), (err) => {
    assert.ok(err instanceof ClientError, `got ${err?.constructor?.name}: ${err}`);
    assert.equal(err.code, "malformed_json");
    assert.equal(err.errors?.[0]?.code, "malformed_json");
    assert.match(err.message, /nest/);
    return true;
  });
});

test("schema violations: a typed ClientError listing every violation", async () => {
  await assert.rejects(opa.evaluate("decisions/bootstrap_restart/decision", { run: {} }), (err) => {
    assert.ok(err instanceof ClientError, `got ${err?.constructor?.name}: ${err}`);
    assert.equal(err.code, "input_schema_invalid");
    assert.ok(err.errors.length >= 4, `only ${err.errors.length} violations`);
    for (const e of err.errors) assert.equal(e.code, "input_schema_invalid");
    assert.ok(err.errors.some((e) => e.message.startsWith("/run/runId: ")), JSON.stringify(err.errors));
    return true;
  });
});

test("policy errors: a typed ServerError with code policy_error", async () => {
  // A server on the engine's quota test decision whose result breaks its schema.
  const broken = new OPAClient(process.env.ARBITER_BROKEN_URL);
  await assert.rejects(broken.evaluate("decisions/quota_check/decision", { tenant: "a", used: 1 }), (err) => {
    assert.ok(err instanceof ServerError, `got ${err?.constructor?.name}: ${err}`);
    assert.equal(err.code, "policy_error");
    assert.equal(err.errors?.[0]?.code, "policy_error");
    assert.match(err.data$.decisionId ?? "", /^[0-9a-f-]{36}$/);
    return true;
  });
});

test("an unknown decision is an error too (404: the SDK's generic SDKError)", async () => {
  await assert.rejects(opa.evaluate("decisions/no_such_decision/decision", {}), (err) => {
    assert.ok(err instanceof SDKError, `got ${err?.constructor?.name}: ${err}`);
    assert.equal(err.httpMeta.response.status, 404);
    return true;
  });
});

// extractInputText returns the exact JSON text of a fixture's "input" member.
function extractInputText(decision, name) {
  for (const file of readdirSync(join(fixturesDir, decision))) {
    const text = readFileSync(join(fixturesDir, decision, file), "utf8");
    const at = text.indexOf(JSON.stringify(name) + ":");
    if (at < 0) continue;
    const start = text.indexOf('"input"', at);
    let i = text.indexOf("{", start);
    const begin = i;
    let depth = 0, inStr = false;
    for (; i < text.length; i++) {
      const c = text[i];
      if (inStr) {
        if (c === "\\") i++;
        else if (c === '"') inStr = false;
      } else if (c === '"') inStr = true;
      else if (c === "{") depth++;
      else if (c === "}" && --depth === 0) return text.slice(begin, i + 1);
    }
  }
  throw new Error(`no input text for ${decision}/${name}`);
}
