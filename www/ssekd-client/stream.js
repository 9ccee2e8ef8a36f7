// openStream: an ssekd (or any Server-Sent Events) stream read with fetch() and parsed here,
// because EventSource cannot do what a page needs: send the last id on the first connection of
// a reloaded page, send a token in a header, see a status code, or spread its reconnects.
//
// - The last id is kept in `storage` (sessionStorage by default) under "ssekd:last-id:" + url
//   and sent as ?lastEventId= and Last-Event-ID, so a reload resumes with nothing lost or twice.
// - Reconnects wait a random time in [0, base * 2^attempt] (full jitter, capped at retry.max),
//   with the server's `retry:` as the base: a deploy that drops every stream at once does not
//   bring them back in the same instant. A 200 that ends (a stop, a reload, a "try later"
//   refusal) and a network error are retried; 204 stops, as for EventSource.
// - With a `token` provider: `Authorization: Bearer` on the stream, one fresh token on a 401/403,
//   and a `challenge` event answered with the POST it describes, carrying a fresh token.
//   The token is never logged or stored.
// - Several-topic routes: on("topic:orders", h) gets that topic's events, whether the topic is
//   the event type (`orders`, `orders:delete`) or a `topic:` field.

const KEY = "ssekd:last-id:";

function defaultStorage() {
  try {
    return globalThis.sessionStorage || null;
  } catch (e) {
    return null; // storage refused (sandboxed frame, privacy mode)
  }
}

function report(error) {
  // a handler's error must not end the stream; the console still shows it
  setTimeout(() => { throw error; }, 0);
}

/** A streaming SSE parser: feed() it text, it calls onEvent/onRetry/onComment. */
export function parser(onEvent, onRetry, onComment) {
  let buffer = "";
  let data = [];
  let type = "";
  let topic = "";
  let id = null; // the last event id buffer: it survives across events
  let cr = false;
  const field = (line) => {
    if (line === "") {
      if (data.length || type) {
        const event = { type: type || "message", data: data.join("\n"), id };
        if (topic) event.topic = topic;
        onEvent(event);
      }
      data = []; type = ""; topic = "";
      return;
    }
    const colon = line.indexOf(":");
    if (colon === 0) { onComment(line.slice(1).replace(/^ /, "")); return; }
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value[0] === " ") value = value.slice(1);
    if (name === "data") data.push(value);
    else if (name === "event") type = value;
    else if (name === "id") { if (!value.includes("\0")) id = value; }
    else if (name === "retry") { if (/^\d+$/.test(value)) onRetry(Number(value)); }
    else if (name === "topic") topic = value;
  };
  return {
    feed(text) {
      let start = 0;
      if (cr && text[0] === "\n") start = 1; // the LF of a CR LF split across chunks
      cr = false;
      for (let i = start; i < text.length; i++) {
        const c = text[i];
        if (c === "\r" || c === "\n") {
          field(buffer + text.slice(start, i));
          buffer = "";
          if (c === "\r") {
            if (i + 1 === text.length) cr = true;
            else if (text[i + 1] === "\n") i++;
          }
          start = i + 1;
        }
      }
      buffer += text.slice(start);
    },
    get lastEventId() { return id; },
    set lastEventId(value) { id = value; },
  };
}

/**
 * Open a stream. options: storage, token, retry {min, max}, lastEventId, transport, headers.
 * See docs/client.md.
 */
export function openStream(url, options = {}) {
  const storage = options.storage === undefined ? defaultStorage() : options.storage;
  const key = KEY + url;
  const min = (options.retry && options.retry.min) || 1000;
  const max = (options.retry && options.retry.max) || 30000;
  const transport = options.transport || ((u, init) => fetch(u, init));
  const handlers = new Map(); // type -> Set of handlers
  const stateHandlers = new Set();
  let lastEventId = options.lastEventId != null ? options.lastEventId : read();
  let serverRetry = null;
  let attempt = 0;
  let state = "connecting";
  let info = {};
  let abort = null;
  let timer = null;
  let closed = false;
  let token = null;
  let refreshed = false; // a fresh token was fetched for the current refusal

  function read() {
    try { return storage ? storage.getItem(key) : null; } catch (e) { return null; }
  }

  function keep(id) {
    try {
      if (!storage) return;
      if (id) storage.setItem(key, id);
      else storage.removeItem(key);
    } catch (e) { /* quota or privacy: the id stays in memory */ }
  }

  function setState(next, detail = {}) {
    state = next;
    info = detail;
    for (const h of [...stateHandlers]) {
      try { h(next, detail); } catch (e) { report(e); }
    }
  }

  function emit(type, event) {
    const set = handlers.get(type);
    if (!set) return;
    for (const h of [...set]) {
      try { h(event); } catch (e) { report(e); }
    }
  }

  function dispatch(event) {
    attempt = 0; // this connection works: the next drop starts the backoff over
    if (event.id !== lastEventId) { lastEventId = event.id; keep(event.id); }
    emit("*", event);
    emit(event.type, event);
    if (event.type === "challenge") challenge(event);
    // which topic: the `topic:` field, else `<topic>:delete`, else an event type that names
    // a topic somebody listens to
    let { topic, type } = event;
    if (!topic) {
      const at = type.lastIndexOf(":");
      if (at > 0) { topic = type.slice(0, at); type = type.slice(at + 1); }
      else if (handlers.has("topic:" + type)) { topic = type; type = "message"; }
    }
    if (topic) emit("topic:" + topic, { ...event, type, topic });
  }

  async function getToken(fresh) {
    if (!options.token) return null;
    if (fresh || token === null) token = await options.token();
    return token;
  }

  async function challenge(event) {
    if (!options.token) return;
    try {
      const asked = JSON.parse(event.data || "{}");
      const fresh = await getToken(true);
      const reply = await transport(url, {
        method: asked.method || "POST",
        headers: { ...(asked.headers || {}), authorization: "Bearer " + fresh },
        cache: "no-store",
      });
      if (!closed) setState(state, { renewed: reply.status === 204, status: reply.status });
    } catch (e) {
      if (!closed) setState(state, { renewed: false, reason: "the renewal failed" });
    }
  }

  function target() {
    if (!lastEventId) return url;
    const u = new URL(url, globalThis.location ? globalThis.location.href : undefined);
    u.searchParams.set("lastEventId", lastEventId);
    return u.toString();
  }

  function stop(reason, status) {
    closed = true;
    if (abort) abort.abort();
    clearTimeout(timer);
    setState("closed", status === undefined ? { reason } : { reason, status });
  }

  function later(why) {
    if (closed) return;
    const base = serverRetry !== null ? serverRetry : min;
    const span = Math.min(max, base * 2 ** attempt);
    const delay = Math.floor(Math.random() * span);
    attempt = Math.min(attempt + 1, 30);
    setState("waiting", { reason: why, delay });
    timer = setTimeout(connect, delay);
  }

  async function connect() {
    if (closed) return;
    setState("connecting");
    abort = new AbortController();
    let response;
    try {
      const headers = { accept: "text/event-stream", ...(options.headers || {}) };
      // a header must be Latin-1: a key-form id with a non-ASCII key goes in the query only
      if (lastEventId && /^[\x20-\x7e]*$/.test(lastEventId)) headers["last-event-id"] = lastEventId;
      const bearer = await getToken(false);
      if (bearer) headers.authorization = "Bearer " + bearer;
      if (closed) return;
      response = await transport(target(), { headers, cache: "no-store", signal: abort.signal });
    } catch (e) {
      later("network error");
      return;
    }
    const status = response.status;
    if (status === 204) { stop("the server said no more (204)", 204); return; }
    if ((status === 401 || status === 403) && options.token && !refreshed) {
      refreshed = true;
      try { await getToken(true); } catch (e) { stop("the token provider failed", status); return; }
      connect();
      return;
    }
    if (status === 401 || status === 403) {
      stop(status === 401 ? "a token is needed" : "the token was refused", status);
      return;
    }
    if (status === 429 || status >= 500) { later(`status ${status}`); return; }
    const type = response.headers.get("content-type") || "";
    if (status !== 200 || !type.startsWith("text/event-stream") || !response.body) {
      stop(status === 200 ? "not an event stream" : `status ${status}`, status);
      return;
    }
    refreshed = false;
    setState("open");
    const p = parser(dispatch, (ms) => { serverRetry = ms; }, (text) => emit(":", { type: ":", data: text, id: lastEventId }));
    p.lastEventId = lastEventId;
    const reader = response.body.getReader();
    const decoder = new TextDecoder(); // UTF-8, drops a leading BOM
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        p.feed(decoder.decode(value, { stream: true }));
      }
      later("the stream ended");
    } catch (e) {
      later("the connection dropped");
    }
  }

  const stream = {
    on(type, handler) {
      if (!handlers.has(type)) handlers.set(type, new Set());
      handlers.get(type).add(handler);
      return () => { const set = handlers.get(type); if (set) { set.delete(handler); if (!set.size) handlers.delete(type); } };
    },
    onState(handler) {
      stateHandlers.add(handler);
      return () => stateHandlers.delete(handler);
    },
    get state() { return state; },
    get info() { return info; },
    get lastEventId() { return lastEventId; },
    close() { if (!closed) stop("closed by the page"); },
  };
  queueMicrotask(connect); // handlers attached right after openStream() see the first events
  return stream;
}
