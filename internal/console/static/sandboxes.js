// The operators' Sandboxes view: every tenant's boxes on every sandboxd
// worker (ListFleetSandboxes), sortable and filterable, with a delete
// button that asks for confirmation (DeleteFleetSandbox). Everything a
// worker or a box reports (ids, labels, errors) is put into the page as
// text, never as HTML.

const $ = (id) => document.getElementById(id);

// api is given by app.js: call(method, body), el(tag, cls, text),
// showError(id, err).
let api = null;

const state = {
  workers: [],
  rows: [], // flattened sandboxes, each {sb, worker}
  sort: { key: 'worker', dir: 1 },
  confirming: '', // the sandbox id whose delete awaits confirmation
  loading: 0,
};

const STATE_PREFIX = 'SANDBOX_STATE_';

function stateName(s) {
  return String(s || '').replace(STATE_PREFIX, '').toLowerCase() || '—';
}

function ms(ts) {
  const t = ts ? Date.parse(ts) : NaN;
  return Number.isNaN(t) || t <= 0 ? 0 : t;
}

// span formats a duration in ms as "45s", "12m", "3h 5m", "2d 4h".
function span(d) {
  const s = Math.max(0, Math.round(d / 1000));
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm';
  const h = Math.floor(m / 60);
  if (h < 48) return h + 'h ' + (m % 60) + 'm';
  return Math.floor(h / 24) + 'd ' + (h % 24) + 'h';
}

function bytes(n) {
  n = Number(n || 0);
  if (!n) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (Number.isInteger(n) ? n : n.toFixed(1)) + ' ' + units[i];
}

function plural(n, one, many) {
  return n + ' ' + (Number(n) === 1 ? one : many);
}

function ago(ts, now) {
  const t = ms(ts);
  return t ? span(now - t) + ' ago' : '—';
}

function expiry(ts, now) {
  const t = ms(ts);
  if (!t) return '—';
  return t > now ? 'in ' + span(t - now) : 'expired';
}

// keys are the sortable values of a row.
const keys = {
  id: (r) => r.sb.id || '',
  worker: (r) => r.worker,
  state: (r) => stateName(r.sb.state),
  tenant: (r) => r.sb.tenant || '',
  thread: (r) => (r.sb.labels && r.sb.labels['thread-id']) || '',
  // Age and last use sort by how long ago: ascending = the most recent.
  created: (r) => -ms(r.sb.createdAt),
  used: (r) => -ms(r.sb.lastUsedAt),
  expires: (r) => ms(r.sb.expiresAt),
  cpus: (r) => Number((r.sb.resources && r.sb.resources.cpus) || 0),
  memory: (r) => Number((r.sb.resources && r.sb.resources.memoryBytes) || 0),
};

function compare(a, b) {
  const k = keys[state.sort.key];
  const x = k(a);
  const y = k(b);
  let c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
  if (c === 0) c = String(a.sb.id).localeCompare(String(b.sb.id));
  return c * state.sort.dir;
}

// load fetches the fleet; a later load supersedes an earlier one.
export async function load() {
  const n = ++state.loading;
  api.showError('sbx-error', null);
  $('sbx-count').textContent = 'loading…';
  let r;
  try {
    r = await api.call('ListFleetSandboxes', {});
  } catch (err) {
    if (n !== state.loading) return;
    $('sbx-count').textContent = '';
    api.showError('sbx-error', err);
    return;
  }
  if (n !== state.loading) return;
  show(r);
}

// show renders a ListFleetSandboxes answer.
export function show(r) {
  state.workers = r.workers || [];
  state.rows = [];
  for (const w of state.workers) {
    for (const sb of w.sandboxes || []) state.rows.push({ sb, worker: w.name || w.address });
  }
  renderWorkers();
  renderRows();
}

function renderWorkers() {
  const el = api.el;
  const box = $('workers');
  box.replaceChildren();
  for (const w of state.workers) {
    const card = el('section', 'worker' + (w.reachable ? '' : ' down'));
    card.dataset.worker = w.name || w.address;
    const title = el('h3', '', (w.name || '(unnamed)') + ' ');
    title.append(el('span', 'muted mono', w.address || ''));
    card.append(title);
    let health;
    if (!w.reachable) health = el('div', 'health-bad', 'unreachable: ' + (w.error || 'no answer'));
    else if (!w.healthy) health = el('div', 'health-bad', 'reachable, not serving (draining): no new sandboxes');
    else health = el('div', 'health-ok', 'healthy');
    health.classList.add('health');
    card.append(health);
    const d = w.describe;
    if (d) {
      const max = d.maxSandboxes ? ' of ' + d.maxSandboxes : '';
      const mem = bytes(d.memoryReservedBytes) + (Number(d.maxMemoryBytes || 0) ? ' of ' + bytes(d.maxMemoryBytes) : '');
      card.append(el('div', 'muted', (d.sandboxes || 0) + max + (Number(d.sandboxes || 0) === 1 && !max ? ' sandbox · ' : ' sandboxes · ') + mem + ' reserved · ' + (d.version || '')));
      card.append(el('div', 'muted', 'runtimes: ' + ((d.runtimes || []).join(', ') || '—') + ' · templates: ' + ((d.templates || []).join(', ') || '—')));
      const pools = d.pools || [];
      if (pools.length) {
        const ul = el('ul', 'pools');
        for (const p of pools) {
          ul.append(el('li', 'pool', 'pool ' + (p.template || '(default)') + ': ' + (p.ready || 0) + ' ready, ' +
            (p.starting || 0) + ' starting of ' + (p.size || 0) + ' · ' + (p.hits || 0) + ' hits, ' + (p.misses || 0) + ' misses · ' +
            bytes(p.memoryReservedBytes)));
        }
        card.append(ul);
      } else {
        card.append(el('div', 'muted', 'no warm pools'));
      }
    }
    box.append(card);
  }
}

function matches(r, q, st) {
  if (st && r.sb.state !== st) return false;
  if (!q) return true;
  const thread = (r.sb.labels && r.sb.labels['thread-id']) || '';
  return [r.sb.id, r.sb.tenant, thread, r.worker, stateName(r.sb.state)].some((s) => String(s || '').toLowerCase().includes(q));
}

function renderRows() {
  const el = api.el;
  const now = Date.now();
  const q = $('sbx-filter').value.trim().toLowerCase();
  const st = $('sbx-state').value;
  const rows = state.rows.filter((r) => matches(r, q, st)).sort(compare);
  const body = $('sbx-rows');
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.action : '';
  body.replaceChildren();
  for (const r of rows) {
    const sb = r.sb;
    const tr = el('tr');
    tr.dataset.id = sb.id;
    tr.dataset.worker = r.worker;
    const res = sb.resources || {};
    const thread = (sb.labels && sb.labels['thread-id']) || '';
    const stateCell = el('td', 'state', stateName(sb.state));
    if (sb.failureReason) stateCell.title = sb.failureReason;
    tr.append(
      el('td', 'mono', sb.id),
      el('td', '', r.worker),
      stateCell,
      el('td', 'tenant', sb.tenant || '—'),
      el('td', 'mono thread', thread || '—'),
      el('td', '', ago(sb.createdAt, now)),
      el('td', '', ago(sb.lastUsedAt, now)),
      el('td', '', expiry(sb.expiresAt, now)),
      el('td', '', res.cpus ? String(res.cpus) : '—'),
      el('td', '', bytes(res.memoryBytes)),
    );
    const actions = el('td', 'actions');
    if (state.confirming === sb.id) {
      const yes = el('button', 'danger', 'Confirm delete');
      yes.type = 'button';
      yes.dataset.action = 'confirm';
      yes.setAttribute('aria-label', 'confirm deleting sandbox ' + sb.id);
      yes.addEventListener('click', () => remove(sb.id));
      const no = el('button', 'secondary', 'Keep');
      no.type = 'button';
      no.dataset.action = 'keep';
      no.addEventListener('click', () => { state.confirming = ''; renderRows(); focusRow(sb.id, 'delete'); });
      actions.append(yes, no);
    } else {
      const del = el('button', 'secondary', 'Delete');
      del.type = 'button';
      del.dataset.action = 'delete';
      del.setAttribute('aria-label', 'delete sandbox ' + sb.id);
      del.addEventListener('click', () => { state.confirming = sb.id; renderRows(); focusRow(sb.id, 'confirm'); });
      actions.append(del);
    }
    tr.append(actions);
    body.append(tr);
  }
  const total = state.rows.length;
  $('sbx-count').textContent = (rows.length === total ? plural(total, 'sandbox', 'sandboxes') : rows.length + ' of ' + total + ' sandboxes') +
    ' on ' + plural(state.workers.length, 'worker', 'workers');
  for (const th of document.querySelectorAll('#sbx-table th')) {
    const b = th.querySelector('button.sort');
    if (!b) continue;
    th.setAttribute('aria-sort', b.dataset.sort === state.sort.key ? (state.sort.dir > 0 ? 'ascending' : 'descending') : 'none');
  }
  if (focused && state.confirming) focusRow(state.confirming, focused === 'delete' ? 'confirm' : focused);
}

function focusRow(id, action) {
  for (const tr of $('sbx-rows').children) {
    if (tr.dataset.id !== id) continue;
    const b = tr.querySelector('button[data-action="' + action + '"]');
    if (b) b.focus();
  }
}

async function remove(id) {
  api.showError('sbx-error', null);
  $('sbx-note').textContent = 'deleting ' + id + '…';
  try {
    const r = await api.call('DeleteFleetSandbox', { sandboxId: id });
    $('sbx-note').textContent = 'deleted ' + id + ' (tenant ' + (r.tenant || '?') + ')';
  } catch (err) {
    $('sbx-note').textContent = '';
    api.showError('sbx-error', err);
  }
  state.confirming = '';
  await load();
  $('sbx-filter').focus();
}

// init wires the view's controls; deps are app.js's helpers.
export function init(deps) {
  api = deps;
  $('sbx-refresh').addEventListener('click', () => load());
  $('sbx-filter').addEventListener('input', () => renderRows());
  $('sbx-state').addEventListener('change', () => renderRows());
  for (const b of document.querySelectorAll('#sbx-table button.sort')) {
    b.addEventListener('click', () => {
      const key = b.dataset.sort;
      state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 };
      renderRows();
      b.focus();
    });
  }
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && state.confirming && !$('sandboxes').hidden) {
      const id = state.confirming;
      state.confirming = '';
      renderRows();
      focusRow(id, 'delete');
    }
  });
}
