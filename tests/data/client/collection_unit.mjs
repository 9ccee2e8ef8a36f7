// Unit checks of www/ssekd-client/collection.js under Node.js with a fake stream (the
// on/onState interface of stream.js, driven by hand): keys from both key-form ids and from a
// JSON field or pointer, tombstones, JSON or text values, onChange, the catch-up promise and
// its state across a reconnect, one topic of a several-topic stream, and close().
// Run by tests/test_client_collection.py; prints "ok <name>" per check, exits 1 on a failure.
import assert from "node:assert/strict";
import { collection, keyText } from "../../../www/ssekd-client/collection.js";

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack}`);
    process.exit(1);
  }
}

// base64url with `=` padding, as ssekd writes keys
const b64 = (text) => {
  const bare = Buffer.from(text, "utf8").toString("base64url");
  return bare + "=".repeat((4 - (bare.length % 4)) % 4);
};
const id = (key, n) => JSON.stringify([key === null ? null : b64(key), "AQI" + n]);

// A stream as stream.js gives it, with what a server would say as methods.
function fakeStream() {
  const handlers = new Map();
  const states = new Set();
  let n = 0;
  const emit = (type, event) => { for (const h of handlers.get(type) || []) h(event); };
  return {
    on(type, h) {
      if (!handlers.has(type)) handlers.set(type, new Set());
      handlers.get(type).add(h);
      return () => handlers.get(type).delete(h);
    },
    onState(h) { states.add(h); return () => states.delete(h); },
    put(key, data, form = id) { emit("message", { type: "message", data, id: form(key, n++) }); },
    del(key, form = id) { emit("delete", { type: "delete", data: b64(key), id: form(key, n++) }); },
    send(type, event) { emit(type, event); },
    caughtUp() { emit("caught-up", { type: "caught-up", data: "", id: null }); },
    state(s) { for (const h of states) h(s, {}); },
    closed: false,
    close() { this.closed = true; },
    listeners() { return [...handlers.values()].reduce((a, s) => a + s.size, 0); },
  };
}

await check("key-form ids: puts, replaces, deletes, JSON or text values", () => {
  const s = fakeStream();
  const c = collection(s);
  const changes = [];
  c.onChange((k, v) => changes.push([k, v]));
  s.put("a", '{"n":1}');
  s.put("b", "plain text");
  s.put("a", '{"n":2}');
  s.put("ключ", "42");
  s.del("b");
  s.del("never-there");
  s.put(null, "a null key is not kept");
  assert.deepEqual([...c.map], [["a", { n: 2 }], ["ключ", 42]]);
  assert.deepEqual(changes, [["a", { n: 1 }], ["b", "plain text"], ["a", { n: 2 }],
                             ["ключ", 42], ["b", undefined]]);
});

await check("the text key form, and a delete whose id carries no key", () => {
  const s = fakeStream();
  const c = collection(s, { keys: "text" });
  const text = (key, n) => JSON.stringify([key, "AQI" + n]);
  s.put("sensor-1", "1", text);
  s.put("sensor-2", "2", text);
  s.del("sensor-1", text);
  s.send("delete", { type: "delete", data: b64("sensor-2"), id: "AQI9" }); // etag id: the data
  assert.deepEqual([...c.map], []);
});

await check("a key field, a key pointer, and deletes by record key", () => {
  const s = fakeStream();
  const c = collection(s, { key: "id" });
  s.put("rec1", '{"id":"x","v":1}');
  s.put("rec1", '{"id":"y","v":2}'); // the record now keys another item: the old one goes
  s.put("rec2", '{"v":3}'); // no such field: not kept
  assert.deepEqual([...c.map], [["y", { id: "y", v: 2 }]]);
  s.del("rec1");
  assert.equal(c.map.size, 0);
  const t = fakeStream();
  const d = collection(t, { key: "/owner/id" });
  t.send("message", { type: "message", data: '{"owner":{"id":7}}', id: "AQI1" });
  assert.deepEqual([...d.map.keys()], ["7"]);
  t.send("delete", { type: "delete", data: b64("7"), id: "AQI2" }); // etag ids: key = record key
  assert.equal(d.map.size, 0);
});

await check("caughtUp resolves on the signal; isCaughtUp falls on a drop, rises again", async () => {
  const s = fakeStream();
  const c = collection(s);
  let seen = 0;
  c.onCaughtUp(() => seen++);
  let resolved = false;
  c.caughtUp.then(() => { resolved = true; });
  s.put("a", "1");
  await Promise.resolve();
  assert.equal(resolved, false);
  assert.equal(c.isCaughtUp, false);
  s.state("open");
  s.caughtUp();
  await Promise.resolve();
  assert.equal(resolved, true);
  assert.equal(c.isCaughtUp, true);
  s.state("waiting");
  assert.equal(c.isCaughtUp, false, "changes may be missed until the next signal");
  s.state("connecting");
  s.state("open");
  assert.equal(c.isCaughtUp, false);
  s.caughtUp();
  assert.equal(c.isCaughtUp, true);
  assert.equal(seen, 2);
});

await check("one topic of a several-topic stream", () => {
  const s = fakeStream();
  const c = collection(s, { topic: "orders", key: "id" });
  s.send("topic:orders", { type: "message", topic: "orders", data: '{"id":1}', id: "x" });
  s.send("topic:orders", { type: "message", topic: "orders", data: '{"id":2}', id: "y" });
  s.send("topic:orders", { type: "delete", topic: "orders", data: b64("1"), id: "z" });
  s.send("topic:users", { type: "message", topic: "users", data: '{"id":3}', id: "w" });
  s.send("message", { type: "message", data: '{"id":4}', id: "v" }); // not this topic's
  assert.deepEqual([...c.map.keys()], ["2"]);
});

await check("close stops the updates and the handlers", () => {
  const s = fakeStream();
  const c = collection(s);
  const before = s.listeners();
  assert.ok(before >= 3);
  c.close();
  assert.equal(s.listeners(), 0);
  s.put("a", "1");
  assert.equal(c.map.size, 0);
  assert.equal(s.closed, false, "a stream the page passed in is the page's to close");
});

await check("keyText reads base64url with or without padding and refuses the rest", () => {
  assert.equal(keyText("a2V5"), "key");
  assert.equal(keyText("a2V5MQ=="), "key1");
  assert.equal(keyText("a2V5MQ"), "key1");
  assert.equal(keyText(b64("ключ ✓")), "ключ ✓");
  assert.equal(keyText("not base64!"), null);
});
