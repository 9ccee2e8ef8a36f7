// collection: a live Map key -> value kept from a keyed topic's stream, so a page that shows
// "the current state of every key" does not rebuild it by hand (and get tombstones, key-form
// ids or the end of the catch-up wrong).
//
// - The key of an event is the key of its record, read from the key-form id
//   (`["<base64url key>","..."]`, with.event.id on the route; `keys: "text"` for the
//   `["${key}",...]` form), or a JSON field of the value (`key: "id"`, or a JSON pointer such
//   as "/owner/id"). A `delete` event (a tombstone) removes its key.
// - Values are parsed as JSON when they are JSON, else kept as text (or `parse` decides).
// - `caughtUp` resolves on the server's catch-up signal (the route's `with.event.caught-up`):
//   the map then holds the whole state the cache had when the stream connected. The signal
//   comes again after each reconnection; `isCaughtUp` is false between a drop and the next
//   signal (changes may have been missed meanwhile, they are coming), `onCaughtUp` hears each.
// - Given a url instead of a stream, it opens one with no stored last id: a page that reloads
//   has an empty map, so it must read the whole state again, not resume after it.

import { openStream } from "./stream.js";

const CAUGHT_UP = "caught-up";

function report(error) {
  // a handler's error must not stop the map; the console still shows it
  setTimeout(() => { throw error; }, 0);
}

/** base64url (with or without `=` padding) to text, UTF-8; null when it is not base64url. */
export function keyText(b64) {
  if (typeof b64 !== "string" || !/^[A-Za-z0-9_-]*={0,2}$/.test(b64)) return null;
  try {
    const bin = atob(b64.replace(/=+$/, "").replace(/-/g, "+").replace(/_/g, "/"));
    const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
    return new TextDecoder().decode(bytes);
  } catch (e) {
    return null;
  }
}

/** The value of a JSON value at `field`: a top-level name, or a JSON pointer ("/a/b"). */
function at(value, field) {
  if (field[0] !== "/") return value != null && typeof value === "object" ? value[field] : undefined;
  let v = value;
  for (const part of field.slice(1).split("/")) {
    if (v == null || typeof v !== "object") return undefined;
    v = v[part.replace(/~1/g, "/").replace(/~0/g, "~")];
  }
  return v;
}

function jsonOrText(data) {
  try {
    return JSON.parse(data);
  } catch (e) {
    return data;
  }
}

/**
 * A live map of a keyed stream. options: key (a JSON field or pointer of the value), keys
 * ("base64" | "text": the key-form id's), topic (one topic of a several-topic stream), parse,
 * stream (openStream options when given a url). See docs/client.md.
 */
export function collection(source, options = {}) {
  const own = typeof source === "string";
  const stream = own ? openStream(source, { storage: null, ...(options.stream || {}) }) : source;
  const field = options.key || null;
  const textKeys = options.keys === "text";
  const parse = options.parse || jsonOrText;
  const map = new Map();
  const changeHandlers = new Set();
  const caughtUpHandlers = new Set();
  // key mode only: record key -> the map key its last value had, so a tombstone finds it
  const byRecord = new Map();
  let resolve;
  const caughtUp = new Promise((r) => { resolve = r; });
  let isCaughtUp = false;

  function changed(key, value) {
    for (const h of [...changeHandlers]) {
      try { h(key, value); } catch (e) { report(e); }
    }
  }

  /** The record's key from a key-form id: a string, null (a null key), undefined (no key form). */
  function idKey(id) {
    if (!id || id[0] !== "[") return undefined;
    let parts;
    try { parts = JSON.parse(id); } catch (e) { return undefined; }
    if (!Array.isArray(parts) || parts.length !== 2) return undefined;
    if (parts[0] === null) return null;
    return textKeys ? String(parts[0]) : keyText(parts[0]);
  }

  function put(event) {
    const value = parse(event.data);
    const recordKey = idKey(event.id);
    let key;
    if (field !== null) {
      const k = at(value, field);
      if (k === undefined || k === null || typeof k === "object") return; // no key: not kept
      key = String(k);
      if (recordKey != null) {
        const before = byRecord.get(recordKey);
        byRecord.set(recordKey, key);
        if (before !== undefined && before !== key && map.delete(before)) changed(before, undefined);
      }
    } else {
      if (recordKey == null) return; // a null key, or ids without keys: nothing to key it by
      key = recordKey;
    }
    map.set(key, value);
    changed(key, value);
  }

  function remove(event) {
    // the key-form id says the key as the route writes it; else the data: base64url always
    let recordKey = idKey(event.id);
    if (recordKey === undefined) recordKey = event.data ? keyText(event.data) : null;
    if (recordKey == null) return;
    let key = recordKey;
    if (field !== null) {
      const known = byRecord.get(recordKey);
      byRecord.delete(recordKey);
      if (known !== undefined) key = known;
    }
    if (map.delete(key)) changed(key, undefined);
  }

  function signal() {
    isCaughtUp = true;
    resolve();
    for (const h of [...caughtUpHandlers]) {
      try { h(); } catch (e) { report(e); }
    }
  }

  const off = [];
  if (options.topic) {
    off.push(stream.on("topic:" + options.topic, (event) => {
      if (event.type === "delete") remove(event);
      else if (event.type === "message") put(event);
    }));
  } else {
    off.push(stream.on("message", put), stream.on("delete", remove));
  }
  off.push(stream.on(CAUGHT_UP, signal));
  off.push(stream.onState((state) => { if (state !== "open") isCaughtUp = false; }));

  return {
    map,
    caughtUp,
    get isCaughtUp() { return isCaughtUp; },
    get stream() { return stream; },
    onChange(handler) {
      changeHandlers.add(handler);
      return () => changeHandlers.delete(handler);
    },
    onCaughtUp(handler) {
      caughtUpHandlers.add(handler);
      return () => caughtUpHandlers.delete(handler);
    },
    close() {
      for (const f of off.splice(0)) f();
      isCaughtUp = false;
      if (own) stream.close();
    },
  };
}
