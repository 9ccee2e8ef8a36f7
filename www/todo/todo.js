// The todo page: the list comes from /tasks as Server-Sent Events whose ids are
// ["<base64url key>","<progress>/<etag>"]; every change is a write through http-kafka that
// carries the etag it started from as If-Match. The page never changes a task itself: what
// it shows is what the snapshots topic says, so two pages always agree.
import { openStream } from "./ssekd-client/stream.js";
import { writer } from "./ssekd-client/writes.js";

const tasks = new Map();  // task id -> {task, etag}
const todo = window.todo = {
  opens: 0,
  events: [],     // {type: "message"|"delete", id, at}: what the stream brought, when
  answers: [],    // {method, path, status, sentAt, at}: each write, from when it was sent
  tasks,
};

function decodeKey(key64) {
  const b64 = key64.replace(/-/g, "+").replace(/_/g, "/");
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}

function setConnection(state) {
  const el = document.getElementById("connection");
  el.textContent = state;
  el.className = state;
}

function setStatus(text, problem) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.className = problem ? "problem" : "";
}

// The list: ssekd-client's stream, which reconnects with its last id after a drop. The tasks
// live in memory, so a reload starts over from the snapshots (storage: null).
const stream = openStream("/tasks", {storage: null});
let opened = false;
stream.onState((state) => {
  if (state === "open") { todo.opens += 1; opened = true; setConnection("open"); }
  else if (state === "closed") setConnection("closed");
  else if (opened) setConnection("reconnecting");
});
stream.on("message", (e) => {
  const [key64, etag] = JSON.parse(e.id);
  const id = decodeKey(key64);
  tasks.set(id, {task: JSON.parse(e.data), etag});
  todo.events.push({type: "message", id, at: Date.now()});
  render();
});
stream.on("delete", (e) => {
  const id = decodeKey(JSON.parse(e.id)[0]);
  tasks.delete(id);
  todo.events.push({type: "delete", id, at: Date.now()});
  render();
});

const WHY = {
  400: "the request was refused",
  404: "that task is gone",
  412: "someone changed this task first; it shows their version now",
  413: "too long",
  503: "the broker is not answering; try again",
  504: "written, but the service has not answered yet",
};

// Writes: ssekd-client's writer sends each one with an idempotency key it keeps across its
// retries (a 503, a 504, a cut connection), so a retry is never written twice.
const tasksApi = writer("/");

async function send(method, path, body, etag) {
  const answer = {method, path, status: null, sentAt: Date.now(), at: null};
  todo.answers.push(answer);
  let status;
  try {
    // the page shows what the stream says: a conflict needs no read of the current value
    const reply = await tasksApi[method.toLowerCase()](path, body, {ifMatch: etag || null, current: false});
    status = reply.status;
    setStatus(`${method} ${status}`, false);
  } catch (e) {
    status = e.status || 0;
    setStatus(`${status || "no answer"}: ${WHY[status] || (e.answer ? e.answer.text : "the request failed")}`, true);
  }
  Object.assign(answer, {status, at: Date.now()});
  return status;
}

todo.add = (title) => send("POST", "/tasks", {title});
todo.edit = (id, changes, etag) => {
  const held = tasks.get(id);
  return send("PUT", `/tasks/${encodeURIComponent(id)}`, {...held.task, ...changes}, etag || held.etag);
};
todo.remove = (id, etag) => send("DELETE", `/tasks/${encodeURIComponent(id)}`, undefined, etag || tasks.get(id).etag);

document.getElementById("add").addEventListener("submit", (e) => {
  e.preventDefault();
  const input = document.getElementById("title");
  const title = input.value.trim();
  if (title) todo.add(title);
  input.value = "";
});

// An edit keeps the etag of the version it started from: if another page changed the task
// meanwhile, the write is refused (412) instead of overwriting that change.
function startEdit(li, id) {
  const held = tasks.get(id);
  const etag = held.etag;
  const input = document.createElement("input");
  input.className = "edit";
  input.value = held.task.title;
  li.replaceChildren(input);
  input.focus();
  let done = false;
  const finish = (save) => {
    if (done) return;
    done = true;
    if (save && input.value.trim() && input.value.trim() !== held.task.title) {
      todo.edit(id, {title: input.value.trim()}, etag);
    }
    todo.editing = null;
    render();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") finish(true);
    if (e.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
  todo.editing = {id, input, finish};
}

function render() {
  if (todo.editing && document.activeElement === todo.editing.input) return;  // not under the user's cursor
  todo.editing = null;
  const list = document.getElementById("tasks");
  const items = [...tasks.entries()].map(([id, {task}]) => {
    const li = document.createElement("li");
    li.dataset.id = id;
    li.className = task.completed ? "done" : "";
    const tick = document.createElement("input");
    tick.type = "checkbox";
    tick.checked = Boolean(task.completed);
    tick.addEventListener("change", () => todo.edit(id, {completed: tick.checked}));
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = task.title;
    title.addEventListener("dblclick", () => startEdit(li, id));
    const remove = document.createElement("button");
    remove.textContent = "\u00d7";
    remove.title = "delete";
    remove.addEventListener("click", () => todo.remove(id));
    li.append(tick, title, remove);
    return li;
  });
  list.replaceChildren(...items);
  document.getElementById("empty").hidden = tasks.size > 0;
}

todo.startEdit = (id) => startEdit(document.querySelector(`li[data-id="${CSS.escape(id)}"]`), id);
