// sharedStream: one connection to the daemon for every tab of an origin that reads the same URL,
// so a user with ten tabs costs one stream.
//
// - The tab that holds the Web Lock "ssekd:stream:<url>" is the leader: it runs the real
//   openStream and re-broadcasts each event on BroadcastChannel("ssekd:stream:<url>").
//   The others wait in the lock's queue and read the channel.
// - Every tab reads through its own "view": an openStream whose transport is the channel
//   instead of fetch(). So each tab has the same parser, topic routing, last id and storage as a
//   plain stream, and the handle it returns is a plain Stream.
// - When the leader goes (its tab closes, or close()), the lock passes to the next tab, which
//   opens the real stream from the last id it saw. It may start a little before what the others
//   saw (the old leader's last messages can arrive after the lock moved), so every tab drops an
//   event whose id it already holds: nothing lost, nothing twice.
// - A tab that joins asks the leader ("hello", with its last id) for what it missed: the leader
//   answers with the events after that id from its log of the last `replay` events (all of them
//   if it does not hold that id). Live events that arrive before that answer wait for it, so
//   they are delivered in order.
// - Without Web Locks or BroadcastChannel it is a plain openStream.

import { openStream } from "./stream.js";

const PREFIX = "ssekd:stream:";

/** An event as SSE text, read back by the view's parser as the same event. */
function serialize(event) {
  let text = "";
  if (event.type && event.type !== "message") text += "event:" + event.type + "\n";
  if (event.topic) text += "topic:" + event.topic + "\n";
  if (event.id != null) text += "id:" + event.id + "\n";
  for (const line of String(event.data == null ? "" : event.data).split("\n")) {
    text += "data:" + line + "\n";
  }
  return text + "\n";
}

function plain(event) {
  const copy = { type: event.type, data: event.data, id: event.id };
  if (event.topic) copy.topic = event.topic;
  return copy;
}

/**
 * Open a stream shared by the tabs of this origin. options: those of openStream, plus
 * `replay` (how many recent events a tab keeps to answer a joining tab and to drop repeats,
 * default 1000). See docs/client.md.
 */
export function sharedStream(url, options = {}) {
  const locks = globalThis.navigator && globalThis.navigator.locks;
  if (!locks || typeof globalThis.BroadcastChannel !== "function") {
    return openStream(url, options);
  }
  const name = PREFIX + url;
  const me = Math.random().toString(36).slice(2) + Date.now().toString(36);
  const limit = options.replay == null ? 1000 : options.replay;
  const channel = new BroadcastChannel(name);
  const encoder = new TextEncoder();
  const log = []; // the last `limit` events with an id, oldest first
  const seen = new Set(); // their ids
  const stateHandlers = new Set();
  const queued = []; // SSE text waiting for the view's body
  let sink = null; // the view's body, while it reads
  let synced = false; // this tab knows where it stands: a leader answered, or it leads
  let pending = []; // live events received before that
  let leading = false;
  let real = null;
  let release = null;
  let closed = false;
  let last = null; // the id of the last event handed to the view (it parses a little later)
  let state = "connecting";
  let info = {};
  const abort = new AbortController();

  function setState(next, detail = {}) {
    state = next;
    info = detail;
    for (const h of [...stateHandlers]) {
      try { h(next, detail); } catch (e) { setTimeout(() => { throw e; }, 0); }
    }
  }

  /** Hand an event to this tab's view, once per id. */
  function feed(event) {
    if (event.id != null) {
      if (seen.has(event.id)) return;
      seen.add(event.id);
      log.push(event);
      if (log.length > limit) seen.delete(log.shift().id);
      last = event.id;
    }
    const bytes = encoder.encode(serialize(event));
    if (sink) sink.enqueue(bytes);
    else queued.push(bytes);
  }

  function after(id) {
    const at = id == null ? -1 : log.findIndex((e) => e.id === id);
    return log.slice(at + 1);
  }

  function sync(events) {
    for (const e of events) feed(e);
    synced = true;
    const waiting = pending;
    pending = [];
    for (const e of waiting) feed(e);
  }

  function position() {
    return last != null ? last : view.lastEventId;
  }

  function hello() {
    if (!closed) channel.postMessage({ kind: "hello", tab: me, after: position() });
  }

  function post(message) {
    try { channel.postMessage(message); } catch (e) { /* closed while leaving */ }
  }

  channel.onmessage = ({ data: m }) => {
    if (closed || !m) return;
    if (m.kind === "event") {
      if (synced) feed(m.event);
      else pending.push(m.event);
    } else if (m.kind === "hello") {
      if (leading) post({ kind: "replay", to: m.tab, events: after(m.after), state, info });
    } else if (m.kind === "replay") {
      if (m.to === me && !synced) { sync(m.events); setState(m.state, m.info); }
    } else if (m.kind === "leader") {
      if (!synced && !leading) hello(); // the hello went while nobody led
    } else if (m.kind === "state") {
      if (!leading) setState(m.state, m.info);
    }
  };

  function lead() {
    leading = true;
    // live events heard before any answer may be ahead of this tab's last id: the real stream
    // brings them again, in order, from where this tab is
    pending = [];
    synced = true;
    post({ kind: "leader" });
    const start = position();
    real = openStream(url, { ...options, storage: null, lastEventId: start == null ? undefined : start });
    real.on("*", (event) => {
      const copy = plain(event);
      post({ kind: "event", event: copy });
      feed(copy);
    });
    real.onState((next, detail) => {
      if (closed) return; // leaving: the next leader carries on, nobody else is closed
      post({ kind: "state", state: next, info: detail });
      setState(next, detail);
    });
  }

  // the view: a plain openStream whose connection is the channel. No token: only the leader
  // answers challenges.
  const transport = (target, init = {}) => {
    if (init.method && init.method !== "GET") return fetch(target, init);
    let mine = null;
    const body = new ReadableStream({
      start(controller) {
        mine = controller;
        sink = controller;
        for (const bytes of queued.splice(0)) controller.enqueue(bytes);
      },
      cancel() { if (sink === mine) sink = null; },
    });
    if (init.signal) {
      init.signal.addEventListener("abort", () => {
        if (sink === mine) sink = null;
        try { mine.close(); } catch (e) { /* already closed */ }
      });
    }
    return Promise.resolve(new Response(body, {
      status: 200, headers: { "content-type": "text/event-stream" },
    }));
  };
  const view = openStream(url, {
    storage: options.storage, lastEventId: options.lastEventId, retry: options.retry, transport,
  });

  hello();
  locks.request(name, { signal: abort.signal }, () => {
    if (closed) return undefined;
    lead();
    return new Promise((resolve) => { release = resolve; });
  }).catch(() => { /* closed before it led */ });

  return {
    on: (type, handler) => view.on(type, handler),
    onState(handler) {
      stateHandlers.add(handler);
      return () => stateHandlers.delete(handler);
    },
    get state() { return state; },
    get info() { return info; },
    get lastEventId() { return view.lastEventId; },
    /** Whether this tab holds the connection. */
    get leading() { return leading; },
    close() {
      if (closed) return;
      closed = true;
      abort.abort();
      if (real) real.close();
      if (release) release();
      view.close();
      channel.close();
      setState("closed", { reason: "closed by the page" });
    },
  };
}
