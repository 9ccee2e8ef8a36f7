// Unit checks of www/ssekd-client/stream.js under Node.js with a scripted transport (no
// server): the parser's rules, resume from storage, the backoff window, what each status does,
// token refresh and challenge renewal, topic routing, and that nothing is logged.
// Run by tests/test_client_stream.py; prints "ok <name>" per check, exits 1 on the first failure.
import assert from "node:assert/strict";
import { parser, openStream } from "../../../www/ssekd-client/stream.js";

const URL_ = "http://test.invalid/events";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack}`);
    process.exit(1);
  }
}

function sse(text, status = 200, type = "text/event-stream") {
  return new Response(text, { status, headers: { "content-type": type } });
}

function memory(initial = {}) {
  const m = new Map(Object.entries(initial));
  return { getItem: (k) => (m.has(k) ? m.get(k) : null), setItem: (k, v) => m.set(k, v),
           removeItem: (k) => m.delete(k), map: m };
}

// An event stream that says `text` and then stays open.
function open(text) {
  const body = new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode(text)); } });
  return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
}

// A transport that answers each request with the next scripted answer (a function of the
// request), then hangs (an open stream with nothing to say).
function scripted(...answers) {
  const requests = [];
  const transport = async (url, init) => {
    requests.push({ url, init, headers: init.headers || {} });
    const next = answers.shift();
    if (next) return next(url, init);
    return new Promise((_, reject) => init.signal && init.signal.addEventListener("abort",
      () => reject(new DOMException("aborted", "AbortError"))));
  };
  return { transport, requests };
}

function until(fn, ms = 2000) {
  const end = Date.now() + ms;
  return (async () => {
    while (!fn()) {
      if (Date.now() > end) throw new Error("timed out waiting");
      await sleep(5);
    }
  })();
}

const logged = [];
for (const level of ["log", "info", "warn", "error", "debug"]) {
  const original = console[level];
  console[level] = (...args) => {
    if (!String(args[0]).startsWith("ok ") && !String(args[0]).startsWith("FAIL")) logged.push(args);
    original.apply(console, args);
  };
}

await check("parser: fields, multi-line data, comments, retry, CR/LF/CRLF split anywhere, BOM", () => {
  const out = [];
  const p = parser((e) => out.push(e), (r) => out.push({ retry: r }), (c) => out.push({ comment: c }));
  const text = "retry:1500\r\nretry: x\n: hi there\r\nid:1\ndata:a\rdata: b\r\n\r\n" +
    "event:delete\nid:2\n\nevent:orders:delete\ndata:x\ntopic:t\n\nid:bad\0id\ndata\nunknown:1\n\n";
  for (const ch of text) p.feed(ch); // one character at a time: CR LF split across reads
  assert.deepEqual(out, [
    { retry: 1500 }, { comment: "hi there" },
    { type: "message", data: "a\nb", id: "1" },
    { type: "delete", data: "", id: "2" },
    { type: "orders:delete", data: "x", id: "2", topic: "t" },
    { type: "message", data: "", id: "2" },
  ]);
  const bom = [];
  const q = parser((e) => bom.push(e), () => {}, () => {});
  q.feed(new TextDecoder().decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x64, 0x61, 0x74, 0x61, 0x3a, 0x31, 0x0a, 0x0a])));
  assert.deepEqual(bom, [{ type: "message", data: "1", id: null }]);
});

await check("resume: the stored id goes as ?lastEventId= and Last-Event-ID; each id is stored", async () => {
  const storage = memory({ ["ssekd:last-id:" + URL_]: "AQIAAg==" });
  const { transport, requests } = scripted(() => sse("id:AQIABA==\ndata:x\n\n"));
  const s = openStream(URL_, { storage, transport, retry: { min: 100000 } });
  const got = [];
  s.on("message", (e) => got.push(e));
  await until(() => got.length === 1);
  assert.equal(new URL(requests[0].url).searchParams.get("lastEventId"), "AQIAAg==");
  assert.equal(requests[0].headers["last-event-id"], "AQIAAg==");
  assert.equal(storage.getItem("ssekd:last-id:" + URL_), "AQIABA==");
  assert.equal(s.lastEventId, "AQIABA==");
  s.close();
  const fresh = scripted();
  const t = openStream(URL_, { storage: null, transport: fresh.transport });
  await until(() => fresh.requests.length === 1);
  assert.equal(fresh.requests[0].url, URL_, "no id: the url as given");
  assert.equal(fresh.requests[0].headers["last-event-id"], undefined);
  t.close();
  // a key-form id with a non-ASCII key cannot be a header: the query carries it
  const wide = scripted();
  const u = openStream(URL_, { storage: null, transport: wide.transport, lastEventId: '["ключ","AQIAAg=="]' });
  await until(() => wide.requests.length === 1);
  assert.equal(wide.requests[0].headers["last-event-id"], undefined);
  assert.equal(new URL(wide.requests[0].url).searchParams.get("lastEventId"), '["ключ","AQIAAg=="]');
  u.close();
});

await check("backoff: full jitter over [0, base * 2^n], the server's retry: as base, capped", async () => {
  const { transport, requests } = scripted(
    () => sse("retry:40\n: try later: busy\n\n"), () => sse(": try later\n\n"),
    () => sse(": try later\n\n"), () => { throw new TypeError("network"); },
    () => sse("id:1\ndata:x\n\n"), () => sse(""));
  const delays = [];
  const random = Math.random;
  Math.random = () => 0.999;
  try {
    const s = openStream(URL_, { storage: null, transport, retry: { min: 5000, max: 200 } });
    s.onState((st, info) => { if (st === "waiting") delays.push([info.delay, info.reason]); });
    await until(() => requests.length === 7, 5000);
    s.close();
  } finally {
    Math.random = random;
  }
  assert.deepEqual(delays.map(([d]) => d), [39, 79, 159, 199, 39, 79],
                   "doubles while refused, capped at max, back to the base after an event");
  assert.deepEqual(delays.map(([, why]) => why), ["the stream ended", "the stream ended",
    "the stream ended", "network error", "the stream ended", "the stream ended"]);
});

await check("status: 204 stops; 5xx retries; 404 and a wrong content type stop, with the status", async () => {
  for (const [answer, want] of [
    [() => new Response(null, { status: 204 }), { reason: "the server said no more (204)", status: 204 }],
    [() => new Response("no", { status: 404 }), { reason: "status 404", status: 404 }],
    [() => sse("hello", 200, "text/plain"), { reason: "not an event stream", status: 200 }],
  ]) {
    const { transport, requests } = scripted(answer);
    const s = openStream(URL_, { storage: null, transport, retry: { min: 1 } });
    await until(() => s.state === "closed");
    await sleep(30);
    assert.equal(requests.length, 1);
    assert.deepEqual(s.info, want);
  }
  const { transport, requests } = scripted(() => new Response("", { status: 503 }));
  const s = openStream(URL_, { storage: null, transport, retry: { min: 1 } });
  await until(() => requests.length === 2);
  assert.equal(s.state, "connecting");
  s.close();
  assert.equal(s.state, "closed");
});

await check("tokens: Bearer header, never in the url; one refresh on 401/403, then closed", async () => {
  let n = 0;
  const token = async () => `tok${++n}`;
  const { transport, requests } = scripted(() => new Response("", { status: 403 }),
                                           () => sse("id:1\ndata:x\n\n"));
  const s = openStream(URL_, { storage: null, transport, token, retry: { min: 100000 } });
  await until(() => s.lastEventId === "1");
  assert.deepEqual(requests.map((r) => r.headers.authorization), ["Bearer tok1", "Bearer tok2"]);
  assert.ok(requests.every((r) => !r.url.includes("tok")));
  s.close();
  const again = scripted(() => new Response("", { status: 401 }), () => new Response("", { status: 403 }));
  const t = openStream(URL_, { storage: null, transport: again.transport, token });
  await until(() => t.state === "closed");
  assert.equal(again.requests.length, 2);
  assert.deepEqual(t.info, { reason: "the token was refused", status: 403 });
  const bare = scripted(() => new Response("", { status: 401 }));
  const u = openStream(URL_, { storage: null, transport: bare.transport });
  await until(() => u.state === "closed");
  assert.deepEqual(u.info, { reason: "a token is needed", status: 401 });
});

await check("challenge: a fresh token, the POST the challenge describes, renewed on 204", async () => {
  let n = 0;
  const challenge = 'event:challenge\ndata:{"method":"POST","headers":{"content-type":"application/x-challenge-response"}}\n\n';
  const { transport, requests } = scripted(() => sse(challenge + "id:1\ndata:x\n\n"),
                                           () => new Response(null, { status: 204 }));
  const s = openStream(URL_, { storage: null, transport, token: async () => `tok${++n}`, retry: { min: 100000 } });
  const states = [];
  const seen = [];
  s.on("challenge", (e) => seen.push(e.type));
  s.onState((st, info) => states.push([st, info]));
  await until(() => states.some(([, i]) => i.renewed === true));
  const post = requests[1];
  assert.equal(post.init.method, "POST");
  assert.equal(post.url, URL_);
  assert.deepEqual(post.init.headers, { "content-type": "application/x-challenge-response",
                                         authorization: "Bearer tok2" });
  assert.deepEqual(seen, ["challenge"]);
  s.close();
});

await check("topics: on('topic:<name>') from the event type, <topic>:delete, or a topic: field", async () => {
  const text = "event:orders\nid:1\ndata:o1\n\nevent:orders:delete\nid:2\ndata:a2V5\n\n" +
    "event:audit\nid:3\ndata:a1\n\nid:4\ntopic:orders\ndata:o2\n\n";
  const { transport } = scripted(() => sse(text));
  const s = openStream(URL_, { storage: null, transport, retry: { min: 100000 } });
  const orders = [];
  const raw = [];
  s.on("topic:orders", (e) => orders.push([e.type, e.data, e.topic]));
  s.on("orders", (e) => raw.push(e.data));
  await until(() => s.lastEventId === "4");
  assert.deepEqual(orders, [["message", "o1", "orders"], ["delete", "a2V5", "orders"],
                            ["message", "o2", "orders"]]);
  assert.deepEqual(raw, ["o1"], "the plain event type still reaches on('orders')");
  s.close();
});

await check("a handler that throws does not end the stream", async () => {
  const { transport } = scripted(() => open("id:1\ndata:a\n\nid:2\ndata:b\n\n"));
  const s = openStream(URL_, { storage: null, transport, retry: { min: 100000 } });
  const got = [];
  const errors = [];
  process.on("uncaughtException", (e) => errors.push(e.message));
  s.on("message", (e) => { got.push(e.data); if (e.data === "a") throw new Error("boom"); });
  await until(() => got.length === 2);
  await sleep(10);
  assert.deepEqual(errors, ["boom"]);
  assert.equal(s.state, "open");
  s.close();
});

await check("nothing logged", () => {
  assert.deepEqual(logged, []);
});
