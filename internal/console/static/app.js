// plumb's web console. Everything the model, a tool or a box produced is
// put into the page with textContent or text nodes, never as HTML
// (docs/security.md, "The web console and its terminal").
import { validate } from './schema.js';
import * as fleet from './sandboxes.js';

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = 'plumb.token';
const PAGE_SIZE = 25;

// ---------- the API (HTTP/JSON gateway on this origin) ----------

let token = sessionStorage.getItem(TOKEN_KEY);

function headers(extra, tok = token) {
  const h = { 'Content-Type': 'application/json', ...extra };
  if (tok) h.Authorization = 'Bearer ' + tok;
  return h;
}

class APIError extends Error {
  constructor(body, httpStatus) {
    super(body.message || ('HTTP ' + httpStatus));
    this.code = body.code;
    this.status = body.status;
    this.reason = body.reason || '';
    this.fieldViolations = body.fieldViolations || [];
    this.httpStatus = httpStatus;
  }
}

async function apiError(r) {
  let body = {};
  try { body = await r.json(); } catch { /* not JSON */ }
  return new APIError(body, r.status);
}

async function call(method, body, tok = token) {
  const r = await fetch('/plumb.v1.AgentService/' + method, {
    method: 'POST', headers: headers({}, tok), body: JSON.stringify(body || {}),
    credentials: 'omit', cache: 'no-store',
  });
  if (!r.ok) throw await apiError(r);
  return r.json();
}

// stream calls a server-streaming method and hands each event to onEvent
// until the stream ends; it returns the last sequence seen and whether a
// final event (run_finished, interrupted, error) came.
async function stream(method, body, onEvent, signal) {
  const r = await fetch('/plumb.v1.AgentService/' + method, {
    method: 'POST', headers: headers({ Accept: 'text/event-stream' }), body: JSON.stringify(body),
    credentials: 'omit', cache: 'no-store', signal,
  });
  if (!r.ok) throw await apiError(r);
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let last = body.afterSequence || 0;
  let final = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value.replace(/\r\n?/g, '\n');
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let kind = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) kind = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (!data.length) continue;
      const msg = JSON.parse(data.join('\n'));
      if (kind === 'error') throw new APIError(msg, 0);
      const ev = msg.event;
      if (!ev) continue;
      last = Math.max(last, Number(ev.sequence || 0));
      if (ev.runFinished || ev.interrupted || ev.error) final = true;
      onEvent(ev);
    }
  }
  return { last, final };
}

// follow runs a stream and, when the connection drops before the run's
// final event, resumes it with Attach after the last sequence seen.
async function follow(method, body, onEvent, signal) {
  let res = await stream(method, body, onEvent, signal);
  for (let tries = 0; !res.final && tries < 5 && !signal.aborted; tries++) {
    res = await stream('Attach', { threadId: view.threadId, afterSequence: String(res.last) }, onEvent, signal);
  }
}

// ---------- small DOM helpers (text only) ----------

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function pretty(json) {
  if (!json) return '';
  try { return JSON.stringify(JSON.parse(json), null, 2); } catch { return json; }
}

function enumName(v, prefix) {
  return String(v || '').replace(prefix, '').toLowerCase() || '—';
}

function showError(id, err) {
  const p = $(id);
  if (!err) { p.textContent = ''; return; }
  let s = err.message || String(err);
  if (err.reason) s += ' (' + err.reason + ')';
  for (const v of err.fieldViolations || []) s += '\n' + v.field + ': ' + v.description;
  p.textContent = s;
}

// ---------- sign in ----------

// signIn checks the token t ("" = none) with a call; only a token that
// works is kept.
async function signIn(t) {
  const r = await call('ListAgents', {}, t || null);
  token = t || null;
  if (token) sessionStorage.setItem(TOKEN_KEY, token); else sessionStorage.removeItem(TOKEN_KEY);
  agents = (r.agents || []).filter((a) => a.kind !== 'AGENT_KIND_SUBAGENT');
}

let agents = [];
let operator = false;

function showSignIn() {
  $('app').hidden = true;
  $('sandboxes').hidden = true;
  $('views').hidden = true;
  operator = false;
  $('signout').hidden = true;
  $('signin').hidden = false;
  $('who').textContent = '';
  $('token').focus();
}

function showApp() {
  $('signin').hidden = true;
  $('app').hidden = false;
  $('signout').hidden = false;
  $('who').textContent = token ? 'signed in' : 'no credentials';
  showView('threads');
  probeOperator();
  const sel = $('agent');
  sel.replaceChildren();
  for (const a of agents) {
    const o = el('option', '', a.name);
    o.value = a.name;
    sel.append(o);
  }
  loadThreads();
  newRun();
}

// ---------- views: threads, and the operators' sandboxes ----------

// probeOperator asks for the fleet once: only an operator's credential
// gets an answer (others get PERMISSION_DENIED), and only then is the
// Sandboxes view offered. The answer fills the view.
async function probeOperator() {
  const tok = token;
  let r = null;
  let err = null;
  try { r = await call('ListFleetSandboxes', {}); } catch (e) { err = e; }
  if (tok !== token || ($('app').hidden && $('sandboxes').hidden)) return; // signed out meanwhile
  operator = !err || err.status !== 'PERMISSION_DENIED';
  $('views').hidden = !operator;
  if (!operator) return;
  $('who').textContent = (token ? 'signed in' : 'no credentials') + ' · operator';
  if (r) fleet.show(r); else showError('sbx-error', err);
}

function showView(name) {
  const sbx = name === 'sandboxes' && operator;
  $('app').hidden = sbx;
  $('sandboxes').hidden = !sbx;
  $('view-threads').setAttribute('aria-pressed', String(!sbx));
  $('view-sandboxes').setAttribute('aria-pressed', String(sbx));
  if (sbx) {
    fleet.load();
    $('sbx-filter').focus();
  }
}

// ---------- thread list ----------

const list = { tokens: [''], page: 0 };

async function loadThreads() {
  const req = { pageSize: PAGE_SIZE, pageToken: list.tokens[list.page] };
  if ($('status-filter').value) req.status = $('status-filter').value;
  let r;
  try { r = await call('ListThreads', req); } catch (err) { showError('run-error', err); return; }
  const q = $('text-filter').value.trim().toLowerCase();
  const rows = $('thread-rows');
  rows.replaceChildren();
  for (const t of r.threads || []) {
    const agent = (t.lastRun && t.lastRun.agent) || '';
    if (q && !t.id.toLowerCase().includes(q) && !agent.toLowerCase().includes(q)) continue;
    const tr = el('tr');
    tr.dataset.id = t.id;
    const idCell = el('td', 'mono');
    const a = el('a', '', t.id.slice(-10));
    a.href = '#';
    a.title = t.id;
    a.addEventListener('click', (e) => { e.preventDefault(); e.stopPropagation(); openThread(t.id); });
    idCell.append(a);
    tr.append(idCell, el('td', '', enumName(t.status, 'THREAD_STATUS_')), el('td', '', agent || '—'),
      el('td', 'muted', t.updatedAt ? new Date(t.updatedAt).toLocaleString() : ''));
    tr.addEventListener('click', () => openThread(t.id));
    if (t.id === view.threadId) tr.classList.add('selected');
    rows.append(tr);
  }
  list.tokens[list.page + 1] = r.nextPageToken || '';
  $('next-page').disabled = !r.nextPageToken;
  $('prev-page').disabled = list.page === 0;
}

// ---------- the thread view ----------

const view = {
  threadId: '',
  gen: 0, // counts thread opens and new runs
  abort: null,
  events: 0, // live events rendered since the thread was opened
  tools: new Map(), // tool call id -> {box, args, out, result, sub}
  streams: new Map(), // agent path -> element receiving message deltas
  subs: new Map(), // parent tool call id -> subagent container
};

function resetView(title) {
  if (view.abort) view.abort.abort();
  view.abort = null;
  view.tools.clear();
  view.streams.clear();
  view.subs.clear();
  pending.length = 0;
  $('log').replaceChildren();
  $('todos').replaceChildren();
  $('interrupts').replaceChildren();
  $('usage').textContent = '';
  $('log-count').textContent = '';
  $('event-count').textContent = '';
  view.events = 0;
  $('thread-status').textContent = '';
  $('thread-title').textContent = title;
  showError('run-error', null);
  $('term-out').replaceChildren();
  closeTerminal();
  $('file-list').replaceChildren();
  $('file-view').hidden = true;
  $('file-content').textContent = '';
  $('cwd').textContent = '';
  files.current = '';
  files.thread = '';
}

function newRun() {
  view.gen++;
  view.threadId = '';
  resetView('New run');
  $('agent').hidden = false;
  $('cancel').hidden = true;
  selectTab('run');
  for (const t of ['files', 'terminal']) $('tab-' + t).disabled = true;
}

function setThread(id) {
  view.threadId = id;
  $('thread-title').textContent = 'Thread ' + id;
  $('agent').hidden = true;
  for (const t of ['files', 'terminal']) $('tab-' + t).disabled = false;
}

function setStatus(s) {
  $('thread-status').textContent = s;
  $('cancel').hidden = s !== 'running';
}

async function openThread(id) {
  // Marks for measuring large threads (docs/console.md, "Large threads").
  performance.clearMarks();
  performance.clearMeasures();
  performance.mark('plumb:open');
  resetView('Thread ' + id);
  setThread(id);
  selectTab('run');
  // A later open (another click) supersedes this one.
  const gen = ++view.gen;
  const current = () => view.gen === gen;
  for (const tr of $('thread-rows').children) tr.classList.toggle('selected', tr.dataset.id === id);
  let t;
  try { t = (await call('GetThread', { threadId: id, view: 'THREAD_VIEW_BASIC' })).thread; } catch (err) { showError('run-error', err); return; }
  if (!current()) return;
  renderTodos(t.todos || []);
  if (t.usage) renderUsage(t.usage);
  setStatus(enumName(t.status, 'THREAD_STATUS_'));
  // History, page by page, appended as it comes.
  let pageToken = '';
  let count = 0;
  do {
    let r;
    const asked = performance.now();
    try { r = await call('ListMessages', { threadId: id, pageSize: 500, pageToken }); } catch (err) { showError('run-error', err); return; }
    if (!current()) return;
    const got = performance.now();
    const page = r.messages || [];
    for (const m of page) renderMessage(m);
    performance.measure('plumb:fetch', { start: asked, end: got });
    performance.measure('plumb:render', { start: got, end: performance.now() });
    count += page.length;
    $('log-count').textContent = count + ' messages';
    if (count === page.length) performance.mark('plumb:first-render');
    pageToken = r.nextPageToken || '';
  } while (pageToken);
  performance.mark('plumb:history-rendered');
  // After the next frame's style, layout and paint: the history is on screen.
  requestAnimationFrame(() => setTimeout(() => performance.mark('plumb:history-painted'), 0));
  if (t.pendingInterrupt) renderInterrupt(t.pendingInterrupt);
  if (t.status === 'THREAD_STATUS_RUNNING') {
    $('log').append(el('div', 'status', '— live: the current run —'));
    runStream('Attach', { threadId: id });
  }
  scrollLog(true);
}

function nearBottom() {
  const l = $('log');
  return l.scrollHeight - l.scrollTop - l.clientHeight < 80;
}

function scrollLog(force) {
  const l = $('log');
  if (force || nearBottom()) l.scrollTop = l.scrollHeight;
}

function renderTodos(todos) {
  const box = $('todos');
  box.replaceChildren();
  if (!todos.length) return;
  const ul = el('ul');
  for (const t of todos) {
    const s = enumName(t.status, 'TODO_STATUS_').toUpperCase();
    const mark = s === 'COMPLETED' ? '☑ ' : s === 'IN_PROGRESS' ? '▶ ' : '☐ ';
    ul.append(el('li', 'todo-' + s, mark + t.content));
  }
  box.append(el('h3', '', 'Todos'), ul);
}

function renderUsage(u) {
  $('usage').textContent = 'tokens: ' + (u.totalTokens || 0) + ' (in ' + (u.promptTokens || 0) + ', out ' + (u.completionTokens || 0) + ')';
}

// containerFor is where an event of a subagent goes: nested under the
// tool call that started it; the root's events go into the log.
function containerFor(ev) {
  const parent = ev.parentToolCallId;
  if (!parent) return $('log');
  let sub = view.subs.get(parent);
  if (sub) return sub;
  const tool = view.tools.get(parent);
  sub = el('div', 'sub');
  if (tool) tool.box.insertBefore(sub, tool.result); else $('log').append(sub);
  view.subs.set(parent, sub);
  return sub;
}

function toolBox(container, id, name, argsJSON) {
  let t = view.tools.get(id);
  if (t) return t;
  // Closed by default (the log stays readable); a subagent's call stays
  // open, its work nests inside.
  const box = el('details', 'tool ev');
  box.open = name === 'task';
  box.dataset.toolCallId = id;
  const sum = el('summary');
  const state = el('span', 'state', ' …');
  sum.append(el('span', 'name', name), el('span', 'muted preview', ' ' + preview(argsJSON)), state);
  const args = el('pre', 'args', pretty(argsJSON));
  const out = el('pre', 'output');
  out.hidden = true;
  const result = el('pre', 'result');
  result.hidden = true;
  box.append(sum, args, out, result);
  container.append(box);
  t = { box, args, out, result, state };
  view.tools.set(id, t);
  return t;
}

// preview is a one-line glimpse of a call's arguments.
function preview(json) {
  let s = json || '';
  try {
    const v = JSON.parse(json);
    s = Object.values(v).filter((x) => typeof x === 'string').join(' ') || JSON.stringify(v);
  } catch { /* not JSON: as is */ }
  s = s.replace(/\s+/g, ' ');
  return s.length > 80 ? s.slice(0, 79) + '…' : s;
}

function setResult(t, content, isError, exitCode) {
  t.result.hidden = false;
  t.result.textContent = content;
  if (exitCode !== undefined && exitCode !== null) t.result.dataset.exit = String(exitCode);
  t.box.classList.toggle('error', !!isError);
  t.state.textContent = isError ? ' ✗ failed' : (exitCode !== undefined && exitCode !== null ? ' ✓ exit ' + exitCode : ' ✓');
}

// renderMessage renders one stored message of the history.
function renderMessage(m) {
  const log = $('log');
  switch (m.role) {
    case 'user':
      log.append(el('div', 'msg user ev', m.content || ''));
      break;
    case 'assistant':
      if (m.content) log.append(el('div', 'msg assistant ev', m.content));
      for (const c of m.toolCalls || []) toolBox(log, c.id, c.name, c.argsJson);
      break;
    case 'tool': {
      const t = view.tools.get(m.toolCallId) || toolBox(log, m.toolCallId, m.name || 'tool', '');
      setResult(t, m.content || '', m.isError);
      break;
    }
    default:
      if (m.content) log.append(el('div', 'status ev', m.role + ': ' + m.content));
  }
}

// Events are rendered in batches, one per frame: a replay of thousands
// of events costs one layout per frame, not one per event.
const pending = [];
let scheduled = false;

function enqueue(ev) {
  pending.push(ev);
  if (scheduled) return;
  scheduled = true;
  let done = false;
  const flush = () => {
    if (done) return;
    done = true;
    scheduled = false;
    const stick = nearBottom();
    const batch = pending.splice(0);
    for (const e of batch) renderEvent(e);
    if (!view.events && batch.length) performance.mark('plumb:first-event');
    view.events += batch.length;
    $('event-count').textContent = view.events + ' events';
    if (stick) scrollLog(true);
  };
  requestAnimationFrame(flush);
  setTimeout(flush, 100); // hidden tabs get no frames
}

// renderEvent appends one live event: each adds or changes a few nodes,
// never re-renders what is there.
function renderEvent(ev) {
  const where = containerFor(ev);
  const path = ev.agentPath || '';
  if (ev.runStarted) {
    if (ev.runStarted.threadId && !view.threadId) {
      setThread(ev.runStarted.threadId);
      loadThreads();
    }
    setStatus('running');
    where.append(el('div', 'status ev', (ev.runStarted.resumed ? 'resumed' : 'run started') + ' · ' + (ev.runStarted.agent || '') + ' · ' + (ev.runStarted.model || '')));
  } else if (ev.messageDelta) {
    let s = view.streams.get(path);
    if (!s) {
      s = el('div', 'msg assistant ev streaming');
      where.append(s);
      view.streams.set(path, s);
    }
    s.append(document.createTextNode(ev.messageDelta.text || ''));
  } else if (ev.message) {
    const s = view.streams.get(path);
    view.streams.delete(path);
    const text = ev.message.text || '';
    if (s) {
      s.classList.remove('streaming');
      if (s.textContent !== text) s.textContent = text;
      if (!text) s.remove();
    } else if (text) {
      where.append(el('div', 'msg assistant ev', text));
    }
  } else if (ev.toolCallStarted) {
    toolBox(where, ev.toolCallStarted.id, ev.toolCallStarted.name, ev.toolCallStarted.argsJson);
  } else if (ev.toolOutput) {
    const t = view.tools.get(ev.toolOutput.id);
    if (t) {
      t.out.hidden = false;
      t.out.append(document.createTextNode(ev.toolOutput.text || ''));
    }
  } else if (ev.toolResult) {
    const r = ev.toolResult;
    const t = view.tools.get(r.id) || toolBox(where, r.id, r.name, '');
    setResult(t, r.content || '', r.isError, r.exitCode);
  } else if (ev.todosUpdated) {
    if (!ev.parentToolCallId) renderTodos(ev.todosUpdated.todos || []);
  } else if (ev.subagentStarted) {
    const s = ev.subagentStarted;
    where.append(el('div', 'sub-title ev', 'subagent ' + (s.subagent || '') + (s.description ? ': ' + s.description : '')));
  } else if (ev.subagentFinished) {
    where.append(el('div', 'sub-title ev', 'subagent ' + enumName(ev.subagentFinished.status, 'SUBAGENT_STATUS_')));
  } else if (ev.usage) {
    if (ev.usage.runTotal) renderUsage(ev.usage.runTotal);
  } else if (ev.interrupted) {
    setStatus('interrupted');
    renderInterrupt(ev.interrupted);
  } else if (ev.error) {
    setStatus('idle');
    where.append(el('div', 'error ev', 'run failed: ' + (ev.error.code || '') + ': ' + (ev.error.message || '')));
  } else if (ev.runFinished) {
    setStatus('idle');
    where.append(el('div', 'status ev run-finished', 'run ' + enumName(ev.runFinished.status, 'RUN_STATUS_')));
    performance.mark('plumb:run-finished');
    requestAnimationFrame(() => setTimeout(() => performance.mark('plumb:run-finished-painted'), 0));
    if (ev.runFinished.usage) renderUsage(ev.runFinished.usage);
    loadThreads();
  } else if (ev.summarized) {
    where.append(el('div', 'status ev', 'history summarized'));
  } else if (ev.sandboxLost) {
    where.append(el('div', 'error ev', 'sandbox lost: ' + (ev.sandboxLost.message || '')));
  } else if (ev.runQueued) {
    where.append(el('div', 'status ev', 'run queued'));
  } else if (ev.egressRequest) {
    where.append(el('div', 'status ev', 'egress asked: ' + JSON.stringify(ev.egressRequest)));
  } else if (ev.egressDecided) {
    where.append(el('div', 'status ev', 'egress decided: ' + JSON.stringify(ev.egressDecided)));
  }
}

async function runStream(method, body) {
  if (view.abort) view.abort.abort();
  const ctl = new AbortController();
  view.abort = ctl;
  showError('run-error', null);
  $('send').disabled = true;
  try {
    await follow(method, body, enqueue, ctl.signal);
  } catch (err) {
    if (!ctl.signal.aborted) showError('run-error', err);
  } finally {
    if (view.abort === ctl) view.abort = null;
    $('send').disabled = false;
  }
}

// ---------- interrupts ----------

const DECISIONS = [
  ['DECISION_TYPE_APPROVE', 'Approve'],
  ['DECISION_TYPE_EDIT', 'Edit'],
  ['DECISION_TYPE_REJECT', 'Reject'],
  ['DECISION_TYPE_RESPOND', 'Respond'],
];

function renderInterrupt(intr) {
  const box = $('interrupts');
  box.replaceChildren();
  const reqs = intr.requests || [];
  const decided = new Array(reqs.length).fill(null);
  const submit = () => {
    if (decided.some((d) => !d)) return;
    box.replaceChildren(el('div', 'status', 'resuming…'));
    runStream('Resume', { threadId: view.threadId, interruptId: intr.interruptId, decisions: decided }).then(() => box.replaceChildren());
  };
  reqs.forEach((r, i) => {
    const card = el('div', 'interrupt');
    card.dataset.toolCallId = r.toolCallId;
    card.append(el('h3', '', (r.kind === 'INTERRUPT_KIND_CLIENT_TOOL' ? 'Client tool: ' : 'Approval: ') + r.toolName));
    if (r.description) card.append(el('p', '', r.description));
    const args = el('textarea', 'json');
    args.rows = 6;
    args.value = pretty(r.argsJson);
    args.setAttribute('aria-label', 'arguments of ' + r.toolName);
    args.readOnly = true;
    const note = el('input');
    note.placeholder = 'message (reject reason or response)';
    note.setAttribute('aria-label', 'message');
    const err = el('p', 'error');
    err.setAttribute('role', 'alert');
    const row = el('div', 'row');
    const allowed = r.allowedDecisions && r.allowedDecisions.length ? r.allowedDecisions : ['DECISION_TYPE_APPROVE', 'DECISION_TYPE_REJECT'];
    for (const [type, label] of DECISIONS) {
      if (!allowed.includes(type)) continue;
      const b = el('button', type === 'DECISION_TYPE_APPROVE' ? '' : 'secondary', label);
      b.type = 'button';
      b.dataset.decision = type;
      b.addEventListener('click', () => {
        const d = { toolCallId: r.toolCallId, agentPath: r.agentPath || '', type };
        if (type === 'DECISION_TYPE_EDIT') {
          if (args.readOnly) { args.readOnly = false; args.focus(); b.textContent = 'Save edit'; return; }
          let v;
          try { v = JSON.parse(args.value); } catch (e) { err.textContent = 'not JSON: ' + e.message; return; }
          if (r.argsSchemaJson) {
            const problems = validate(JSON.parse(r.argsSchemaJson), v);
            if (problems.length) { err.textContent = problems.join('\n'); return; }
          }
          d.editedArgsJson = JSON.stringify(v);
        }
        if (type === 'DECISION_TYPE_REJECT' || type === 'DECISION_TYPE_RESPOND') d.message = note.value;
        decided[i] = d;
        err.textContent = '';
        card.classList.add('decided');
        for (const x of row.querySelectorAll('button')) x.disabled = true;
        card.append(el('div', 'status', 'decided: ' + label.toLowerCase()));
        submit();
      });
      row.append(b);
    }
    card.append(args, note, row, err);
    box.append(card);
  });
  const first = box.querySelector('button');
  if (first) first.focus();
}

// ---------- files ----------

const files = { cwd: '', current: '', thread: '' };

async function listFiles(path) {
  showError('files-error', null);
  let r;
  try { r = await call('ListThreadFiles', { threadId: view.threadId, path }); } catch (err) { showError('files-error', err); return; }
  files.cwd = r.path;
  $('cwd').textContent = r.path;
  const ul = $('file-list');
  ul.replaceChildren();
  for (const e of r.entries || []) {
    const li = el('li');
    const name = e.path.replace(/\/$/, '').split('/').pop() + (e.isDir ? '/' : '');
    const b = el('button', '', name);
    b.type = 'button';
    b.dataset.path = e.path;
    b.addEventListener('click', () => (e.isDir ? listFiles(e.path) : viewFile(e.path)));
    li.append(b, el('span', 'muted', e.isDir ? '' : '  ' + (e.size || 0) + ' B'));
    ul.append(li);
  }
}

function b64bytes(s) {
  const bin = atob(s || '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

async function readAll(path, cap) {
  const parts = [];
  let offset = 0;
  let size = 0;
  for (;;) {
    const r = await call('ReadThreadFile', { threadId: view.threadId, path, offset: String(offset) });
    const b = b64bytes(r.content);
    parts.push(b);
    offset += b.length;
    size = Number(r.size || 0);
    if (!r.more || !b.length || (cap && offset >= cap)) break;
  }
  return { parts, size, read: offset };
}

async function viewFile(path) {
  showError('files-error', null);
  files.current = path;
  $('file-view').hidden = false;
  $('file-name').textContent = path;
  const pre = $('file-content');
  pre.textContent = '';
  let r;
  try { r = await readAll(path, 1 << 20); } catch (err) { showError('files-error', err); return; }
  const blob = new Blob(r.parts);
  const bytes = new Uint8Array(await blob.arrayBuffer());
  try {
    pre.textContent = new TextDecoder('utf-8', { fatal: true }).decode(bytes) + (r.read < r.size ? '\n… (' + r.size + ' bytes; download for the rest)' : '');
  } catch {
    pre.textContent = '(binary file, ' + r.size + ' bytes: download it)';
  }
}

async function downloadFile() {
  if (!files.current) return;
  let r;
  try { r = await readAll(files.current, 0); } catch (err) { showError('files-error', err); return; }
  const url = URL.createObjectURL(new Blob(r.parts, { type: 'application/octet-stream' }));
  const a = el('a');
  a.href = url;
  a.download = files.current.split('/').pop() || 'file';
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// ---------- terminal ----------

let term = null;

function termWrite(text) {
  const out = $('term-out');
  out.append(document.createTextNode(text));
  out.scrollTop = out.scrollHeight;
}

function openTerminal() {
  closeTerminal();
  showError('term-error', null);
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const ws = new WebSocket(proto + '//' + location.host + '/ui/api/terminal?thread=' + encodeURIComponent(view.threadId));
  ws.binaryType = 'arraybuffer';
  const dec = new TextDecoder();
  ws.addEventListener('open', () => {
    ws.send(JSON.stringify({ token: token || '' }));
    $('term-connect').textContent = 'Disconnect';
    $('term-in').focus();
  });
  ws.addEventListener('message', (e) => {
    termWrite(typeof e.data === 'string' ? e.data : dec.decode(e.data, { stream: true }));
  });
  ws.addEventListener('close', (e) => {
    if (term === ws) term = null;
    $('term-connect').textContent = 'Connect';
    termWrite('\n[closed' + (e.reason ? ': ' + e.reason : '') + ']\n');
  });
  term = ws;
}

function closeTerminal() {
  if (term) {
    const ws = term;
    term = null;
    ws.close();
  }
  $('term-connect').textContent = 'Connect';
}

// ---------- tabs and wiring ----------

function selectTab(name) {
  for (const t of ['run', 'files', 'terminal']) {
    $('tab-' + t).setAttribute('aria-selected', String(t === name));
    $('pane-' + t).hidden = t !== name;
  }
  if (name === 'files') {
    const same = files.thread === view.threadId;
    files.thread = view.threadId;
    listFiles(same ? files.cwd : '');
  }
  if (name === 'terminal' && !term && view.threadId) openTerminal();
}

function wire() {
  fleet.init({ call, el, showError });
  $('view-threads').addEventListener('click', () => showView('threads'));
  $('view-sandboxes').addEventListener('click', () => showView('sandboxes'));
  $('signin-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    showError('signin-error', null);
    try {
      await signIn($('token').value);
      $('token').value = '';
      showApp();
    } catch (err) {
      showError('signin-error', err);
    }
  });
  $('signout').addEventListener('click', () => {
    token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    resetView('');
    showSignIn();
  });
  $('refresh').addEventListener('click', () => loadThreads());
  $('status-filter').addEventListener('change', () => { list.tokens = ['']; list.page = 0; loadThreads(); });
  $('text-filter').addEventListener('input', () => loadThreads());
  $('next-page').addEventListener('click', () => { list.page++; loadThreads(); });
  $('prev-page').addEventListener('click', () => { list.page = Math.max(0, list.page - 1); loadThreads(); });
  $('new-thread').addEventListener('click', () => { newRun(); $('message').focus(); });
  $('send-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('message').value;
    if (!text.trim()) return;
    $('message').value = '';
    $('log').append(el('div', 'msg user ev', text));
    performance.clearMarks();
    performance.mark('plumb:run-sent');
    const req = { input: [{ content: text }] };
    if (view.threadId) req.threadId = view.threadId; else if ($('agent').value) req.agent = $('agent').value;
    runStream('Run', req);
  });
  $('message').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) $('send-form').requestSubmit();
  });
  $('cancel').addEventListener('click', async () => {
    try { await call('Cancel', { threadId: view.threadId }); } catch (err) { showError('run-error', err); }
  });
  for (const t of ['run', 'files', 'terminal']) $('tab-' + t).addEventListener('click', () => selectTab(t));
  $('files-up').addEventListener('click', () => {
    const up = files.cwd.replace(/\/$/, '').split('/').slice(0, -1).join('/') || '/';
    listFiles(up);
  });
  $('files-refresh').addEventListener('click', () => listFiles(files.cwd));
  $('file-download').addEventListener('click', () => downloadFile());
  $('term-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (!term || term.readyState !== WebSocket.OPEN) { showError('term-error', new Error('not connected')); return; }
    term.send($('term-in').value + '\n');
    $('term-in').value = '';
  });
  $('term-connect').addEventListener('click', () => (term ? closeTerminal() : openTerminal()));
}

async function start() {
  wire();
  // Without a stored token, try without one: agentd may run without
  // credentials (loopback); otherwise ask for it.
  try {
    await signIn(token);
    showApp();
  } catch {
    sessionStorage.removeItem(TOKEN_KEY);
    if ($('app').hidden) showSignIn();
  }
}

start();
