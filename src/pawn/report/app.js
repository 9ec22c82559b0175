(function () {
'use strict';
const D = JSON.parse(document.getElementById('pawn-data').textContent);
const byId = Object.fromEntries(D.runs.map(r => [r.id, r]));
const drawn = {};
const selected = new Set(D.compare_default || []);
let currentRun = D.runs.length ? D.runs[0].id : null;
const CFG = {responsive: true, displaylogo: false};

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}
function fmt(v, kind) {
  if (v === null || v === undefined || (typeof v === 'number' && !isFinite(v))) return '—';
  if (typeof v !== 'number') return String(v);
  switch (kind) {
    case 'pct': return (100 * v).toFixed(2) + '%';
    case 'int': return Math.round(v).toLocaleString('en-US');
    case 'loss': return v.toFixed(4);
    case 'ratio': return v.toFixed(3);
    case 'rate': return v >= 100 ? Math.round(v).toLocaleString('en-US') : v.toPrecision(3);
    case 'dur': return dur(v);
    default: if (Number.isInteger(v)) return String(v);
      return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : String(+v.toPrecision(6));
  }
}
function dur(s) {
  if (s === null || s === undefined) return '—';
  s = Math.round(s); const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), x = s % 60;
  return h ? `${h}h ${m}m` : m ? `${m}m ${x}s` : `${x}s`;
}
function stateBadge(s) {
  return el('span', {class: 'state ' + s.state, title: s.reason || ''}, s.state + (s.reason && s.state !== 'running' ? ' · ' + s.reason : ''));
}
function plot(container, fig) {
  const div = el('div', {class: 'plot', 'data-fig': fig.id || ''});
  container.append(div);
  Plotly.newPlot(div, fig.data, fig.layout, CFG);
  return div;
}
function table(cols, rows, opts) {
  opts = opts || {};
  const t = el('table', {}); const thead = el('thead'); const tr = el('tr');
  let sortKey = null, asc = true;
  const tbody = el('tbody');
  function fill() {
    tbody.innerHTML = '';
    let rs = rows.slice();
    if (sortKey !== null) {
      const c = cols.find(c => c.key === sortKey);
      const val = r => (c.sort ? c.sort(r) : r[c.key]);
      rs.sort((a, b) => {
        const x = val(a), y = val(b);
        if (x === y) return 0; if (x === null || x === undefined) return 1; if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * (asc ? 1 : -1);
      });
    }
    for (const r of rs) {
      const row = el('tr');
      for (const c of cols) {
        const v = c.cell ? c.cell(r) : fmt(r[c.key], c.fmt);
        row.append(el('td', {class: c.num ? 'num' : ''}, v));
      }
      tbody.append(row);
    }
  }
  for (const c of cols) {
    const th = el('th', {class: (c.num ? 'num ' : '') + (opts.sortable && c.key ? 'sortable' : ''), title: c.title || ''}, c.label);
    if (opts.sortable && c.key) th.addEventListener('click', () => {
      asc = sortKey === c.key ? !asc : true; sortKey = c.key; fill();
      thead.querySelectorAll('th').forEach(h => h.textContent = h.textContent.replace(/ [▲▼]$/, ''));
      th.textContent = c.label + (asc ? ' ▲' : ' ▼');
    });
    tr.append(th);
  }
  thead.append(tr); t.append(thead, tbody); fill();
  return el('div', {class: 'tablewrap'}, t);
}
function kv(obj) {
  return table([{label: 'field', key: 'k', cell: r => r.k}, {label: 'value', key: 'v', cell: r => fmt(r.v)}],
               Object.entries(obj).map(([k, v]) => ({k, v: (typeof v === 'object' && v !== null) ? JSON.stringify(v) : v})), {sortable: true});
}

// ------------------------------------------------------------------ Runs
function renderRuns() {
  const page = document.getElementById('page-runs'); page.innerHTML = '';
  if (!D.runs.length) { page.append(el('div', {class: 'empty'}, 'No runs found.')); return; }
  const S = r => r.summary;
  const cols = [
    {label: '⊕', title: 'Compare', cell: r => { const cb = el('input', {type: 'checkbox', class: 'cmp', 'data-id': r.id, checked: selected.has(r.id)});
      cb.addEventListener('change', () => { cb.checked ? selected.add(r.id) : selected.delete(r.id); drawn.compare = false; }); return cb; }},
    {label: 'run', key: 'name', sort: r => r.label, cell: r => el('a', {onclick: () => openRun(r.id), title: S(r).path}, r.label)},
    {label: 'kind', key: 'kind', sort: r => S(r).kind, cell: r => S(r).kind},
    {label: 'model / strategy', key: 'model', sort: r => S(r).model, cell: r => S(r).model || '—'},
    {label: 'status', key: 'state', sort: r => S(r).state, cell: r => stateBadge(S(r))},
    {label: 'step / total', key: 'step', num: true, sort: r => S(r).step, cell: r => `${fmt(S(r).step, 'int')} / ${fmt(S(r).total_steps, 'int')}`},
    {label: 'optimizer steps', key: 'optimizer_steps', num: true, title: 'all the optimizer steps the run spent (a RoSA warm-up included; its mask-scoring batches in the tooltip)',
     sort: r => (S(r).compute || {}).optimizer_steps, cell: r => { const c = S(r).compute || {};
       return el('span', {title: c.gradient_batches !== undefined ? `${c.gradient_batches} gradient batches; ${c.movable_params} of ${c.trainable_params} trainable parameters movable` : ''}, fmt(c.optimizer_steps, 'int')); }},
    {label: 'best val loss', key: 'best_val_loss', num: true, sort: r => S(r).best_val_loss, cell: r => fmt(S(r).best_val_loss, 'loss')},
    {label: 'top-1', key: 'top1', num: true, sort: r => S(r).top1, cell: r => fmt(S(r).top1, 'pct')},
    {label: 'top-1/ceiling', key: 'top1_over_ceiling', num: true, sort: r => S(r).top1_over_ceiling, cell: r => fmt(S(r).top1_over_ceiling, 'ratio')},
    {label: 'legal rate', key: 'legal_rate', num: true, sort: r => S(r).legal_rate, cell: r => fmt(S(r).legal_rate, 'pct')},
    {label: 'completion', key: 'completion_rate', num: true, sort: r => S(r).completion_rate, cell: r => fmt(S(r).completion_rate, 'pct')},
    {label: 'tok/s', key: 'tokens_per_s', num: true, sort: r => S(r).tokens_per_s, cell: r => fmt(S(r).tokens_per_s, 'rate')},
    {label: 'data wait', key: 'data_wait_frac', num: true, sort: r => S(r).data_wait_frac, cell: r => fmt(S(r).data_wait_frac, 'pct')},
    {label: 'wall', key: 'wall_s', num: true, sort: r => S(r).wall_s, cell: r => dur(S(r).wall_s)},
    {label: 'start', key: 'start', sort: r => S(r).start, cell: r => el('span', {title: S(r).start || ''}, (S(r).start || '—').replace('T', ' ').slice(5, 16))},
  ];
  page.append(el('h2', {}, `Runs (${D.runs.length})`),
              el('p', {class: 'muted'}, 'Click a header to sort, a run to open it; ticked runs are overlaid on the Compare page.'),
              table(cols, D.runs, {sortable: true}));
  const pn = positionsNote(D.runs); if (pn) page.append(pn);
}

// loss and top-1 of runs that count different positions are not comparable: say so (pawn.runs.POSITIONS)
function positionsNote(runs) {
  const groups = {};
  runs.forEach(r => { const k = r.summary.positions; if (k) (groups[k] = groups[k] || {label: r.summary.positions_label, runs: []}).runs.push(r.label); });
  const keys = Object.keys(groups);
  if (keys.length < 2) return null;
  return el('div', {class: 'note', id: 'positions-note'}, 'Loss and top-1 of these runs count different positions, so they are not comparable across groups: ',
    ...keys.map(k => el('div', {}, `${groups[k].label}: ${groups[k].runs.join(', ')}`)));
}

// ------------------------------------------------------------------ Run
function openRun(id) { currentRun = id; drawn.run = false; show('run'); }
function renderRun() {
  const page = document.getElementById('page-run'); page.innerHTML = '';
  if (!currentRun) { page.append(el('div', {class: 'empty'}, 'No runs found.')); return; }
  const r = byId[currentRun], s = r.summary;
  const sel = el('select', {id: 'run-select', onchange: e => { currentRun = e.target.value; renderRun(); }},
                 D.runs.map(x => el('option', {value: x.id, selected: x.id === currentRun}, x.label)));
  page.append(el('div', {class: 'controls'}, el('label', {}, 'run '), sel, stateBadge(s), el('span', {class: 'muted'}, s.path)));
  const k = (label, v) => el('div', {class: 'kpi'}, el('div', {class: 'v'}, v), el('div', {class: 'k'}, label));
  page.append(el('div', {class: 'kpis'},
    k('step / total', `${fmt(s.step, 'int')} / ${fmt(s.total_steps, 'int')}`),
    k('ETA', s.state === 'running' ? dur(s.eta_s) : '—'),
    k('best val loss', fmt(s.best_val_loss, 'loss')),
    k('top-1 / ceiling' + (s.top1_over_ceiling_from === 'eval' ? ' (pawn eval)' : ''), fmt(s.top1_over_ceiling, 'ratio')),
    k('completion', fmt(s.completion_rate, 'pct')),
    k('tokens/s', fmt(s.tokens_per_s, 'rate')),
    k('trainable params', fmt(s.trainable_params, 'int')),
    k('wall time', dur(s.wall_s))));
  const plots = el('div', {class: 'plots', id: 'run-plots'}); page.append(plots);
  if (!r.figures.length) plots.append(el('div', {class: 'empty'}, 'No training records yet.'));
  for (const f of r.figures) plot(plots, f);
  page.append(el('h2', {}, 'Checkpoints'));
  page.append(r.checkpoints.length ? table([
    {label: 'step', key: 'step', num: true, cell: c => fmt(c.step, 'int')},
    {label: 'manifest verified', key: 'verified', cell: c => c.verified === null || c.verified === undefined ? 'not checked (live)' : (c.verified ? '✓ yes' : '✗ NO')},
    {label: 'best', key: 'best', cell: c => c.best ? '★ best' : ''},
    {label: 'pushed to the Hub', key: 'pushed', cell: c => c.pushed === null || c.pushed === undefined ? 'never' : (c.pushed ? 'yes' : 'failed')},
    {label: 'path', key: 'path', cell: c => c.path}], r.checkpoints, {sortable: true}) : el('p', {class: 'muted'}, 'No checkpoints.'));
  if (r.evals.length) { page.append(el('h2', {}, 'Evaluations of this run')); for (const e of r.evals) page.append(evalCard(e)); }
  const det = el('details', {class: 'card'}, el('summary', {}, `Config (${Object.keys(r.config).length} fields)`), kv(r.config));
  page.append(el('h2', {}, 'Config'), det);
}

// ------------------------------------------------------------------ Compare
function pawnEma(ys, w) {
  // TensorBoard's debiased EMA: last = last*w + (1-w)*y; shown = last / (1 - w^n)
  if (!(w > 0)) return ys.slice();
  let last = 0, n = 0;
  return ys.map(y => {
    if (y === null || y === undefined || !isFinite(y)) return y;
    last = last * w + (1 - w) * y; n += 1;
    return w >= 1 ? y : last / (1 - Math.pow(w, n));
  });
}
window.pawnEma = pawnEma;
function renderCompare() {
  const page = document.getElementById('page-compare'); page.innerHTML = '';
  const keys = [...new Set(D.runs.flatMap(r => Object.keys(r.series)))].sort((a, b) =>
    (a.startsWith('val/') ? 0 : 1) - (b.startsWith('val/') ? 0 : 1) || a.localeCompare(b));
  const st = renderCompare.state = renderCompare.state || {metric: keys.includes('val/loss') ? 'val/loss' : keys[0], x: 'step', logx: false, logy: false, smooth: 0};
  if (!keys.includes(st.metric)) st.metric = keys[0];
  const redraw = () => renderCompare();
  const metric = el('select', {id: 'cmp-metric', onchange: e => { st.metric = e.target.value; redraw(); }},
                    keys.map(k => el('option', {value: k, selected: k === st.metric}, (D.labels[k.split('/')[1]] || k) + ' — ' + k.split('/')[0])));
  const xs = el('select', {id: 'cmp-x', onchange: e => { st.x = e.target.value; redraw(); }},
                [['step', 'step'], ['tokens', 'tokens'], ['elapsed', 'wall time (s)']].map(([v, l]) => el('option', {value: v, selected: v === st.x}, l)));
  const lx = el('input', {type: 'checkbox', id: 'cmp-logx', checked: st.logx, onchange: e => { st.logx = e.target.checked; redraw(); }});
  const ly = el('input', {type: 'checkbox', id: 'cmp-logy', checked: st.logy, onchange: e => { st.logy = e.target.checked; redraw(); }});
  const sm = el('input', {type: 'range', id: 'cmp-smooth', min: 0, max: 0.99, step: 0.01, value: st.smooth,
                           onchange: e => { st.smooth = +e.target.value; redraw(); }});
  page.append(el('div', {class: 'controls'}, el('label', {}, 'metric '), metric, el('label', {}, 'x '), xs,
    el('label', {}, lx, ' log x'), el('label', {}, ly, ' log y'), el('label', {}, 'smoothing '), sm, el('span', {}, st.smooth.toFixed(2))));
  const runs = D.runs.filter(r => selected.has(r.id));
  if (!runs.length) { page.append(el('div', {class: 'empty'}, 'Tick runs in the Runs table to compare them.')); return; }
  const pn = positionsNote(runs); if (pn) page.append(pn);
  const traces = [];
  const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  runs.forEach((r, i) => {
    const s = r.series[st.metric]; if (!s) return;
    const color = palette[i % palette.length];
    const x = s[st.x] || s.step;
    if (st.smooth > 0) traces.push({type: 'scatter', mode: 'lines', x, y: s.y, name: r.label + ' (raw)', showlegend: false,
                                    line: {color, width: 1}, opacity: 0.25, hoverinfo: 'skip', meta: {run: r.id, raw: true}});
    traces.push({type: 'scatter', mode: s.y.length < 30 ? 'lines+markers' : 'lines', x, y: pawnEma(s.y, st.smooth), name: r.label,
                 line: {color}, meta: {run: r.id}});
  });
  const label = D.labels[st.metric.split('/')[1]] || st.metric;
  const div = el('div', {class: 'plot', id: 'cmp-plot'}); page.append(div);
  Plotly.newPlot(div, traces, {title: {text: `${label} (${st.metric.split('/')[0]})`, x: 0.02}, height: 460,
    xaxis: {title: {text: {step: 'step', tokens: 'tokens', elapsed: 'wall time (s)'}[st.x]}, type: st.logx ? 'log' : 'linear'},
    yaxis: {title: {text: label}, type: st.logy ? 'log' : 'linear'}, margin: {l: 60, r: 20, t: 40, b: 45},
    legend: {orientation: 'h', y: -0.18}, hovermode: 'x unified'}, CFG);
  // only the config fields that differ between the selected runs
  const fields = [...new Set(runs.flatMap(r => Object.keys(r.config)))].sort();
  const diff = fields.filter(f => new Set(runs.map(r => JSON.stringify(r.config[f] === undefined ? null : r.config[f]))).size > 1);
  page.append(el('h2', {}, `Config fields that differ (${diff.length} of ${fields.length})`));
  page.append(diff.length ? table([{label: 'field', key: 'f', cell: x => x.f},
    ...runs.map(r => ({label: r.label, cell: x => fmt(r.config[x.f] === undefined ? null : (typeof r.config[x.f] === 'object' && r.config[x.f] !== null ? JSON.stringify(r.config[x.f]) : r.config[x.f]))}))],
    diff.map(f => ({f})), {}) : el('p', {class: 'muted'}, 'The selected runs have the same config.'));
}

// ------------------------------------------------------------------ Sweep
function renderSweep() {
  const page = document.getElementById('page-sweep'); page.innerHTML = '';
  if (!D.studies.length) { page.append(el('div', {class: 'empty'}, 'No study found (a pawn sweep writes study.db in its --out).')); return; }
  for (const s of D.studies) {
    const card = el('div', {class: 'card sweep-study'}); page.append(card);
    card.append(el('h2', {}, `Study ${s.name || '?'}`), el('div', {class: 'muted'}, s.storage));
    if (s.error) { card.append(el('p', {}, 'Cannot read: ' + s.error)); continue; }
    if (s.objective_note) card.append(el('div', {class: 'note', id: 'objective-note'}, s.objective_note));
    const n = st => s.trials.filter(t => t.state === st).length;
    card.append(el('p', {}, `${s.trials.length} trials — ${n('COMPLETE')} complete, ${n('PRUNED')} pruned, ${n('FAIL')} failed, ${n('RUNNING')} running` +
                    (s.best !== null && s.best !== undefined ? ` — best: trial ${s.best}` : '')));
    const plots = el('div', {class: 'plots'}); card.append(plots);
    for (const f of s.figures) plot(plots, f);
    const pnames = [...new Set(s.trials.flatMap(t => Object.keys(t.params)))].sort();
    const front = new Set(s.pareto);
    card.append(el('h3', {}, 'Trials'), table([
      {label: '#', key: 'number', num: true, cell: t => String(t.number)},
      {label: 'state', key: 'state', cell: t => t.state + (t.number === s.best ? ' ★' : '') + (front.has(t.number) ? ' ◆' : '')},
      {label: 'best val loss', key: 'value', num: true, cell: t => fmt(t.value, 'loss')},
      {label: 'trainable params', key: 'trainable_params', num: true, cell: t => fmt(t.trainable_params, 'int')},
      {label: 'steps', key: 'steps', num: true, cell: t => fmt(t.steps, 'int')},
      ...pnames.map(p => ({label: p, key: 'p:' + p, num: true, sort: t => t.params[p], cell: t => fmt(t.params[p])})),
      {label: 'reason', key: 'reason', cell: t => t.reason || ''},
      {label: 'run', key: 'run_dir', cell: t => t.run_id ? el('a', {class: 'trial-run', onclick: () => openRun(t.run_id)}, byId[t.run_id].label)
                                               : (t.run_dir || '—')}], s.trials.map(t => Object.assign({}, t)), {sortable: true}));
  }
}

// ------------------------------------------------------------------ Games
function renderGames() {
  const page = document.getElementById('page-games'); page.innerHTML = '';
  if (!D.games.length) { page.append(el('div', {class: 'empty'}, 'No games (give pawn report a PGN file, e.g. from pawn play --pgn-out).')); return; }
  const st = renderGames.state = renderGames.state || {result: '', opponent: '', temperature: '', game: 0, ply: 0};
  const opts = key => ['', ...new Set(D.games.map(g => g[key]))].map(v => el('option', {value: v, selected: v === st[key]}, v === '' ? 'all' : v));
  const filt = key => el('select', {id: 'games-' + key, onchange: e => { st[key] = e.target.value; st.game = -1; renderGames(); }}, opts(key));
  page.append(el('div', {class: 'controls'}, el('label', {}, 'result '), filt('result'), el('label', {}, 'opponent '), filt('opponent'),
                 el('label', {}, 'temperature '), filt('temperature')));
  const shown = D.games.map((g, i) => [g, i]).filter(([g]) => ['result', 'opponent', 'temperature'].every(k => !st[k] || g[k] === st[k]));
  if (!shown.length) { page.append(el('div', {class: 'empty'}, 'No game matches.')); return; }
  if (!shown.some(([, i]) => i === st.game)) { st.game = shown[0][1]; st.ply = 0; }
  const g = D.games[st.game];
  const list = el('div', {class: 'gamelist card'}, shown.map(([x, i]) => el('div', {class: i === st.game ? 'sel' : '',
    onclick: () => { st.game = i; st.ply = 0; renderGames(); }}, `${x.white} – ${x.black}  ${x.result}`, el('div', {class: 'muted'}, `${x.sans.length} plies ${x.termination}`))));
  const board = el('div', {class: 'board', id: 'board'});
  const moves = el('div', {class: 'moves card'});
  const info = el('div', {class: 'muted', id: 'ply-info'});
  const P = g.predictions;
  const panel = el('div', {class: 'card topmoves', id: 'top-moves'});
  function topPanel(p) {
    panel.innerHTML = '';
    if (!P) { panel.append(el('h3', {}, 'Model top moves'), el('p', {class: 'muted'}, g.predictions_note ||
      'No model predictions: pawn report … --checkpoint CKPT adds them.')); return; }
    panel.append(el('h3', {}, `${P.model}: top ${P.k} next moves`),
                 el('div', {class: 'muted'}, `teacher-forced, legal moves only (softmax over the legal set), context ${P.seq_len} tokens`));
    const x = P.plies[p];
    if (!x) {
      panel.append(el('div', {class: 'note'}, p < P.first_ply ? 'The first move is never predicted in the pure-moves layout (position 0 holds it).'
        : `Beyond the model's context (${P.last_ply} plies): no prediction.`));
      return;
    }
    const rows = x.top.map((t, i) => ({rank: i + 1, san: t[0], uci: t[1], p: t[2]}));
    const played = x.played ? x.played[0] : null;
    const tb = el('table', {id: 'top-table'}, el('thead', {}, el('tr', {}, el('th', {}, '#'), el('th', {}, 'move'), el('th', {class: 'num'}, 'p'), el('th', {}, ''))),
      el('tbody', {}, rows.map(r => el('tr', {class: r.san === played ? 'played' : '', title: r.uci},
        el('td', {}, String(r.rank)), el('td', {}, r.san), el('td', {class: 'num'}, fmt(r.p, 'pct')),
        el('td', {}, el('span', {class: 'bar', style: `width:${Math.max(2, Math.round(150 * r.p))}px`}))))));
    panel.append(tb);
    const top_sum = rows.reduce((a, r) => a + r.p, 0);
    panel.append(el('div', {class: 'muted'}, `top ${rows.length} hold ${fmt(top_sum, 'pct')} of the legal-move mass`));
    if (x.played) panel.append(el('p', {}, el('b', {}, 'played: '), `${x.played[0]} — p ${fmt(x.played[1], 'pct')}, rank ${x.played[2]}`));
    else panel.append(el('p', {}, el('b', {}, 'game over? '), `P(end of game) ${fmt(rows.filter(r => r.uci === 'PAD').map(r => r.p)[0] || 0, 'pct')} among the legal options; ` +
                         `the game ended: ${g.result} ${g.termination}`));
    if (!x.argmax_legal) panel.append(el('div', {class: 'warn', id: 'illegal-note'},
      `⚠ unmasked, the model's most likely token here is ${x.argmax === 'PAD' ? 'PAD (end of game)' : x.argmax}, which is not legal` + (x.played ? '' : ' at the end of the game') +
      `; ${fmt(x.p_illegal, 'pct')} of its probability is on illegal tokens` + (p === P.first_illegal_ply ? '. This is where the game forfeits teacher-forced (its first illegal argmax).' : '.')));
    else panel.append(el('div', {class: 'muted'}, `unmasked argmax ${x.argmax} is legal; illegal mass ${fmt(x.p_illegal, 'pct')}`));
    if (p === g.sans.length && /forfeit/i.test(g.termination)) panel.append(el('div', {class: 'warn'}, 'The game ended by forfeit: the next move played was illegal (PGN Termination).'));
  }
  function go(p) {
    st.ply = Math.max(0, Math.min(g.sans.length, p));
    if (g.boards) board.innerHTML = g.boards[st.ply];
    moves.querySelectorAll('span').forEach(s => s.classList.toggle('cur', +s.dataset.ply === st.ply));
    info.textContent = `ply ${st.ply} / ${g.sans.length}` + (st.ply === g.sans.length ? ` — ${g.result} ${g.termination}` : '');
    topPanel(st.ply);
  }
  g.sans.forEach((san, i) => {
    if (i % 2 === 0) moves.append(el('b', {}, ` ${i / 2 + 1}.`));
    const x = P ? P.plies[i] : null;
    const cls = x && !x.argmax_legal ? (i === P.first_illegal_ply ? 'ill forfeit' : 'ill') : '';
    const tip = x && x.played ? `model: p ${fmt(x.played[1], 'pct')}, rank ${x.played[2]}` + (x.argmax_legal ? '' : `; its argmax ${x.argmax} was illegal`) : '';
    moves.append(el('span', {'data-ply': i + 1, class: cls, title: tip, onclick: () => go(i + 1)}, san), ' ');
  });
  if (P && P.first_illegal_ply !== null && P.first_illegal_ply !== undefined)
    moves.append(el('div', {class: 'muted'}, `underlined: before that move the model's unmasked argmax was illegal; ` +
      `first at ply ${P.first_illegal_ply}, before ${Math.floor(P.first_illegal_ply / 2) + 1}${P.first_illegal_ply % 2 ? '…' : '.'} ${g.sans[P.first_illegal_ply]} (shaded)`));
  if (g.truncated) moves.append(el('div', {class: 'muted'}, '(cut: longer games are not drawn to the end)'));
  const btn = (t, f) => el('button', {onclick: f}, t);
  const hdr = Object.entries(g.headers).map(([k, v]) => el('div', {}, el('b', {}, k + ': '), v));
  page.append(el('div', {class: 'games with-top'}, list,
    el('div', {}, board, el('div', {class: 'btns'}, btn('«', () => go(0)), btn('◀', () => go(st.ply - 1)), btn('▶', () => go(st.ply + 1)),
       btn('»', () => go(g.sans.length))), info),
    panel,
    el('div', {}, el('div', {class: 'card'}, hdr), moves)));
  document.onkeydown = e => { if (!document.getElementById('page-games').classList.contains('active')) return;
    if (e.key === 'ArrowRight') go(st.ply + 1); if (e.key === 'ArrowLeft') go(st.ply - 1); };
  if (g.boards) { go(st.ply); return; }
  go(st.ply);  // the moves and the panel now, the board once this game's packed boards are unpacked
  const gi = st.game;
  board.textContent = 'drawing the boards…';
  unpackBoards(g.boards_gz).then(b => { g.boards = b; if (st.game === gi && board.isConnected) go(st.ply); })
    .catch(err => { board.textContent = `cannot unpack this game's boards: ${err}`; });
}

// The boards of a game, packed by pawn.report.games.pack_boards (gzip + base64 of their JSON list).
async function unpackBoards(b64) {
  const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  return JSON.parse(await new Response(stream).text());
}

// ------------------------------------------------------------------ Eval / bench
function suiteCard(e) {
  const S = e.suite;
  const card = el('div', {class: 'card eval-report suite-report'});
  card.append(el('h2', {}, `Suite: ${S.checkpoint || ''}`), el('div', {class: 'muted'}, e.path));
  const figs = [];
  for (const m of S.models) {
    const w = m.wall_s || {};
    const sec = el('div', {class: 'suite-model', 'data-model': m.name});
    card.append(sec);
    sec.append(el('h3', {}, `${m.name}`), el('div', {class: 'muted'}, `wall time: eval ${dur(w.eval)}, probes ${dur(w.probes)}, diagnostics ${dur(w.diagnostics)}`));
    const acc = el('div', {}, el('h3', {}, 'Accuracy'), el('div', {class: 'muted'}, m.caption), table([
      {label: 'Metric', cell: r => r.label},
      {label: 'Published (v1)', num: true, cell: r => fmt(r.published, r.fmt)},
      {label: 'Moves-only', num: true, cell: r => r.moves_only === null || r.moves_only === undefined ? '' : fmt(r.moves_only, r.fmt)}], m.accuracy, {}));
    acc.querySelector('table').classList.add('suite-accuracy');
    const L = m.probes.layers;
    const pt = table([
      {label: 'Probe', key: 'label', cell: r => el('span', {title: r.probe}, r.label)},
      {label: 'best layer', key: 'best_layer', cell: r => r.best_layer || '—'},
      {label: 'best', key: 'best', num: true, cell: r => r.regression ? `R² ${fmt(r.best, 'ratio')} (MAE ${r.mae === null ? '—' : r.mae.toFixed(1)})` : fmt(r.best, 'pct')},
      ...L.map((l, j) => ({label: l.replace('layer_', 'L'), num: true, cell: r => {
        const v = r.by_layer[j]; const td = r.regression ? fmt(v, 'ratio') : (v === null ? '—' : (100 * v).toFixed(1));
        return l === r.best_layer ? el('b', {}, td) : td; }}))], m.probes.rows, {sortable: true});
    pt.querySelector('table').classList.add('suite-probes');
    const pr = el('div', {}, el('h3', {}, 'Linear probes'), el('div', {class: 'muted'}, m.probe_caption + ' · per layer: best accuracy % (R² for regression)'), pt);
    sec.append(el('div', {class: 'suite-grid'}, acc, pr));
    const plots = el('div', {class: 'plots suite-plots'}); sec.append(plots);
    for (const f of m.probe_figures) figs.push([plots, f]);
    const D2 = m.diagnostics;
    const diag = el('div', {class: 'suite-diag'}, el('h3', {}, 'Outcome diagnostics'));
    const skipped = D2.tests.filter(t => t.skipped);
    if (skipped.length === D2.tests.length && skipped.length) diag.append(el('div', {class: 'note'}, `The five outcome-conditioned tests were skipped: ${skipped[0].skipped}.`));
    else if (D2.tests.length) diag.append(table([{label: 'test', cell: t => t.test}, {label: 'generation runs', num: true, cell: t => t.skipped ? 'skipped' : String(t.runs)},
      {label: 'mean outcome match', num: true, cell: t => t.skipped ? (t.skipped) : fmt(t.mean_match, 'pct')}], D2.tests, {}));
    if (D2.signal.length) diag.append(el('h3', {}, 'Outcome signal: match rate of the conditioned outcome'), table([{label: 'outcome', cell: r => r.outcome},
      {label: 'unmasked', num: true, cell: r => fmt(r.unmasked, 'pct')}, {label: 'masked', num: true, cell: r => fmt(r.masked, 'pct')},
      {label: 'forfeit rate (unmasked)', num: true, cell: r => fmt(r.forfeit_unmasked, 'pct')}], D2.signal, {}));
    const et = table([{label: 'Edge case', cell: r => r.label}, {label: 'positions', num: true, cell: r => fmt(r.n_positions, 'int')},
      {label: 'legal rate / P(PAD)', num: true, cell: r => fmt(r.value, 'pct')}, {label: 'entropy (nats)', num: true, cell: r => r.entropy === null ? '—' : r.entropy.toFixed(2)}], D2.edge, {});
    et.querySelector('table').classList.add('suite-edge');
    diag.append(el('div', {class: 'muted'}, 'Legal fraction of moves sampled from the model in each kind of position; at checkmate and stalemate, P(PAD) (game over).'), et);
    sec.append(diag);
  }
  card.append(el('details', {}, el('summary', {}, 'settings'), kv(flat(S.settings))));
  setTimeout(() => figs.forEach(([c, f]) => plot(c, f)), 0);
  return card;
}
function evalCard(e) {
  if (e.suite) return suiteCard(e);
  const card = el('div', {class: 'card eval-report'});
  const r = e.report;
  card.append(el('h3', {}, e.path));
  for (const b of e.legal_masked || []) {
    card.append(el('h3', {}, `${b.name}: legal-masked (every move decision), against a player uniform over the legal moves`),
      el('div', {class: 'muted'}, 'Excess = loss − E[ln N_legal] on the same positions (nats; ≤ 0 beats a player that knows only the rules), 95% interval over games.'),
      table([{label: 'games', key: 'games', cell: x => x.games}, {label: 'player', key: 'player', cell: x => x.player},
        {label: 'games (n)', key: 'n_games', num: true, cell: x => fmt(x.n_games, 'int')},
        {label: 'move decisions', key: 'n_positions', num: true, cell: x => fmt(x.n_positions, 'int')},
        {label: 'loss (nats)', key: 'loss', num: true, cell: x => fmt(x.loss, 'loss')},
        {label: 'excess over uniform (nats), 95% interval', key: 'excess', num: true, cell: x => fmt(x.excess)},
        {label: 'top-1', key: 'top1', num: true, cell: x => fmt(x.top1, 'pct')}], b.rows, {}));
  }
  if (r.models) {
    const rows = r.models.map(m => Object.assign({name: m.name}, flat(m.random_games || {})));
    const keys = [...new Set(rows.flatMap(x => Object.keys(x)))].filter(k => k !== 'name');
    const groups = [...new Set(keys.map(k => k.split('/')[0]))];
    for (const g of groups) {
      const ks = keys.filter(k => k.split('/')[0] === g);
      card.append(el('h3', {}, g), table([{label: 'model', key: 'name', cell: x => x.name},
        ...ks.map(k => ({label: k.split('/').slice(1).join('/') || k, key: k, num: true, cell: x => fmt(x[k], /rate|top|completion|pct/.test(k) ? 'pct' : null)}))], rows, {sortable: true}));
    }
    for (const m of r.models) for (const [k, v] of Object.entries(m)) if (!['name', 'random_games', 'model_config'].includes(k) && v && typeof v === 'object')
      card.append(el('h3', {}, `${m.name}: ${k}`), kv(flat(v)));
    if (r.settings) card.append(el('h3', {}, 'settings'), kv(flat(r.settings)));
  } else {
    for (const [k, v] of Object.entries(r)) card.append(el('h3', {}, k), v && typeof v === 'object' ? kv(flat(v)) : el('p', {}, fmt(v)));
  }
  return card;
}
function flat(o, p) {
  const out = {};
  for (const [k, v] of Object.entries(o || {})) {
    const key = p ? p + '.' + k : k;
    if (v && typeof v === 'object' && !Array.isArray(v)) Object.assign(out, flat(v, key)); else out[key] = v;
  }
  return out;
}
function renderEvals() {
  const page = document.getElementById('page-evals'); page.innerHTML = '';
  const all = [...D.evals, ...D.runs.flatMap(r => r.evals)];
  if (!all.length) { page.append(el('div', {class: 'empty'}, 'No eval or bench report (pawn eval --json, pawn bench --json).')); return; }
  for (const e of all) page.append(evalCard(e));
}

// ------------------------------------------------------------------ pages
const RENDER = {runs: renderRuns, run: renderRun, compare: renderCompare, sweep: renderSweep, games: renderGames, evals: renderEvals};
function show(name) {
  document.querySelectorAll('nav button').forEach(b => b.classList.toggle('active', b.dataset.page === name));
  document.querySelectorAll('.page').forEach(p => p.classList.toggle('active', p.id === 'page-' + name));
  if (!drawn[name]) { RENDER[name](); drawn[name] = true; }
  else document.querySelectorAll('#page-' + name + ' .js-plotly-plot').forEach(p => Plotly.Plots.resize(p));
  if (location.hash.slice(1) !== name) history.replaceState(null, '', '#' + name);
}
window.pawnShow = show;
document.querySelectorAll('nav button').forEach(b => b.addEventListener('click', () => { if (b.dataset.page === 'compare') drawn.compare = false; show(b.dataset.page); }));
show(RENDER[location.hash.slice(1)] ? location.hash.slice(1) : (D.runs.length === 1 ? 'run' : 'runs'));
if (D.live) {
  setInterval(() => fetch(D.live.stamp_url, {cache: 'no-store'}).then(r => r.text()).then(t => {
    if (t.trim() && t.trim() !== D.live.stamp) location.reload(); }).catch(() => {}), D.live.every_ms || 10000);
}
})();
