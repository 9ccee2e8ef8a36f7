// Writes through ssekd's http-kafka binding (docs/write-path.md), done the way that binding
// makes safe:
// - one Idempotency-Key per logical write, the same on every retry of it: ssekd remembers the
//   write by it, so a retry after a cut connection or a 503 is answered like the first attempt
//   and never writes a second record;
// - If-Match with the etag last read (a GET's ETag, or the second half of a key-form stream id
//   handed to seen()), and a 412 turned into a Conflict that carries the value there now;
// - Prefer: respond-async, and the wait on the Location of the 202 (ssekd's long poll,
//   Prefer: wait=N) until the final answer.
// A token provider's token goes in Authorization and nowhere else: this module never logs.

const DEFAULT_RETRY = { min: 250, max: 10000, attempts: 6 };
const DEFAULT_WAIT = 20; // s: ssekd caps Prefer: wait at its max-wait (30 s by default)

/** A non-2xx answer (after retries), with what the server said. */
export class HttpError extends Error {
  constructor(answer, message) {
    super(message || `${answer.status} ${answer.text || ""}`.trim());
    this.name = "HttpError";
    this.status = answer.status;
    this.answer = answer;
  }
}

/** A 412: the version the write was conditional on is no longer the current one. `current` is
 * the value there now (undefined when it could not be read, null when the item is gone) and
 * `etag` its ETag, so the caller can merge and write again with it. */
export class Conflict extends HttpError {
  constructor(answer, current, etag) {
    super(answer, `412 ${answer.text || "the value changed since it was read"}`.trim());
    this.name = "Conflict";
    this.current = current;
    this.etag = etag;
  }
}

/** The etag to send back as If-Match from a key-form event id (`["<base64url key>",
 * "<progress>/<etag>"]`), or null when the id is not of that form. */
export function etagOfId(id) {
  if (typeof id !== "string" || !id.startsWith("[")) return null;
  try {
    const parts = JSON.parse(id);
    return Array.isArray(parts) && typeof parts[1] === "string" && parts[1].includes("/")
      ? parts[1] : null;
  } catch {
    return null;
  }
}

function newKey() {
  if (globalThis.crypto && crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 15) | 64;
  b[8] = (b[8] & 63) | 128;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => { if (signal) signal.removeEventListener("abort", stop); resolve(); }, ms);
    const stop = () => { clearTimeout(t); reject(signal.reason); };
    if (signal) signal.addEventListener("abort", stop, { once: true });
  });
}

// Retry-After in seconds or as an HTTP date, in ms; null when absent or unreadable.
function retryAfter(headers) {
  const raw = headers.get("retry-after");
  if (!raw) return null;
  const s = Number(raw);
  if (Number.isFinite(s)) return Math.max(0, s * 1000);
  const at = Date.parse(raw);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

async function read(response, attempts, idempotencyKey) {
  const text = await response.text();
  const type = response.headers.get("content-type") || "";
  let value = text;
  if (/[/+]json\b/i.test(type) && text) {
    try { value = JSON.parse(text); } catch { /* left as text */ }
  }
  return {
    status: response.status,
    ok: response.ok,
    headers: response.headers,
    etag: response.headers.get("etag"),
    location: response.headers.get("location"),
    text,
    value,
    attempts,
    idempotencyKey,
  };
}

function encodeBody(body, headers) {
  if (body === undefined || body === null) return undefined;
  if (typeof body === "string" || body instanceof Blob || body instanceof ArrayBuffer ||
      ArrayBuffer.isView(body) || body instanceof URLSearchParams || body instanceof FormData) {
    return body;
  }
  if (!headers.has("content-type")) headers.set("content-type", "application/json");
  return JSON.stringify(body);
}

/**
 * A writer for the http-kafka routes under `base` (an absolute URL or a path of the page's
 * origin). options: token (() => Promise<string>, sent as Authorization: Bearer), retry
 * ({min, max, attempts}: jittered exponential backoff in ms), fetch (used instead of the
 * global fetch), wait (seconds each poll of an async location asks the server to wait).
 */
export function writer(base, options = {}) {
  const retry = { ...DEFAULT_RETRY, ...(options.retry || {}) };
  const doFetch = options.fetch || ((url, init) => globalThis.fetch(url, init));
  const wait = options.wait || DEFAULT_WAIT;
  const etags = new Map(); // absolute URL -> the ETag last read there
  const root = new URL(base, globalThis.location ? globalThis.location.href : undefined);
  if (!root.pathname.endsWith("/")) root.pathname += "/";

  const url = (path) => new URL(String(path).replace(/^\//, ""), root).href;

  function backoff(n) {
    const d = Math.min(retry.max, retry.min * 2 ** n);
    return d / 2 + Math.random() * (d / 2);
  }

  // One request, sent again (the same headers, so the same idempotency key) on a network
  // error, a 503 (after its Retry-After) or a 504 (a write that stands, waiting for its reply:
  // the same request gets that reply); once more with a fresh token after a 401. Never on
  // another 4xx: the server refused it, and the same request would be refused again.
  async function send(method, target, headers, body, signal, idempotencyKey) {
    let renewed = false;
    for (let n = 0; ; n++) {
      if (options.token) headers.set("authorization", `Bearer ${await options.token()}`);
      let response;
      try {
        response = await doFetch(target, { method, headers, body, signal, cache: "no-store" });
      } catch (e) {
        if ((signal && signal.aborted) || n + 1 >= retry.attempts) {
          if (e && typeof e === "object") e.idempotencyKey = idempotencyKey;
          throw e;
        }
        await sleep(backoff(n), signal);
        continue;
      }
      if (response.status === 401 && options.token && !renewed) {
        renewed = true;
        await response.body?.cancel();
        n -= 1;
        continue;
      }
      if ((response.status === 503 || response.status === 504) && n + 1 < retry.attempts) {
        const after = retryAfter(response.headers);
        await response.body?.cancel();
        await sleep(after === null ? backoff(n) : after + Math.random() * retry.min, signal);
        continue;
      }
      return read(response, n + 1, idempotencyKey);
    }
  }

  // The value at `target` now, for a Conflict: JSON a 412 carries is taken as it; otherwise a
  // GET of the written path (http-kafka's fetch of one item), whose ETag is remembered.
  async function current(answer, target, signal) {
    if (answer.value !== answer.text) return { value: answer.value, etag: answer.etag };
    try {
      const got = await get(target, { signal });
      return { value: got.value, etag: got.etag };
    } catch (e) {
      if (e instanceof HttpError && e.status === 404) {
        etags.delete(target);
        return { value: null, etag: null };
      }
      return { value: undefined, etag: null };
    }
  }

  async function write(method, path, body, opts = {}) {
    const target = url(path);
    const headers = new Headers(opts.headers || {});
    const idempotencyKey = opts.key || opts.idempotencyKey || newKey();
    headers.set("idempotency-key", idempotencyKey);
    const ifMatch = opts.ifMatch === undefined ? etags.get(target) : opts.ifMatch;
    if (ifMatch) headers.set("if-match", etagOfId(ifMatch) || ifMatch);
    const asynchronous = opts.async === undefined ? options.async : opts.async;
    if (asynchronous) headers.set("prefer", "respond-async");
    const payload = encodeBody(body, headers);
    let answer = await send(method, target, headers, payload, opts.signal, idempotencyKey);
    if (answer.status === 202 && answer.location && asynchronous) {
      answer = await follow(new URL(answer.location, target).href, answer, opts.signal);
    }
    if (answer.status === 412) {
      const now = method === "POST" || opts.current === false
        ? { value: undefined, etag: null }
        : await current(answer, opts.current ? url(opts.current) : target, opts.signal);
      throw new Conflict(answer, now.value, now.etag);
    }
    if (!answer.ok) throw new HttpError(answer);
    // The etag named the version before this write: a later write must read the new one.
    etags.delete(target);
    return answer;
  }

  // The wait on an async write's location: each GET asks the server to hold it until the
  // reply is there (Prefer: wait); a 202 again means not yet. The answer is the reply.
  async function follow(location, accepted, signal) {
    let polls = 0;
    for (;;) {
      const headers = new Headers({ prefer: `wait=${wait}` });
      const answer = await send("GET", location, headers, undefined, signal,
        accepted.idempotencyKey);
      polls += 1;
      if (answer.status !== 202) {
        return { ...answer, accepted: true, location, polls, attempts: accepted.attempts };
      }
      location = answer.location ? new URL(answer.location, location).href : location;
    }
  }

  async function get(path, opts = {}) {
    const target = url(path);
    const headers = new Headers(opts.headers || {});
    if (opts.ifNoneMatch) headers.set("if-none-match", opts.ifNoneMatch);
    if (opts.wait) headers.set("prefer", `wait=${opts.wait}`);
    const answer = await send("GET", target, headers, undefined, opts.signal, null);
    if (answer.etag) etags.set(target, answer.etag);
    if (!answer.ok && answer.status !== 304) throw new HttpError(answer);
    return answer;
  }

  return {
    get,
    put: (path, body, opts) => write("PUT", path, body, opts),
    post: (path, body, opts) => write("POST", path, body, opts),
    patch: (path, body, opts) => write("PATCH", path, body, opts),
    delete: (path, body, opts) => write("DELETE", path, body, opts),
    /** Remember the version of `path` last seen: an ETag, or a key-form event id. */
    seen(path, etagOrId) {
      const etag = etagOfId(etagOrId) || etagOrId;
      if (etag) etags.set(url(path), etag);
      else etags.delete(url(path));
    },
    /** The ETag remembered for `path`, or null. */
    etag: (path) => etags.get(url(path)) || null,
  };
}
