// Unit checks of www/ssekd-client/writes.js with a scripted fetch (tests/test_client_writes.py
// runs this with node): the retry rules, the keys, the etags and the conflicts, without a server.
import assert from "node:assert/strict";
import { writer, Conflict, HttpError, etagOfId } from "../../../www/ssekd-client/writes.js";

const said = [];
for (const m of ["log", "info", "warn", "error", "debug", "trace"]) {
  console[m] = (...args) => said.push(args.map(String).join(" "));
}

// A fetch that answers from a script: each entry an answer (status, headers, body) or "cut".
function scripted(script) {
  const sent = [];
  const fetch = async (url, init) => {
    sent.push({ url, method: init.method, headers: Object.fromEntries(init.headers), at: Date.now() });
    const next = script.shift();
    if (next === undefined) throw new Error(`nothing scripted for ${init.method} ${url}`);
    if (next === "cut") throw new TypeError("Failed to fetch");
    return new Response(next.body ?? null, { status: next.status, headers: next.headers || {} });
  };
  return { fetch, sent };
}

const fast = { min: 20, max: 80, attempts: 4 };
const checks = {};

checks["a write cut twice is sent three times with one key"] = async () => {
  const { fetch, sent } = scripted(["cut", "cut", { status: 201 }]);
  const a = await writer("http://h/", { fetch, retry: fast }).post("/tasks", { title: "x" });
  assert.equal(a.status, 201);
  assert.equal(a.attempts, 3);
  assert.equal(new Set(sent.map((s) => s.headers["idempotency-key"])).size, 1);
  assert.equal(a.idempotencyKey, sent[0].headers["idempotency-key"]);
  assert.match(a.idempotencyKey, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  // jittered exponential: the n-th wait is between half and all of min * 2^n
  const gaps = [sent[1].at - sent[0].at, sent[2].at - sent[1].at];
  assert.ok(gaps[0] >= 9 && gaps[1] >= 19, `gaps ${gaps}`);
};

checks["two writes have two keys"] = async () => {
  const { fetch, sent } = scripted([{ status: 204 }, { status: 204 }]);
  const w = writer("http://h/", { fetch, retry: fast });
  await w.put("/tasks/a", { title: "x" });
  await w.put("/tasks/a", { title: "x" });
  assert.notEqual(sent[0].headers["idempotency-key"], sent[1].headers["idempotency-key"]);
};

checks["a 503 waits its Retry-After"] = async () => {
  const { fetch, sent } = scripted([{ status: 503, headers: { "retry-after": "1" } }, { status: 204 }]);
  const a = await writer("http://h/", { fetch, retry: fast }).delete("/tasks/a");
  assert.equal(a.status, 204);
  assert.ok(sent[1].at - sent[0].at >= 1000, "not before Retry-After");
  assert.equal(sent[0].headers["idempotency-key"], sent[1].headers["idempotency-key"]);
};

checks["a 4xx is not retried"] = async () => {
  for (const status of [400, 404, 409, 413]) {
    const { fetch, sent } = scripted([{ status, body: "no" }]);
    await assert.rejects(writer("http://h/", { fetch, retry: fast }).post("/t", "x"),
      (e) => e instanceof HttpError && !(e instanceof Conflict) && e.status === status);
    assert.equal(sent.length, 1);
  }
};

checks["network errors past the attempts throw, with the key to send it again"] = async () => {
  const { fetch, sent } = scripted(["cut", "cut", "cut", "cut", { status: 201 }]);
  const w = writer("http://h/", { fetch, retry: fast });
  let key;
  await assert.rejects(w.post("/t", "x"), (e) => { key = e.idempotencyKey; return e instanceof TypeError; });
  assert.equal(sent.length, 4);
  await w.post("/t", "x", { key });
  assert.equal(sent[4].headers["idempotency-key"], key);
};

checks["a token is sent as Bearer, renewed once after a 401"] = async () => {
  let n = 0;
  const token = async () => `SECRET-${++n}`;
  const { fetch, sent } = scripted([{ status: 401 }, { status: 204 }, { status: 401 }, { status: 401 }]);
  const w = writer("http://h/", { fetch, retry: fast, token });
  await w.put("/a", "x");
  assert.deepEqual(sent.map((s) => s.headers.authorization), ["Bearer SECRET-1", "Bearer SECRET-2"]);
  await assert.rejects(w.put("/a", "x"), (e) => e.status === 401 && !String(e.message).includes("SECRET"));
  assert.equal(sent.length, 4);
};

checks["If-Match: the etag read, a key-form id's etag, forgotten after a write"] = async () => {
  const { fetch, sent } = scripted([
    { status: 200, body: '{"a":1}', headers: { etag: "AQ==/3", "content-type": "application/json" } },
    { status: 204 }, { status: 204 }, { status: 204 }, { status: 204 }]);
  const w = writer("http://h/api", { fetch, retry: fast });
  const got = await w.get("/tasks/a");
  assert.deepEqual(got.value, { a: 1 });
  assert.equal(sent[0].url, "http://h/api/tasks/a");
  await w.put("/tasks/a", { a: 2 });
  assert.equal(sent[1].headers["if-match"], "AQ==/3");
  await w.put("/tasks/a", { a: 3 });
  assert.equal(sent[2].headers["if-match"], undefined, "the etag named the version before the write");
  w.seen("/tasks/a", '["YQ","AAAC/7"]');
  await w.delete("/tasks/a");
  assert.equal(sent[3].headers["if-match"], "AAAC/7");
  await w.put("/tasks/b", "x", { ifMatch: '["Yg","AAAD/9"]' });
  assert.equal(sent[4].headers["if-match"], "AAAD/9");
  assert.equal(etagOfId('["Yg","AAAD/9"]'), "AAAD/9");
  assert.equal(etagOfId("12-3"), null);
};

checks["a 412 with JSON carries it; without, the value is read; gone is null"] = async () => {
  let { fetch, sent } = scripted([{ status: 412, body: '{"title":"b"}',
    headers: { "content-type": "application/json", etag: "A/2" } }]);
  await assert.rejects(writer("http://h/", { fetch, retry: fast }).put("/t/a", "x", { ifMatch: "A/1" }),
    (e) => e instanceof Conflict && e.current.title === "b" && e.etag === "A/2");
  assert.equal(sent.length, 1);
  ({ fetch, sent } = scripted([{ status: 412, body: "changed", headers: { "content-type": "text/plain" } },
    { status: 200, body: '{"title":"c"}', headers: { "content-type": "application/json", etag: "A/5" } }]));
  const w = writer("http://h/", { fetch, retry: fast });
  await assert.rejects(w.put("/t/a", "x", { ifMatch: "A/1" }),
    (e) => e instanceof Conflict && e.status === 412 && e.current.title === "c" && e.etag === "A/5");
  assert.equal(sent[1].method, "GET");
  assert.equal(w.etag("/t/a"), "A/5");
  ({ fetch, sent } = scripted([{ status: 412, body: "changed" }, { status: 404 }]));
  await assert.rejects(writer("http://h/", { fetch, retry: fast }).delete("/t/a", undefined, { ifMatch: "A/1" }),
    (e) => e instanceof Conflict && e.current === null);
};

checks["an async write follows its location until the answer"] = async () => {
  const { fetch, sent } = scripted([
    { status: 202, headers: { location: "/t/a;k-1.x" } },
    { status: 202, headers: { location: "/t/a;k-1.x" } },
    "cut",
    { status: 200, body: "done" }]);
  const a = await writer("http://h/", { fetch, retry: fast, wait: 7 }).put("/t/a", "x", { async: true });
  assert.equal(a.status, 200);
  assert.equal(a.text, "done");
  assert.equal(a.accepted, true);
  assert.equal(a.location, "http://h/t/a;k-1.x");
  assert.equal(sent[0].headers.prefer, "respond-async");
  assert.deepEqual(sent.slice(1).map((s) => [s.method, s.url, s.headers.prefer]),
    Array(3).fill(["GET", "http://h/t/a;k-1.x", "wait=7"]));
};

let failed = 0;
for (const [name, check] of Object.entries(checks)) {
  try {
    await check();
    process.stdout.write(`ok ${name}\n`);
  } catch (e) {
    failed += 1;
    process.stdout.write(`FAILED ${name}: ${e.stack}\n`);
  }
}
if (said.length) {
  failed += 1;
  process.stdout.write(`FAILED the writer logged: ${JSON.stringify(said)}\n`);
}
process.exit(failed ? 1 : 0);
