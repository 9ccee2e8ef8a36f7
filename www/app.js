// The demo page: one EventSource, a table of the latest value per key.
//
// The key of an event comes from its id when the route uses the key id format
// ["<base64url(key)>","<progress>"]; otherwise from a JSON payload's "key" field; otherwise the
// payload itself is the row. `delete` events (tombstones) carry base64url(key) and remove the row.
// The browser's EventSource reconnects on its own after a dropped stream and sends the last id it
// saw as Last-Event-ID, so the table continues without gaps or repeats.
"use strict";

(function () {
  const params = new URLSearchParams(location.search);
  const url = params.get("stream") || "/events";
  const rows = new Map();
  const tbody = document.getElementById("rows");
  const state = document.getElementById("state");
  const counts = document.getElementById("counts");
  const lastId = document.getElementById("last-id");
  const empty = document.getElementById("empty");
  document.getElementById("stream").textContent = url;

  // What a test (or a curious user in the console) can inspect.
  const stats = (window.ssekd = { url, received: [], opens: 0, errors: 0, deletes: 0 });

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
  }

  const source = new EventSource(url);
  source.onopen = () => { stats.opens += 1; setState("open"); };
  source.onerror = () => {
    stats.errors += 1;
    setState(source.readyState === EventSource.CLOSED ? "closed" : "reconnecting");
  };
  source.onmessage = (event) => {
    stats.received.push({ id: event.lastEventId, data: event.data });
    lastId.textContent = `id ${event.lastEventId}`;
    upsert(keyOf(event), event.data, event.lastEventId);
    render();
  };
  source.addEventListener("delete", (event) => {
    stats.received.push({ id: event.lastEventId, data: event.data, deleted: true });
    stats.deletes += 1;
    let key = event.data ? fromBase64Url(event.data) : "(null key)";
    if (event.lastEventId.startsWith("[")) key = keyOf(event);
    const tr = rows.get(key);
    if (tr) { tr.remove(); rows.delete(key); }
    lastId.textContent = `id ${event.lastEventId}`;
    render();
  });
})();
