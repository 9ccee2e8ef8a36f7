// The demo page: one EventSource, a table of the latest value per key.
//
// The key of an event comes from its id when the route uses the key id format
// ["<base64url(key)>","<progress>"]; otherwise from a JSON payload's "key" field; otherwise the
// payload itself is the row. `delete` events (tombstones) carry base64url(key) and remove the row.
// The browser's EventSource reconnects on its own after a dropped stream and sends the last id it
// saw as Last-Event-ID, so the table continues without gaps or repeats.
//
// Guarded streams: with `?token=<jwt>` the page opens the stream with it (as `access_token`: an
// EventSource cannot send headers). Before the token expires the server sends a `challenge`
// event; the page then gets a fresh token from `?renew=<url>` (a login backend; `make run`'s
// development token service) and answers with the POST the challenge describes, carrying the
// fresh token. The server answers 204 and the stream goes on past the old expiry ("renewed");
// without an answer it ends at the expiry ("expired"). Should the browser's own reconnect be
// refused (its URL holds an older token), the page opens the stream again with the latest token
// and its last event id, so nothing is missed.
"use strict";

(function () {
  const params = new URLSearchParams(location.search);
  const url = params.get("stream") || "/events";
  const renewFrom = params.get("renew");
  let token = params.get("token");
  const rows = new Map();
  const tbody = document.getElementById("rows");
  const state = document.getElementById("state");
  const counts = document.getElementById("counts");
  const lastId = document.getElementById("last-id");
  const empty = document.getElementById("empty");
  document.getElementById("stream").textContent = url;

  // What a test (or a curious user in the console) can inspect.
  const stats = (window.ssekd = {
    url, received: [], opens: 0, errors: 0, deletes: 0,
    challenges: 0, renewals: 0, refusedRenewals: 0, reopens: 0, states: [],
  });

  function fromBase64Url(text) {
    const b64 = text.replace(/-/g, "+").replace(/_/g, "/");
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    return new TextDecoder().decode(bytes);
  }

  function keyOf(event) {
    if (event.lastEventId.startsWith("[")) {
      try {
        const [key] = JSON.parse(event.lastEventId);
        return key === null ? "(null key)" : fromBase64Url(key);
      } catch (e) { /* not the key form after all */ }
    }
    try {
      const value = JSON.parse(event.data);
      if (value && typeof value === "object" && "key" in value) return String(value.key);
    } catch (e) { /* not JSON */ }
    return event.data;
  }

  function render() {
    counts.textContent = `${stats.received.length} events, ${rows.size} keys`;
    empty.hidden = rows.size > 0;
  }

  function upsert(key, value, id) {
    let tr = rows.get(key);
    if (!tr) {
      tr = document.createElement("tr");
      for (let i = 0; i < 4; i++) tr.appendChild(document.createElement("td"));
      tr.cells[0].textContent = key;
      rows.set(key, tr);
      tbody.appendChild(tr);
    }
    tr.cells[1].textContent = value;
    tr.cells[2].textContent = id;
    tr.cells[3].textContent = new Date().toLocaleTimeString();
    tr.classList.remove("flash");
    void tr.offsetWidth; // restart the highlight animation
    tr.classList.add("flash");
  }

  function setState(name) {
    state.textContent = name;
    state.className = `state ${name}`;
    if (stats.states[stats.states.length - 1] !== name) stats.states.push(name);
  }

  let lastEventId = null;
  let source = null;

  function streamUrl() {
    const target = new URL(url, location.href);
    if (token) target.searchParams.set("access_token", token);
    if (lastEventId !== null) target.searchParams.set("lastEventId", lastEventId);
    return target.toString();
  }

  // A challenge: fetch a fresh token, send it the way the challenge says.
  async function answer(event) {
    stats.challenges += 1;
    if (!renewFrom) { setState("expiring"); return; }
    try {
      const challenge = JSON.parse(event.data);
      const fresh = (await (await fetch(renewFrom)).text()).trim();
      const reply = await fetch(url, {
        method: challenge.method || "POST",
        headers: { ...(challenge.headers || {}), authorization: `Bearer ${fresh}` },
      });
      if (reply.status === 204) {
        token = fresh;
        stats.renewals += 1;
        setState("renewed");
      } else {
        stats.refusedRenewals += 1;
        setState("expiring");
      }
    } catch (e) {
      stats.refusedRenewals += 1;
      setState("expiring");
    }
  }

  function open() {
    const openedWith = token;
    const es = (source = new EventSource(token ? streamUrl() : url));
    es.onopen = () => { stats.opens += 1; setState(stats.renewals ? "renewed" : "open"); };
    es.onerror = () => {
      stats.errors += 1;
      if (es.readyState !== EventSource.CLOSED) { setState("reconnecting"); return; }
      if (token && token !== openedWith) {
        // refused with the token in its URL, and a fresher one is at hand: open again
        stats.reopens += 1;
        setState("reconnecting");
        setTimeout(open, 100);
      } else {
        setState(token ? "expired" : "closed");
      }
    };
    es.onmessage = onMessage;
    es.addEventListener("delete", onDelete);
    es.addEventListener("challenge", answer);
  }

  function onMessage(event) {
    lastEventId = event.lastEventId;
    stats.received.push({ id: event.lastEventId, data: event.data });
    lastId.textContent = `id ${event.lastEventId}`;
    upsert(keyOf(event), event.data, event.lastEventId);
    render();
  }

  function onDelete(event) {
    lastEventId = event.lastEventId;
    stats.received.push({ id: event.lastEventId, data: event.data, deleted: true });
    stats.deletes += 1;
    let key = event.data ? fromBase64Url(event.data) : "(null key)";
    if (event.lastEventId.startsWith("[")) key = keyOf(event);
    const tr = rows.get(key);
    if (tr) { tr.remove(); rows.delete(key); }
    lastId.textContent = `id ${event.lastEventId}`;
    render();
  }

  open();
})();
