// sharedStream's handover in node, with fakes for what the browser gives: Web Locks (a FIFO
// lock per name), a server (records 0.., each with its index as id; a connection with
// ?lastEventId=n gets the records after n, or from n - OVERLAP to act as a server that resumes
// a little early), and "tabs" as several sharedStreams in one process (node's BroadcastChannel
// delivers between instances of one thread). Prints what each tab got, as JSON.
//   node tabs_handover.mjs <tabs.js> <overlap>
const [tabsPath, overlapArg] = process.argv.slice(2);
const OVERLAP = Number(overlapArg || 0);
globalThis.location = { href: "http://tabs.test/" };
const queues = new Map();
function grant(name) {
  const q = queues.get(name);
  if (q.held || !q.waiting.length) return;
  const { cb, resolve, reject } = q.waiting.shift();
  q.held = true;
  Promise.resolve().then(cb).then(
    (v) => { q.held = false; resolve(v); grant(name); },
    (e) => { q.held = false; reject(e); grant(name); });
}
globalThis.navigator = { locks: { request(name, opts, cb) {
  if (!queues.has(name)) queues.set(name, { held: false, waiting: [] });
  return new Promise((resolve, reject) => {
    const entry = { cb, resolve, reject };
    queues.get(name).waiting.push(entry);
    if (opts.signal) opts.signal.addEventListener("abort", () => {
      const w = queues.get(name).waiting;
      const i = w.indexOf(entry);
      if (i >= 0) { w.splice(i, 1); reject(new Error("AbortError")); }
    });
    grant(name);
  });
} } };
const { sharedStream } = await import(tabsPath);

const records = [];
const conns = new Set();
const froms = [];
const enc = new TextEncoder();
const frame = (i) => enc.encode(`id:${i}\ndata:r${i}\n\n`);
function transport(url, init) {
  const u = new URL(url, location.href);
  const from = u.searchParams.has("lastEventId") ? Number(u.searchParams.get("lastEventId")) : -1;
  froms.push(from);
  let conn;
  const body = new ReadableStream({
    start(c) {
      conn = { c };
      conns.add(conn);
      for (let i = Math.max(0, from + 1 - OVERLAP); i < records.length; i++) c.enqueue(frame(i));
    },
    cancel() { conns.delete(conn); },
  });
  if (init.signal) init.signal.addEventListener("abort", () => {
    conns.delete(conn);
    try { conn.c.close(); } catch (e) { /* closed */ }
  });
  return Promise.resolve(new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } }));
}
function produce(n) {
  for (let k = 0; k < n; k++) {
    const i = records.length;
    records.push("r" + i);
    for (const conn of conns) conn.c.enqueue(frame(i));
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

produce(10);
const tabs = [];
for (let t = 0; t < 5; t++) { // each joins after the one before leads or follows
  const stream = sharedStream("/events/t", { storage: null, transport, retry: { min: 20, max: 50 } });
  const got = [];
  stream.on("message", (e) => got.push(e.data));
  tabs.push({ stream, got });
  await sleep(20);
}
produce(10);
await sleep(100);
const before = { connections: conns.size, leading: tabs.map((t) => t.stream.leading),
  got: tabs.map((t) => t.got.slice()) };
const leader = tabs.find((t) => t.stream.leading);
const during = (async () => { for (let k = 0; k < 20; k++) { produce(1); await sleep(3); } })();
await sleep(20);
leader.stream.close();
await during;
produce(5);
await sleep(200);
const survivors = tabs.filter((t) => t !== leader);
const after = { connections: conns.size, leading: survivors.map((t) => t.stream.leading),
  got: survivors.map((t) => t.got), states: survivors.map((t) => t.stream.state) };
for (const t of survivors) t.stream.close();
await sleep(20);
console.log(JSON.stringify({ records, froms, before, after, left: conns.size }));
process.exit(0);
