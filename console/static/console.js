// sluice console: reads the /v1/ endpoints every two seconds and redraws
// the page in place; every value from the server goes in as text, never
// as markup. The credentials typed into the login form live in this
// tab's sessionStorage only and go out as the Authorization header.
'use strict';
(function () {
  const POLL_MS = 2000;
  const KEY_AUTH = 'sluice.console.authorization';
  const KEY_USER = 'sluice.console.user';
  const state = {
    auth: sessionStorage.getItem(KEY_AUTH) || '',
    user: sessionStorage.getItem(KEY_USER) || '',
    needsAuth: false,
    timer: 0,
    editing: null,
  };

  const $ = (id) => document.getElementById(id);

  // el builds an element: attrs are properties (class, dataset.*, on*),
  // children are nodes or strings (added as text).
  function el(tag, attrs, ...children) {
    const e = tag === 'svg' || attrs && attrs.svg ? document.createElementNS('http://www.w3.org/2000/svg', tag) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'svg' || v === undefined || v === null) continue;
      if (k === 'class') e.setAttribute('class', v);
      else if (k === 'data') for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (e instanceof SVGElement) e.setAttribute(k, v);
      else if (k in e) e[k] = v;
      else e.setAttribute(k, v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function svgEl(tag, attrs, ...children) {
    return el(tag, Object.assign({ svg: true }, attrs), ...children);
  }

  function replace(id, ...nodes) {
    $(id).replaceChildren(...nodes.flat());
  }

  // basic encodes user:password as UTF-8 base64.
  function basic(user, pass) {
    const bytes = new TextEncoder().encode(user + ':' + pass);
    let s = '';
    for (const b of bytes) s += String.fromCharCode(b);
    return 'Basic ' + btoa(s);
  }

  async function api(method, url, body, auth) {
    const headers = {};
    const a = auth === undefined ? state.auth : auth;
    if (a) headers.Authorization = a;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const resp = await fetch(url, {
      method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try { data = await resp.json(); } catch (e) { data = null; }
    return { status: resp.status, data };
  }

  function problem(r) {
    if (r.data && r.data.detail) return r.data.detail + (r.data.code ? ' (' + r.data.code + ')' : '');
    return 'HTTP ' + r.status;
  }

  // budgetURL keeps a path's slashes and escapes each segment.
  function budgetURL(path) {
    return '/v1/budgets/' + path.split('/').map(encodeURIComponent).join('/');
  }

  function fmtDuration(ms) {
    if (ms < 0) return '—';
    let s = Math.round(ms / 1000);
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d > 0) return d + 'd ' + h + 'h';
    if (h > 0) return h + 'h ' + m + 'm';
    if (m > 0) return m + 'm ' + s + 's';
    return s + 's';
  }

  function fmtTime(unixS) {
    const d = new Date(unixS * 1000);
    return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
  }

  function count(n) { return n < 0 ? '—' : String(n); }

  // ---- login ----

  function showLogin(message) {
    clearTimeout(state.timer);
    state.auth = '';
    sessionStorage.removeItem(KEY_AUTH);
    $('app').hidden = true;
    $('login').hidden = false;
    $('logout').hidden = true;
    $('who').textContent = '';
    $('status').textContent = 'logged out';
    $('login-error').textContent = message || '';
    $('login-pass').focus();
  }

  async function login(ev) {
    ev.preventDefault();
    const user = $('login-user').value.trim() || 'default';
    const pass = $('login-pass').value;
    $('login-pass').value = '';
    const auth = basic(user, pass);
    $('login-error').textContent = '';
    let r;
    try {
      r = await api('GET', '/v1/usage?n=1', undefined, auth);
    } catch (e) {
      $('login-error').textContent = 'cannot reach the server: ' + e.message;
      return;
    }
    if (r.status === 401) { $('login-error').textContent = 'invalid user or password'; return; }
    if (r.status !== 200) { $('login-error').textContent = problem(r); return; }
    // The admin role: a change with no target is refused with 400 when the
    // role allows changes, 403 when it does not; nothing is written.
    const probe = await api('POST', '/v1/quota/set', {}, auth);
    state.auth = auth;
    state.user = user;
    state.readOnly = probe.status === 403;
    sessionStorage.setItem(KEY_AUTH, auth);
    sessionStorage.setItem(KEY_USER, user);
    $('login').hidden = true;
    start();
  }

  function logout() {
    state.user = '';
    sessionStorage.removeItem(KEY_USER);
    showLogin('logged out');
  }

  // ---- polling ----

  function start() {
    $('app').hidden = false;
    $('login').hidden = true;
    $('logout').hidden = !state.needsAuth && !state.auth;
    $('who').textContent = state.auth ? 'user ' + state.user + (state.readOnly ? ' (read only)' : '') : '';
    refresh();
  }

  async function refresh() {
    clearTimeout(state.timer);
    let rs;
    try {
      rs = await Promise.all([
        api('GET', '/v1/usage?n=1000'),
        api('GET', '/v1/quotas?n=1000'),
        api('GET', '/v1/top?by=denied&n=10'),
        api('GET', '/v1/history'),
        api('GET', '/v1/cluster'),
      ]);
    } catch (e) {
      $('status').textContent = 'server unreachable, retrying';
      state.timer = setTimeout(refresh, POLL_MS);
      return;
    }
    if (rs.some((r) => r.status === 401)) {
      state.needsAuth = true;
      showLogin(state.auth ? 'the server no longer accepts these credentials' : '');
      return;
    }
    const [usage, quotas, top, history, cluster] = rs;
    $('app').hidden = false;
    const failed = rs.filter((r) => r.status !== 200 && r !== cluster);
    const notice = $('notice');
    notice.hidden = failed.length === 0;
    notice.textContent = failed.length ? problem(failed[0]) : '';
    if (usage.status === 200) { renderTree(usage.data.nodes, usage.data.next); renderReservations(usage.data.nodes); }
    if (quotas.status === 200) renderQuotas(quotas.data.counters, quotas.data.next);
    if (top.status === 200) renderTop(top.data);
    if (history.status === 200) renderChart(history.data);
    renderCluster(cluster);
    $('status').textContent = 'updated ' + new Date().toLocaleTimeString();
    state.timer = setTimeout(refresh, POLL_MS);
  }

  // ---- sections ----

  function bar(used, limit, cls) {
    const frac = limit > 0 ? Math.min(used / limit, 1) : 0;
    const fill = el('div', { class: 'fill' });
    fill.style.width = (frac * 100).toFixed(1) + '%';
    let c = 'bar';
    if (frac >= 1) c += ' full'; else if (frac >= 0.8) c += ' warn';
    return el('div', { class: c + (cls ? ' ' + cls : ''), title: used + ' of ' + limit }, fill);
  }

  function renderQuotas(counters, next) {
    if (!counters.length) { replace('quota-list', el('p', { class: 'muted' }, 'no quota counters yet')); return; }
    const rows = counters.map((c) => el('div', { class: 'quota', data: { level: c.level, kind: c.kind } },
      el('span', { class: 'name', title: c.level }, c.level),
      bar(c.used, c.limit),
      el('span', { class: 'figures' }, c.used + ' / ' + c.limit),
      el('div', { class: 'meta' },
        c.kind + ' quota · ' + c.period + ' · ' + c.remaining + ' left · resets ' + fmtTime(c.resets_at) +
          ' (in ' + fmtDuration(c.reset_after_ms) + ') ',
        el('button', { type: 'button', class: 'small set-used', onclick: () => editQuota(c) }, 'Set used…'))));
    if (next) rows.push(el('p', { class: 'muted' }, 'more counters after ' + next + ' (GET /v1/quotas?after=…)'));
    replace('quota-list', rows);
  }

  function renderTree(nodes, next) {
    if (!nodes.length) { replace('tree-body', el('p', { class: 'muted' }, 'no budget nodes: RL.BUDGET SET or PUT /v1/budgets/{path} adds some')); return; }
    const head = el('tr', null, ['Node', 'Limit', 'Left now', 'Admitted 1m', 'Refused 1m', 'In flight', 'Quota', '']
      .map((h, i) => el('th', { class: i >= 2 && i <= 5 ? 'num' : '' }, h)));
    const rows = nodes.map((n) => {
      const depth = n.path.split('/').length - 1;
      const name = el('td', { class: 'key', title: n.path }, depth ? n.path.slice(n.path.lastIndexOf('/') + 1) : n.path);
      name.style.paddingLeft = (8 + depth * 18) + 'px';
      const limit = n.rate ? n.rate + ' / ' + n.window + ', burst ' + n.burst : (n.note || 'unlimited');
      const q = n.quota ? el('td', null, bar(n.quota.used, n.quota.limit, 'mini'), n.quota.used + ' / ' + n.quota.limit) : el('td', { class: 'muted' }, '—');
      return el('tr', { data: { path: n.path } }, name,
        el('td', { class: 'limit' }, limit),
        el('td', { class: 'num left' }, n.remaining < 0 ? (n.note || '—') : String(n.remaining)),
        el('td', { class: 'num' }, count(n.admitted_1m)),
        el('td', { class: 'num' }, count(n.refused_1m)),
        el('td', { class: 'num' }, String(n.in_flight)),
        q,
        el('td', null, el('button', { type: 'button', class: 'small edit-node', onclick: () => editBudget(n.path) }, 'Edit…')));
    });
    const parts = [el('table', null, el('thead', null, head), el('tbody', null, rows))];
    if (next) parts.push(el('p', { class: 'muted' }, 'the first ' + nodes.length + ' nodes; more after ' + next));
    replace('tree-body', parts);
  }

  function renderReservations(nodes) {
    const busy = nodes.filter((n) => n.in_flight > 0);
    const total = busy.reduce((s, n) => s + n.in_flight, 0);
    if (!busy.length) { replace('reservations-body', el('p', { class: 'muted' }, 'none in flight on this node')); return; }
    replace('reservations-body',
      el('p', null, total + ' in flight on this node'),
      el('table', null, el('thead', null, el('tr', null, el('th', null, 'Node'), el('th', { class: 'num' }, 'In flight'))),
        el('tbody', null, busy.map((n) => el('tr', { data: { path: n.path } }, el('td', { class: 'key' }, n.path), el('td', { class: 'num' }, String(n.in_flight)))))));
  }

  function renderTop(t) {
    const info = el('p', { class: 'muted' }, 'refused over the last ' + Math.round(t.window_s / 60) + ' minutes, ' + t.total +
      ' in all, from ' + t.nodes + (t.nodes === 1 ? ' node' : ' nodes') +
      (t.unreachable.length ? '; not answering: ' + t.unreachable.join(', ') : ''));
    if (!t.keys.length) { replace('top-body', info, el('p', { class: 'muted' }, 'nothing refused')); return; }
    replace('top-body', info, el('table', null,
      el('thead', null, el('tr', null, el('th', null, 'Key'), el('th', { class: 'num' }, 'Refused'), el('th', { class: 'num' }, '± error'))),
      el('tbody', null, t.keys.map((k) => el('tr', { data: { key: k.key } },
        el('td', { class: 'key', title: k.key }, k.key), el('td', { class: 'num count' }, String(k.count)), el('td', { class: 'num' }, String(k.error)))))));
  }

  function renderChart(h) {
    const W = 560, H = 170, L = 40, B = 20, T = 8;
    const n = h.admitted.length;
    const max = Math.max(1, ...h.admitted.map((a, i) => a + h.refused[i]));
    const step = (W - L) / n;
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const svg = svgEl('svg', { viewBox: '0 0 ' + W + ' ' + H, width: '100%', role: 'img', 'aria-label': 'admitted and refused calls per ' + h.step_s + ' s' });
    svg.append(svgEl('line', { class: 'axis', x1: L, y1: H - B, x2: W, y2: H - B }));
    svg.append(svgEl('line', { class: 'axis', x1: L, y1: T, x2: W, y2: T }));
    svg.append(svgEl('text', { x: L - 4, y: T + 4, 'text-anchor': 'end' }, String(max)));
    svg.append(svgEl('text', { x: L - 4, y: H - B, 'text-anchor': 'end' }, '0'));
    svg.append(svgEl('text', { x: L, y: H - 4 }, '−' + Math.round(n * h.step_s / 60) + ' min'));
    svg.append(svgEl('text', { x: W, y: H - 4, 'text-anchor': 'end' }, 'now'));
    for (let i = 0; i < n; i++) {
      const a = h.admitted[i], r = h.refused[i];
      const x = L + i * step + 1, w = Math.max(step - 2, 1);
      if (a > 0) svg.append(svgEl('rect', { class: 'admitted', x, y: y(a), width: w, height: y(0) - y(a) }, svgEl('title', null, a + ' admitted')));
      if (r > 0) svg.append(svgEl('rect', { class: 'refused', x, y: y(a + r), width: w, height: y(a) - y(a + r) }, svgEl('title', null, r + ' refused')));
    }
    const sumA = h.admitted.reduce((s, v) => s + v, 0), sumR = h.refused.reduce((s, v) => s + v, 0);
    replace('chart', svg, el('div', { class: 'legend' },
      el('span', { class: 'sw admitted' }), 'admitted ', el('span', { id: 'sum-admitted' }, String(sumA)),
      el('span', { class: 'sw refused' }), 'refused ', el('span', { id: 'sum-refused' }, String(sumR))));
  }

  function renderCluster(r) {
    if (r.status !== 200) { replace('cluster-body', el('p', { class: 'muted' }, problem(r))); return; }
    const c = r.data;
    $('node').textContent = 'node ' + c.node_id + ' · ' + c.role;
    const lag = c.commit_index - c.applied_index;
    const facts = el('p', null, 'leader ', el('strong', null, c.leader_id || 'none'), ' (' + (c.leader_addr || '—') + ') · term ' + c.term +
      ' · commit ' + c.commit_index + ' · applied ' + c.applied_index + ' (' + lag + ' behind) · sync lag ' +
      (c.sync_lag_ms < 0 ? '—' : c.sync_lag_ms + ' ms'));
    replace('cluster-body', facts, el('table', null,
      el('thead', null, el('tr', null, ['Member', 'RESP', 'Suffrage', 'Role'].map((h) => el('th', null, h)))),
      el('tbody', null, c.members.map((m) => el('tr', { data: { member: m.id }, class: m.id === c.node_id ? 'self' : '' },
        el('td', { class: 'key', title: 'Raft ' + m.raft_addr + (m.id === c.node_id ? ' (this node)' : '') }, m.id),
        el('td', null, m.resp_addr), el('td', null, m.suffrage), el('td', { class: 'role-' + m.role }, m.role))))));
  }

  // ---- changes, each with a confirmation step ----

  function openDialog(title, fields, review) {
    state.editing = { review, apply: null };
    $('edit-title').textContent = title;
    replace('edit-fields', fields);
    $('edit-step').hidden = false;
    $('confirm-step').hidden = true;
    $('edit-error').textContent = '';
    $('edit').showModal();
  }

  function field(label, id, value, type) {
    return el('label', null, label, el('input', { type: type || 'text', id, value: value === undefined ? '' : String(value), spellcheck: false }));
  }

  function intField(id, name) {
    const v = $(id).value.trim();
    if (!/^\d+$/.test(v)) throw new Error(name + ' must be a whole number');
    return Number(v);
  }

  function onReview() {
    $('edit-error').textContent = '';
    let plan;
    try { plan = state.editing.review(); } catch (e) { $('edit-error').textContent = e.message; return; }
    state.editing.apply = plan.apply;
    replace('confirm-summary', plan.summary.map((s) => el('li', null, s)));
    $('edit-step').hidden = true;
    $('confirm-step').hidden = false;
    $('confirm-apply').focus();
  }

  async function onApply() {
    const btn = $('confirm-apply');
    btn.disabled = true;
    try {
      const r = await state.editing.apply();
      if (r.status !== 200) { $('edit-error').textContent = problem(r); return; }
      $('edit').close();
      const notice = $('notice');
      notice.hidden = !(r.data && r.data.warning);
      notice.textContent = r.data && r.data.warning ? r.data.warning : '';
      refresh();
    } catch (e) {
      $('edit-error').textContent = e.message;
    } finally {
      btn.disabled = false;
    }
  }

  async function editBudget(path) {
    const r = await api('GET', budgetURL(path));
    if (r.status !== 200) { $('notice').hidden = false; $('notice').textContent = problem(r); return; }
    const cfg = r.data.config;
    const s = cfg.sustained || {};
    const burst = cfg.burst && cfg.burst.capacity;
    openDialog('Budget node ' + path, [
      field('Rate', 'f-rate', s.rate, 'number'),
      field('Per (window)', 'f-window', s.window || 'second'),
      field('Burst', 'f-burst', burst, 'number'),
    ], () => {
      const rate = intField('f-rate', 'rate');
      const burstV = intField('f-burst', 'burst');
      const win = $('f-window').value.trim();
      if (!win) throw new Error('the window is required (second, minute, 5m, …)');
      const next = JSON.parse(JSON.stringify(cfg));
      next.sustained = Object.assign({}, next.sustained, { rate, window: win });
      next.burst = Object.assign({}, next.burst, { capacity: burstV });
      return {
        summary: [path + ': rate ' + (s.rate === undefined ? 'none' : s.rate + ' / ' + s.window) + ' → ' + rate + ' / ' + win,
          path + ': burst ' + (burst === undefined ? 'none' : burst) + ' → ' + burstV],
        apply: () => api('PUT', budgetURL(path), next),
      };
    });
  }

  function editQuota(c) {
    openDialog('Quota ' + c.level, [
      el('p', { class: 'muted' }, c.period + ', limit ' + c.limit + ', used ' + c.used + ' now'),
      field('Used', 'f-used', c.used, 'number'),
    ], () => {
      const used = intField('f-used', 'used');
      const body = { used };
      if (c.kind === 'inline') body.key = c.level;
      else {
        const i = c.level.indexOf('#');
        if (i < 0) body.path = c.level;
        else { body.path = c.level.slice(0, i); body.subject = c.level.slice(i + 1); }
      }
      return {
        summary: [c.level + ': used ' + c.used + ' → ' + used + ' of ' + c.limit],
        apply: () => api('POST', '/v1/quota/set', body),
      };
    });
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', login);
    $('logout').addEventListener('click', logout);
    $('edit-cancel').addEventListener('click', () => $('edit').close());
    $('edit-review').addEventListener('click', onReview);
    $('confirm-back').addEventListener('click', () => { $('confirm-step').hidden = true; $('edit-step').hidden = false; });
    $('confirm-apply').addEventListener('click', onApply);
    $('edit').addEventListener('close', () => { state.editing = null; });
    start();
  });
})();
