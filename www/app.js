// The demo page: one stream (ssekd-client's openStream), a table of the latest value per key
// with the values' fields as columns, a live chart of a numeric field, and a log of the
// connection.
//
// The key of an event comes from its id when the route uses the key id format
// ["<base64url(key)>","<progress>"]; otherwise from a JSON payload's "key" field; otherwise the
// payload itself is the row. `delete` events (tombstones) carry base64url(key): the row fades
// out. The stream reconnects on its own after a drop and sends the last id it saw, so the table
// continues without gaps or repeats; the log says when the stream resumed, and with which id.
//
// Guarded streams: with `?token=<jwt>` the page opens the stream with it (`Authorization:
// Bearer`). Before the token expires the server sends a `challenge` event; the library then
// asks the page for a fresh token, which it gets from `?renew=<url>` (a login backend; `make
// run`'s development token service), and answers with the POST the challenge describes. The
// server answers 204 and the stream goes on past the old expiry ("renewed"); without a way to
// renew it ends at the expiry ("expired"). When the stream is refused (the token expired, say,
// because the page was opened late, or there was none) and there is a way to renew, the page
// gets a fresh token and the stream opens again with its last event id, so nothing is missed;
// without a token, a stream that asks for one shows "needs a token".
import { openStream } from "./ssekd-client/stream.js";

{
  const params = new URLSearchParams(location.search);
  const url = params.get("stream") || "/events";
  const renewFrom = params.get("renew");
  const initialToken = params.get("token");
  const $ = (id) => document.getElementById(id);
  const tbody = $("rows");
  const state = $("state");
  const counts = $("counts");
  const lastIdText = $("last-id");
  const empty = $("empty");
  const columnsRow = $("columns");
  const logList = $("log");
  const rateText = $("rate");
  const topic = decodeURIComponent(url.split("?")[0].split("/").filter(Boolean).pop() || url);
  $("stream").textContent = url;
  $("topic").textContent = topic;
  for (const el of document.querySelectorAll(".topic-name")) el.textContent = topic;

  const FADE_MS = 3000;
  const chart = new window.LiveChart($("chart"), $("legend"), 60);
  let chartField = null;

  // What a test (or a curious user in the console) can inspect.
  const stats = (window.ssekd = {
    url, received: [], opens: 0, errors: 0, deletes: 0, faded: [],
    challenges: 0, renewals: 0, refusedRenewals: 0, reopens: 0, states: [], resumes: [],
    columns: [], chartField: null,
  });

  const rows = new Map(); // key -> {tr, value, id, at}
  const fields = []; // the value fields shown as columns, in the order they first came
  const arrivals = []; // ms of recent records, for the rate

  function fromBase64Url(text) {
    const b64 = text.replace(/-/g, "+").replace(/_/g, "/");
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    return new TextDecoder().decode(bytes);
  }

  function parsed(data) {
    try {
      const value = JSON.parse(data);
      if (value && typeof value === "object" && !Array.isArray(value)) return value;
    } catch (e) { /* not JSON */ }
    return null;
  }

  function keyOf(event, value) {
    if (event.id && event.id.startsWith("[")) {
      try {
        const [key] = JSON.parse(event.id);
        return key === null ? "(null key)" : fromBase64Url(key);
      } catch (e) { /* not the key form after all */ }
    }
    if (value && "key" in value) return String(value.key);
    return event.data;
  }

  const isTime = (name, v) => typeof v === "number" &&
    (/^(at|time|ts|timestamp)$/i.test(name) || (v > 1e9 && v < 1e11 && !Number.isInteger(v)));

  const decimals = new Set(); // fields that have held a number with a fraction

  function shown(name, v) {
    if (v === null || v === undefined) return "";
    if (isTime(name, v)) return new Date(v * 1000).toLocaleTimeString();
    if (typeof v === "number") {
      if (!Number.isInteger(v)) decimals.add(name);
      return decimals.has(name) ? v.toFixed(1) : String(v);
    }
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  function renderHead() {
    columnsRow.replaceChildren(...["key", ...fields, "event id", "updated"].map((name) => {
      const th = document.createElement("th");
      th.textContent = name;
      return th;
    }));
    stats.columns = fields.slice();
  }

  function renderRow(key, row) {
    const cells = [key];
    for (const f of fields) cells.push(row.value ? shown(f, row.value[f]) : "");
    cells.push(row.id, row.at.toLocaleTimeString());
    row.tr.replaceChildren(...cells.map((text, i) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (i === cells.length - 2) td.className = "id";
      else if (i > 0 && i < cells.length - 2) td.className = "field";
      return td;
    }));
  }

  function addFields(value) {
    const fresh = value ? Object.keys(value).filter((k) => k !== "key" && !fields.includes(k))
      : (fields.includes("value") ? [] : ["value"]);
    if (!fresh.length) return;
    fields.push(...fresh);
    renderHead();
    for (const [key, row] of rows) renderRow(key, row);
  }

  function pickChartField(value) {
    if (chartField || !value) return;
    chartField = Object.keys(value).find((k) => typeof value[k] === "number" &&
      !isTime(k, value[k]) && !/^(seq|offset|count|n)$/i.test(k)) || null;
    if (chartField) {
      stats.chartField = chartField;
      $("chart-title").textContent = `${chartField} by key, last 60 s`;
    }
  }

  function upsert(key, data, id) {
    const value = parsed(data);
    addFields(value);
    pickChartField(value);
    let row = rows.get(key);
    if (!row) {
      row = { tr: document.createElement("tr") };
      rows.set(key, row);
      tbody.appendChild(row.tr);
    }
    clearTimeout(row.removal);
    row.tr.classList.remove("deleted");
    Object.assign(row, { value: value || { value: data }, id, at: new Date() });
    renderRow(key, row);
    row.tr.classList.remove("flash");
    void row.tr.offsetWidth; // restart the highlight animation
    row.tr.classList.add("flash");
    if (chartField && value && typeof value[chartField] === "number") {
      // at the record's own time when it carries one: history arrives all at once
      const when = Object.keys(value).find((k) => isTime(k, value[k]));
      chart.add(key, value[chartField], when ? value[when] * 1000 : Date.now());
    }
  }

  function fade(key) {
    const row = rows.get(key);
    if (!row) return;
    row.tr.classList.remove("flash");
    row.tr.classList.add("deleted");
    stats.faded.push(key);
    chart.deleted(key);
    row.removal = setTimeout(() => {
      if (rows.get(key) === row) { row.tr.remove(); rows.delete(key); render(); }
    }, FADE_MS);
  }

  function render() {
    const live = [...rows.values()].filter((r) => !r.tr.classList.contains("deleted")).length;
    counts.textContent = `${stats.received.length} events, ${live} keys, ${stats.deletes} deletes`;
    empty.hidden = rows.size > 0;
  }

  // Records a second over the last 10 s, counting from a second after the stream opened: what
  // the cache held arrives at once then, and is no rate.
  function showRate() {
    const now = Date.now();
    while (arrivals.length && (arrivals[0] < now - 10000 || arrivals[0] < liveSince)) {
      arrivals.shift();
    }
    const span = Math.min(10, (now - liveSince) / 1000);
    if (span < 2) return;
    rateText.textContent = `${(arrivals.length / span).toFixed(1)} records/s`;
  }

  function setState(name) {
    state.textContent = name;
    state.className = `state ${name.replace(/ /g, "-")}`;
    if (stats.states[stats.states.length - 1] !== name) stats.states.push(name);
  }

  function log(text, kind = "") {
    const li = document.createElement("li");
    if (kind) li.className = kind;
    const time = document.createElement("time");
    time.textContent = new Date().toLocaleTimeString();
    li.append(time, ` ${text}`);
    logList.prepend(li);
    while (logList.children.length > 8) logList.lastChild.remove();
  }

  let liveSince = Infinity;
  let droppedAt = null;
  let opened = false; // the stream has been open before: the next open is a resume
  let tokenAsks = 0;

  // The token: the one in the page's URL first (none: the stream opens without, and a 401
  // asks again), then fresh ones from `?renew=`. Without a way to renew, asking again fails:
  // the stream then says why it closed.
  async function token() {
    tokenAsks += 1;
    if (tokenAsks === 1) return initialToken || "";
    if (!renewFrom) throw new Error("no way to renew the token");
    const reply = await fetch(renewFrom);
    if (!reply.ok) throw new Error(`the token service answered ${reply.status}`);
    const fresh = (await reply.text()).trim();
    if (!challenged) {
      // asked because the stream was refused (an expired token, or none)
      stats.reopens += 1;
      setState("reconnecting");
      log(initialToken ? "the token was refused (expired?): got a fresh one" :
        "the stream needs a token: got one", "warn");
    }
    return fresh;
  }
  let challenged = false;

  // The page's rows live in memory, so a reload starts over (storage: null); within the page
  // the stream resumes from its last id after every drop.
  const stream = openStream(url, {
    storage: null,
    token: initialToken || renewFrom ? token : undefined,
  });

  stream.on("challenge", () => {
    stats.challenges += 1;
    challenged = true;
    if (!renewFrom) { setState("expiring"); log("the token expires soon, and there is no way to renew it", "warn"); }
  });

  stream.onState((next, info) => {
    if (info.renewed !== undefined) {
      challenged = false;
      if (info.renewed) {
        stats.renewals += 1;
        setState("renewed");
        log("challenge answered: the token was renewed, the stream goes on");
      } else {
        if (renewFrom) stats.refusedRenewals += 1;
        setState("expiring");
      }
      return;
    }
    if (next === "open") {
      stats.opens += 1;
      liveSince = Date.now() + 1000;
      setState(stats.renewals ? "renewed" : "open");
      if (!opened || stream.lastEventId === null) {
        log(`connected to ${url}: the stream starts with what the cache holds`);
      } else {
        const after = droppedAt ? ((Date.now() - droppedAt) / 1000).toFixed(1) : "0.0";
        stats.resumes.push({ lastEventId: stream.lastEventId, after: Number(after) });
        log(`resumed after ${after} s with Last-Event-ID ${stream.lastEventId}: nothing missed, ` +
            "nothing twice", "resume");
      }
      opened = true;
      droppedAt = null;
    } else if (next === "waiting") {
      stats.errors += 1;
      droppedAt = droppedAt || Date.now();
      if (state.textContent !== "reconnecting") log("the stream dropped: reconnecting", "warn");
      setState("reconnecting");
    } else if (next === "closed") {
      stats.errors += 1;
      if (info.status === 401) {
        setState("needs a token");
        log("this stream needs a token: open the link `make run` printed (it carries one)", "warn");
      } else if (info.status === 403 && initialToken) {
        setState("expired");
        log("the token expired or was refused, and there is no way to renew it", "warn");
      } else {
        setState("closed");
        log(`the stream was refused${info.status ? ` (${info.status})` : ""}`, "warn");
      }
    }
  });

  stream.on("message", onMessage);
  stream.on("delete", onDelete);

  function received(event, deleted) {
    const record = { id: event.id, data: event.data };
    if (deleted) record.deleted = true;
    stats.received.push(record);
    arrivals.push(Date.now());
    lastIdText.textContent = `id ${event.id}`;
  }

  function onMessage(event) {
    received(event, false);
    upsert(keyOf(event, parsed(event.data)), event.data, event.id);
    render();
  }

  function onDelete(event) {
    received(event, true);
    stats.deletes += 1;
    let key = event.data ? fromBase64Url(event.data) : "(null key)";
    if (event.id && event.id.startsWith("[")) key = keyOf(event, null);
    fade(key);
    render();
  }

  setInterval(() => { chart.draw(); showRate(); }, 250);
}
