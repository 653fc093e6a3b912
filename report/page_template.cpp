// The report page's style, layout and script (report/html.h). The script
// only arranges the study's data (report/page_data.h) into Plotly.js traces;
// Plotly draws every chart.
namespace hps::report {

extern const char* const kPageHead;
extern const char* const kPageEarlyScript;
extern const char* const kPageScript;

const char* const kPageHead = R"HTML(<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.plot { width: 100%; max-width: 1100px; height: 420px; }
.slices { display: flex; flex-wrap: wrap; }
.slices .plot { width: 360px; height: 300px; }
.plot.empty { height: auto; min-height: 0; color: #666; font-style: italic; padding: 0.4em 0; }
td.attrs { min-width: 14em; max-width: 32em; overflow-wrap: anywhere; font-size: 0.85em; }
td.reason { white-space: pre-wrap; font-family: monospace; }
td.json { max-width: 60em; white-space: pre-wrap; overflow-wrap: anywhere; font-family: monospace; font-size: 0.85em; }
.wide { max-width: 100%; overflow-x: auto; }
h1, #summary { overflow-wrap: anywhere; }
#hps-update-error { color: #b00; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
.note { color: #666; font-size: 0.9em; }
pre { background: #f6f6f6; padding: 0.6em; max-width: 1100px; overflow: auto; }
#hps-errors { color: #b00; }
</style></head><body>
<h1 id="title">hpsearch report</h1>
<p id="summary"></p>
<p class="note" id="downsampled"></p>
<ul id="hps-errors"></ul>
<p id="hps-update-error"></p>
<h2>Optimization history</h2>
<p class="note" id="history-note"></p>
<div id="history-number" class="plot"></div>
<div id="history-time" class="plot"></div>
<h2>Intermediate values (learning curves)</h2>
<p class="note" id="curves-note"></p>
<div id="curves" class="plot"></div>
<h2>Parallel coordinates</h2>
<p class="note">COMPLETE trials, colored by value. Log params on log axes; categorical and ordinal params in their declared order; "inactive" marks a conditional param that was not active in the trial.</p>
<div id="parcoords" class="plot"></div>
<h2>Param importances</h2>
<p class="note" id="importance-note"></p>
<div id="importance" class="plot"></div>
<h2>Slice plots</h2>
<div id="slices" class="slices"></div>
<h2>Contour of the two most important params</h2>
<p class="note" id="contour-note"></p>
<div id="contour" class="plot"></div>
<h2>Timeline</h2>
<p class="note">One row per worker, one bar per trial from start to end, colored by state: gaps are idle workers, long bars stragglers.</p>
<div id="timeline" class="plot"></div>
<h2>Top trials</h2>
<div id="top"></div>
<h2>Failed trials</h2>
<div id="failed"></div>
<h2>Settings</h2>
<div id="settings"></div>
)HTML";

// Runs before Plotly.js: lists in #hps-errors every script error, rejected
// promise, console.error call and request refused by the page's
// Content-Security-Policy, from the library's own start on.
const char* const kPageEarlyScript = R"JS(
'use strict';
(function () {
  const errors = document.getElementById('hps-errors');
  function fail(msg) { const li = document.createElement('li'); li.textContent = String(msg); errors.appendChild(li); }
  window.hpsFail = fail;
  // When Plotly.js starts to load (ms since navigation start; #hps-ready).
  window.hpsT0 = performance.now();
  window.addEventListener('error', e => fail('script error: ' + e.message));
  window.addEventListener('unhandledrejection', e => fail('script error: ' + (e.reason && e.reason.message || e.reason)));
  document.addEventListener('securitypolicyviolation', e => fail('refused request: ' + e.blockedURI + ' (' + e.violatedDirective + ')'));
  const consoleError = console.error.bind(console);
  console.error = function (...args) { fail('console.error: ' + args.map(String).join(' ')); consoleError(...args); };
})();
)JS";

const char* const kPageScript = R"JS(
'use strict';
(function () {
  const fail = window.hpsFail;

  const tScript = performance.now();
  const mode = JSON.parse(document.getElementById('hps-mode').textContent);
  let data = JSON.parse(document.getElementById('hps-data').textContent);
  const tParsed = performance.now();
  let trials = new Map();
  for (const t of data.trials) trials.set(t.n, t);

  const STATE_COLOR = {COMPLETE: '#1f77b4', PRUNED: '#ff7f0e', FAIL: '#d62728', RUNNING: '#2ca02c', WAITING: '#7f7f7f'};
  const minimize = data.study.direction === 'minimize';
  const text = s => document.createTextNode(s);
  const date = s => new Date(s * 1000);
  // Numbers with 6 significant digits, as JavaScript writes them (0.0001,
  // 2.5119e-7, 1e+21): no 1.0000e-4, no 0.15000000000000002.
  const fmt = v => (v === null || v === undefined) ? '' : (typeof v === 'number' ? (isFinite(v) ? String(+v.toPrecision(6)) : String(v)) : String(v));
  // Text from the study (names, labels, worker names) for Plotly, which
  // reads a few HTML tags in its strings (<a href>, <b>, <br>): escaped so
  // it shows as written. Long names keep their start and end ("first_
  // stage_lr...second_stage_lr" would lose what tells them apart).
  const esc = s => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const MAX_LABEL = 32;
  const short = s => { s = String(s); return s.length > MAX_LABEL ? s.slice(0, 15) + '\u2026' + s.slice(-16) : s; };
  const label = s => esc(short(s));
  // Bidirectional-text controls (U+202A..E, U+2066..9) in study text would
  // reorder what the tables show: replaced.
  const clean = s => String(s).replace(/[\u202A-\u202E\u2066-\u2069]/g, '\uFFFD');
  const valueText = t => t.vt ? t.vt : fmt(t.v);
  const cfg = {responsive: true, displaylogo: false};
  // Above this many points a scatter plot is drawn with WebGL (scattergl)
  // instead of one SVG element per point (seconds at 10,000; but each WebGL
  // plot costs a second to set up under software rendering).
  const GL_POINTS = 2500;
  const scatter = n => n > GL_POINTS ? 'scattergl' : 'scatter';

  // Ticks of a log axis from lo to hi (0 < lo < hi): each power of ten
  // inside, labelled 0.001 ... 1000, or all as 1e-4, 1e-3 ... when one lies
  // beyond (one style per axis), and when fewer than
  // two fall inside also 2 and 5 times each (a short range keeps a few
  // ticks); never Plotly's crowded "2 3 ... 9 100 2" minor labels. At most
  // 8 ticks: every k-th power of ten over a wide range. A range without
  // any such tick gets its ends.
  function decadeText(k, exp) { return exp ? (k === 0 ? '1' : '1e' + k) : String(+Math.pow(10, k).toPrecision(1)); }
  function logTicks(lo, hi) {
    const k0 = Math.floor(Math.log10(lo)), k1 = Math.ceil(Math.log10(hi));
    const inside = v => v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9);
    let powers = [];
    for (let k = k0; k <= k1; k++) if (inside(Math.pow(10, k))) powers.push(k);
    const vals = [], text = [];
    if (powers.length >= 2) {
      const every = Math.ceil(powers.length / 8);
      powers = powers.filter(k => (k - powers[0]) % every === 0);
      const exp = powers.some(k => k < -3 || k > 3);
      for (const k of powers) { vals.push(Math.pow(10, k)); text.push(decadeText(k, exp)); }
    } else {
      for (let k = k0; k <= k1; k++) for (const m of [1, 2, 5]) {
        const v = m * Math.pow(10, k);
        if (inside(v)) { vals.push(v); text.push(fmt(v)); }
      }
    }
    if (vals.length < 2) return {vals: [lo, hi], text: [fmt(lo), fmt(hi)]};
    return {vals: vals, text: text};
  }
  // The axis of a param: categories in their declared order, or linear, or
  // log over the declared range and the values drawn (`values`), with
  // logTicks' labels.
  function paramAxis(p, values) {
    if (p.kind === 'categorical' || p.kind === 'ordinal') return {type: 'category', categoryorder: 'array', categoryarray: p.labels.map(label)};
    if (!p.log) return {type: 'linear'};
    let lo = p.low, hi = p.high;
    for (const v of values || []) if (typeof v === 'number' && v > 0 && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (!(lo > 0 && hi > lo)) return {type: 'log'};
    const t = logTicks(lo, hi), pad = 0.03 * (Math.log10(hi) - Math.log10(lo));
    return {type: 'log', tickmode: 'array', tickvals: t.vals, ticktext: t.text, range: [Math.log10(lo) - pad, Math.log10(hi) + pad]};
  }
  function paramX(p, v) { return (p.kind === 'categorical' || p.kind === 'ordinal') ? label(p.labels[v]) : v; }

  // Parallel coordinates of a downsampled study as SVG lines: Plotly's
  // 'parcoords' draws with WebGL, seconds of set-up under software
  // rendering (the page's costliest plot; no GPU in headless Chromium).
  // Each axis scaled to [0, 1] over its range; one trace per band of
  // values (PC_BANDS, Viridis colors, the best band drawn last, on top);
  // no brushing.
  const PC_BANDS = 8;
  const VIRIDIS = ['#440154', '#46327e', '#365c8d', '#277f8e', '#1fa187', '#4ac16d', '#a0da39', '#fde725'];
  function dimRange(d) {
    if (d.range) return d.range;
    let lo = Infinity, hi = -Infinity;
    for (const v of d.values) if (v !== null && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    return lo <= hi ? [lo, hi] : [0, 1];
  }
  const unit = (r, v) => (v === null || !isFinite(v)) ? null : (r[1] > r[0] ? (v - r[0]) / (r[1] - r[0]) : 0.5);
  function svgParcoords(dims, pc) {
    const ranges = dims.map(dimRange), vr = ranges[ranges.length - 1];
    const bands = [];
    for (let b = 0; b < PC_BANDS; b++) bands.push({x: [], y: [], text: []});
    pc.forEach((t, i) => {
      const u = unit(vr, t.v);
      // Band 0 holds the best values.
      const b = Math.min(PC_BANDS - 1, Math.floor((minimize ? u : 1 - u) * PC_BANDS));
      const band = bands[b === null || isNaN(b) ? PC_BANDS - 1 : b];
      dims.forEach((d, j) => { band.x.push(j); band.y.push(unit(ranges[j], d.values[i])); band.text.push('trial ' + t.n + ': ' + fmt(t.v)); });
      band.x.push(null); band.y.push(null); band.text.push(null);
    });
    const w = (vr[1] - vr[0]) / PC_BANDS, out = [];
    for (let b = PC_BANDS - 1; b >= 0; b--) {
      if (!bands[b].x.length) continue;
      const lo = minimize ? vr[0] + b * w : vr[1] - (b + 1) * w;
      out.push({type: 'scatter', mode: 'lines', x: bands[b].x, y: bands[b].y, text: bands[b].text, hoverinfo: 'text',
        name: fmt(lo) + ' to ' + fmt(lo + w), line: {width: 1, color: VIRIDIS[PC_BANDS - 1 - b]}, opacity: 0.7});
    }
    return out;
  }
  // Tick labels beside each axis of svgParcoords (annotations).
  function svgParcoordsTicks(dims) {
    const out = [];
    dims.forEach((d, j) => {
      const r = dimRange(d);
      let tv = d.tickvals, tt = d.ticktext;
      if (!tv) { tv = []; tt = []; for (let i = 0; i <= 4; i++) { const x = r[0] + (r[1] - r[0]) * i / 4; tv.push(x); tt.push(fmt(x)); } }
      tv.forEach((v, i) => out.push({x: j, y: unit(r, v), text: String(tt[i]), showarrow: false, xanchor: 'right', xshift: -3, font: {size: 9, color: '#444'}}));
    });
    return out;
  }

  // A linear / log switch for a plot's y axis (Plotly buttons).
  function scaleButtons() {
    return [{type: 'buttons', direction: 'left', x: 0, xanchor: 'left', y: 1.12, yanchor: 'bottom', showactive: true, pad: {r: 4, t: 0},
      buttons: [{label: 'linear', method: 'relayout', args: ['yaxis.type', 'linear']}, {label: 'log', method: 'relayout', args: ['yaxis.type', 'log']}]}];
  }

  function historyTrials() {
    const keep = new Set(data.history_numbers);
    const out = [];
    for (const t of trials.values()) if (t.s === 'COMPLETE' && t.v !== null && (mode.live || keep.has(t.n))) out.push(t);
    return out;
  }

  function plots() {
    const specs = [];
    const hist = historyTrials();
    // COMPLETE trials whose value is infinite have no point on any plot: say so.
    const infinite = [];
    for (const t of trials.values()) if (t.s === 'COMPLETE' && t.v === null && t.vt) infinite.push('trial ' + t.n + ' (' + t.vt + ')');
    document.getElementById('history-note').textContent = infinite.length ?
      infinite.length + ' COMPLETE trial' + (infinite.length === 1 ? '' : 's') + ' with an infinite value, not drawn on the plots (the importances rank them): ' +
      infinite.slice(0, 10).join(', ') + (infinite.length > 10 ? ', ...' : '') + '.' : '';
    // Optimization history: by number, by time.
    const noComplete = 'no COMPLETE trial with a finite value yet.';
    // The best-so-far line under the points (drawn first), so a point on it
    // stays visible; a linear / log switch (one bad trial flattens the rest).
    specs.push({id: 'history-number', marks: hist.length, empty: 'Value by trial number: ' + noComplete, data: [
      {type: 'scatter', mode: 'lines', name: 'best so far', line: {shape: 'hv', color: '#d62728'},
       x: data.best_by_number.map(b => b[0]), y: data.best_by_number.map(b => b[1])},
      {type: scatter(hist.length), mode: 'markers', name: 'value (COMPLETE trial)', x: hist.map(t => t.n), y: hist.map(t => t.v),
       text: hist.map(t => 'trial ' + t.n), marker: {size: 5, color: '#1f77b4', opacity: 0.6}}],
      layout: {title: 'Value by trial number', xaxis: {title: 'trial number'}, yaxis: {title: 'value'}, updatemenus: scaleButtons()}});
    const timed = hist.filter(t => t.t1 !== null);
    specs.push({id: 'history-time', marks: timed.length, empty: 'Value by completion time: ' + noComplete, data: [
      {type: 'scatter', mode: 'lines', name: 'best so far', line: {shape: 'hv', color: '#d62728'},
       x: data.best_by_time.map(b => date(b[0])), y: data.best_by_time.map(b => b[1])},
      {type: scatter(timed.length), mode: 'markers', name: 'value (COMPLETE trial)', x: timed.map(t => date(t.t1)), y: timed.map(t => t.v),
       text: timed.map(t => 'trial ' + t.n), marker: {size: 5, color: '#1f77b4', opacity: 0.6}}],
      layout: {title: 'Value by completion time', xaxis: {title: 'time', type: 'date'}, yaxis: {title: 'value'}, updatemenus: scaleButtons()}});

    // Learning curves, one trace per state (a gap between trials: one SVG
    // path per state, not per trial); pruned trials marked at their last
    // step; rungs.
    const byCurveState = {};
    const ends = {x: [], y: [], text: []};
    const resumed = {x: [], y: [], text: []};
    let nCurves = 0, maxStep = 0;
    for (const t of trials.values()) {
      if (!t.iv || t.iv.length === 0) continue;
      nCurves++;
      maxStep = Math.max(maxStep, t.iv[t.iv.length - 1][0]);
      const c = byCurveState[t.s] || (byCurveState[t.s] = {x: [], y: [], text: []});
      for (const p of t.iv) { c.x.push(p[0]); c.y.push(p[1]); c.text.push('trial ' + t.n); }
      c.x.push(null); c.y.push(null); c.text.push(null);
      if (t.s === 'PRUNED') { const l = t.iv[t.iv.length - 1]; ends.x.push(l[0]); ends.y.push(l[1]); ends.text.push('trial ' + t.n + ' pruned'); }
      if (t.rs !== undefined) { const r = t.iv.find(p => p[0] === t.rs); if (r) { resumed.x.push(r[0]); resumed.y.push(r[1]); resumed.text.push('trial ' + t.n + ' resumed after step ' + t.rs + ' (checkpoint)'); } }
    }
    // Lines and small markers: a trial that reported one step is a point.
    const curves = Object.keys(byCurveState).map(s => ({type: 'scatter', mode: 'lines+markers', x: byCurveState[s].x, y: byCurveState[s].y,
      text: byCurveState[s].text, name: s, line: {width: 1, color: STATE_COLOR[s]}, marker: {size: 3, color: STATE_COLOR[s]},
      opacity: 0.6, hoverinfo: 'text+x+y'}));
    if (ends.x.length) curves.push({type: 'scatter', mode: 'markers', name: 'pruned here', x: ends.x, y: ends.y, text: ends.text,
      marker: {symbol: 'x', size: 8, color: '#ff7f0e'}});
    if (resumed.x.length) curves.push({type: 'scatter', mode: 'markers', name: 'resumed here', x: resumed.x, y: resumed.y, text: resumed.text,
      marker: {symbol: 'triangle-right', size: 9, color: '#2ca02c'}});
    const rungShapes = (data.rungs || []).map(s => ({type: 'line', xref: 'x', yref: 'paper', x0: s, x1: s, y0: 0, y1: 1, line: {dash: 'dot', color: '#888'}}));
    document.getElementById('curves-note').textContent = nCurves && data.rungs && data.rungs.length ? 'Dotted lines: the pruner\'s rungs at steps ' + data.rungs.join(', ') + '.' : '';
    specs.push({id: 'curves', marks: nCurves, empty: 'No trial reported intermediate values (Trial::report, or \'hpsearch: {"step": ..., "value": ...}\' lines).', data: curves,
      // Steps are integers: one tick per step up to 12 (no 1.5); a linear /
      // log switch for the values (an outlier flattens the rest).
      layout: {title: 'Intermediate value by step', xaxis: Object.assign({title: 'step'}, maxStep <= 12 ? {tick0: 0, dtick: 1} : {}),
        yaxis: {title: 'intermediate value'}, shapes: rungShapes, updatemenus: scaleButtons()}});

    // Parallel coordinates: the trials of parcoords_numbers when the study
    // has more COMPLETE trials than it shows (the best tenth, then every k-th).
    const pcKeep = data.parcoords_numbers ? new Set(data.parcoords_numbers) : null;
    const pc = pcKeep ? hist.filter(t => pcKeep.has(t.n)) : hist;
    const dims = [];
    for (const p of data.params) {
      const vals = [];
      let d;
      if (p.kind === 'categorical' || p.kind === 'ordinal') {
        for (const t of pc) vals.push(p.name in t.p ? t.p[p.name] : -1);
        const tv = p.labels.map((_, i) => i), tt = p.labels.map(label);
        if (p.when) { tv.unshift(-1); tt.unshift('inactive'); }
        d = {label: label(p.name), values: vals, tickvals: tv, ticktext: tt, range: [p.when ? -1 : 0, Math.max(p.labels.length - 1, 0.001)]};
      } else {
        const f = p.log ? Math.log10 : (x => x);
        const lo = f(p.low), hi = f(p.high), span = (hi - lo) || 1, inactive = lo - 0.1 * span;
        for (const t of pc) vals.push(p.name in t.p && t.p[p.name] !== null ? f(t.p[p.name]) : inactive);
        d = {label: label(p.name) + (p.log ? ' (log)' : ''), values: vals, range: [p.when ? inactive : lo, hi]};
        // Integer params with a short range: a tick per value (no 1.5).
        const intTicks = p.kind === 'int' && !p.log && hi - lo <= 10;
        if (p.log || p.when || intTicks) {
          const tv = [], tt = [];
          if (p.when) { tv.push(inactive); tt.push('inactive'); }
          if (intTicks) for (let x = Math.ceil(lo); x <= hi; x++) { tv.push(x); tt.push(String(x)); }
          else if (p.log) { const t = logTicks(p.low, p.high); t.vals.forEach((v, i) => { tv.push(Math.log10(v)); tt.push(t.text[i]); }); }
          else {
            const n = 5;
            for (let i = 0; i <= n; i++) { const x = lo + (hi - lo) * i / n; tv.push(x); tt.push(fmt(p.log ? Math.pow(10, x) : x)); }
          }
          d.tickvals = tv; d.ticktext = tt;
        }
      }
      dims.push(d);
    }
    dims.push({label: 'value', values: pc.map(t => t.v)});
    if (pcKeep) specs.push({id: 'parcoords', marks: pc.length, empty: noComplete, data: svgParcoords(dims, pc),
      layout: {showlegend: true, legend: {title: {text: 'value'}}, xaxis: {tickvals: dims.map((_, i) => i), ticktext: dims.map(d => d.label),
        side: 'top', showgrid: false, zeroline: false, range: [-0.3, dims.length - 0.7]},
        yaxis: {visible: false, range: [-0.05, 1.05]}, annotations: svgParcoordsTicks(dims),
        shapes: dims.map((_, j) => ({type: 'line', xref: 'x', yref: 'y', x0: j, x1: j, y0: 0, y1: 1, line: {color: '#888', width: 1}})), margin: {l: 20, r: 20, t: 60, b: 20}}});
    else specs.push({id: 'parcoords', marks: pc.length, empty: noComplete, data: [{type: 'parcoords', dimensions: dims,
      line: {color: pc.map(t => t.v), colorscale: 'Viridis', reversescale: minimize, showscale: true, colorbar: {title: 'value'}}}],
      layout: {margin: {l: 60, r: 60, t: 50, b: 30}}});

    // Importances.
    const imp = data.importance;
    document.getElementById('importance-note').textContent = imp.method + ' (' + imp.source + ')' + (imp.n_top ? ' over ' + imp.n_trials +
      ' COMPLETE trials, top set ' + imp.n_top + ' trials; normalized to sum 1.' + (imp.note ? ' Note: ' + imp.note + '.' : '') : '.');
    const iv = imp.values.slice().reverse();
    const longest = Math.max(0, ...iv.map(v => short(v.param).length));
    specs.push({id: 'importance', marks: imp.n_top ? iv.length : 0, empty: 'Not computed: ' + (imp.note || 'no params') + '.', data: [{type: 'bar', orientation: 'h', x: iv.map(v => v.importance), y: iv.map(v => label(v.param)),
      text: iv.map(v => v.importance.toFixed(3)), textposition: 'auto', marker: {color: '#1f77b4'}, hovertext: iv.map(v => esc(v.param)), hoverinfo: 'text+x'}],
      layout: {title: 'Param importance (' + imp.method + ')', xaxis: {title: 'importance', range: [0, 1]}, yaxis: {automargin: true}, margin: {l: Math.min(280, 20 + 7 * longest)},
        height: Math.max(300, 120 + 24 * iv.length)}});

    // Slice plots, one per param, and the contour's points: the trials of
    // slice_numbers when the study has more COMPLETE trials than it shows.
    const slKeep = data.slice_numbers ? new Set(data.slice_numbers) : null;
    const sl = slKeep ? hist.filter(t => slKeep.has(t.n)) : hist;
    const slices = document.getElementById('slices');
    for (const [i, p] of data.params.entries()) {
      let el = document.getElementById('slice-' + i);
      if (!el) { el = document.createElement('div'); el.id = 'slice-' + i; el.className = 'plot'; slices.appendChild(el); }
      const pts = sl.filter(t => p.name in t.p && t.p[p.name] !== null);
      specs.push({id: el.id, marks: pts.length, empty: short(p.name) + ': no COMPLETE trial with this param active yet.', data: [{type: scatter(pts.length), mode: 'markers', x: pts.map(t => paramX(p, t.p[p.name])), y: pts.map(t => t.v),
        text: pts.map(t => 'trial ' + t.n), marker: {size: 5, color: pts.map(t => t.n), colorscale: 'Viridis', opacity: 0.8,
        colorbar: {title: 'trial', thickness: 10}, showscale: i === 0}}],
        // No plot title: it sat under the mode bar; the x axis names the param.
        layout: {margin: {l: 50, r: 10, t: 30, b: 40}, xaxis: Object.assign({title: label(p.name) + (p.log ? ' (log)' : ''), automargin: true}, paramAxis(p, pts.map(t => t.p[p.name]))), yaxis: {title: 'value'}}});
    }

    // Contour.
    const c = data.contour;
    if (c) {
      const px = data.params.find(p => p.name === c.x.param), py = data.params.find(p => p.name === c.y.param);
      const pts = sl.filter(t => c.x.param in t.p && c.y.param in t.p);
      const anyCat = c.x.type === 'category' || c.y.type === 'category';
      document.getElementById('contour-note').textContent = 'Best value of the trials in each cell (' + (anyCat ? 'heatmap' : 'contour; empty cells interpolated') + '), with the trials as points.';
      const centers = a => a.type === 'category' ? a.centers.map(label) : a.centers;
      specs.push({id: 'contour', marks: pts.length, empty: 'No COMPLETE trial with both ' + short(c.x.param) + ' and ' + short(c.y.param) + ' yet.', data: [
        {type: anyCat ? 'heatmap' : 'contour', x: centers(c.x), y: centers(c.y), z: c.z, connectgaps: !anyCat, colorscale: 'Viridis', reversescale: minimize,
         colorbar: {title: 'best value'}},
        {type: scatter(pts.length), mode: 'markers', x: pts.map(t => paramX(px, t.p[c.x.param])), y: pts.map(t => paramX(py, t.p[c.y.param])),
         text: pts.map(t => 'trial ' + t.n + ': ' + fmt(t.v)), marker: {size: 4, color: 'black', opacity: 0.5}, showlegend: false}],
        layout: {title: {text: label(c.x.param) + ' and ' + label(c.y.param), y: 0.97}, margin: {t: 60},
                 xaxis: Object.assign({title: label(c.x.param), automargin: true}, paramAxis(px, pts.map(t => t.p[c.x.param]).concat(c.x.centers || []))),
                 yaxis: Object.assign({title: label(c.y.param), automargin: true}, paramAxis(py, pts.map(t => t.p[c.y.param]).concat(c.y.centers || [])))}});
    } else {
      document.getElementById('contour-note').textContent = '';
      specs.push({id: 'contour', marks: 0, empty: 'Needs two params (the study has ' + data.params.length + ').', data: []});
    }

    // Timeline: one row per worker, a bar per trial, colored by state.
    const tl = data.timeline;
    const now = Date.now() / 1000;
    const byState = {};
    for (const r of tl.rows) {
      const s = r[3];
      if (!byState[s]) byState[s] = {x: [], y: [], text: []};
      const b = byState[s], w = label(tl.workers[r[0]]), end = r[2] === null ? (mode.live ? now : Date.parse(data.generated) / 1000) : r[2];
      b.x.push(date(r[1]), date(end), null); b.y.push(w, w, null); b.text.push('trial ' + r[4], 'trial ' + r[4], null);
    }
    // White ticks at each bar's ends (up to 500 bars): trials of one state
    // back to back on a worker stay two bars, not one.
    const tlMode = tl.rows.length <= 500 ? 'lines+markers' : 'lines';  // ticks cost an SVG element each
    const tlData = Object.keys(byState).map(s => ({type: 'scatter', mode: tlMode, name: s, x: byState[s].x, y: byState[s].y, text: byState[s].text,
      hoverinfo: 'text+x', line: {width: 12, color: STATE_COLOR[s]}, marker: {symbol: 'line-ns', size: 12, line: {width: 2, color: 'white'}, color: 'white'}}));
    specs.push({id: 'timeline', marks: tl.rows.length, empty: 'No trial has started yet.', data: tlData,
      layout: {title: 'Trials by worker', xaxis: {title: 'time', type: 'date'}, yaxis: {type: 'category', automargin: true}, showlegend: true,
               height: Math.max(200, 130 + 32 * tl.workers.length)}});
    return specs;
  }

  // A user attr's value as a cell (numbers as fmt, strings unquoted), at
  // most 120 characters.
  function attrText(v) {
    const s = v === undefined ? '' : typeof v === 'string' ? v : typeof v === 'number' ? fmt(v) : JSON.stringify(v);
    return clean(s.length > 120 ? s.slice(0, 119) + '\u2026' : s);
  }
  // A float param's label ("0.15000000000000002") as fmt writes it.
  const paramText = (p, v) => typeof v === 'number' ? fmt(v) : (p.kind === 'float' && v !== '' && isFinite(+v)) ? fmt(+v) : clean(v);
  const MAX_ATTR_COLUMNS = 12;

  // The most recent FAIL trials (of those the page holds), with the worker
  // and the reason (hpsearch trials --state FAIL lists them all).
  const FAILED_ROWS = 20;
  function failedTable() {
    const el = document.getElementById('failed');
    el.textContent = '';
    const failed = [];
    for (const t of trials.values()) if (t.s === 'FAIL') failed.push(t);
    if (!failed.length) { el.appendChild(text('No FAIL trial.')); return; }
    failed.sort((a, b) => b.n - a.n);
    const tbl = document.createElement('table');
    const tr = tbl.insertRow();
    for (const h of ['trial', 'worker', 'reason']) { const th = document.createElement('th'); th.textContent = h; tr.appendChild(th); }
    for (const t of failed.slice(0, FAILED_ROWS)) {
      const row = tbl.insertRow();
      row.insertCell().textContent = String(t.n);
      row.insertCell().textContent = clean(t.w || '');
      // A traceback's lines as lines (pre-wrap).
      const td = row.insertCell(); td.className = 'attrs reason';
      td.textContent = clean((t.fr || '').length > 400 ? t.fr.slice(0, 399) + '\u2026' : (t.fr || ''));
    }
    el.appendChild(tbl);
    if (failed.length > FAILED_ROWS) el.appendChild(text('The ' + FAILED_ROWS + ' most recent of ' + failed.length + ' FAIL trials; all of them: hpsearch trials STORAGE --state FAIL.'));
  }

  function tables() {
    // Top trials: the effective value beside each scale_with param.
    const top = document.getElementById('top');
    top.textContent = '';
    if (!data.top.length) { top.appendChild(text('No COMPLETE trial yet.')); }
    else {
      const tbl = document.createElement('table');
      const head = ['trial', 'value'];
      for (const p of data.params) { head.push(p.name); if (p.scale_with) head.push(p.name + ' (effective)'); }
      // A column per user attr (as `hpsearch trials` shows them), at most
      // MAX_ATTR_COLUMNS.
      const attrNames = [...new Set(data.top.flatMap(t => Object.keys(t.attrs || {})))].sort().slice(0, MAX_ATTR_COLUMNS);
      for (const a of attrNames) head.push('attr ' + a);
      const tr = tbl.insertRow();
      for (const h of head) { const th = document.createElement('th'); th.textContent = clean(h); tr.appendChild(th); }
      for (const t of data.top) {
        const row = tbl.insertRow();
        const cells = [t.n, valueText(t)];
        for (const p of data.params) {
          const v = t.params[p.name];
          cells.push(!(p.name in t.params) ? 'inactive' : paramText(p, v));
          if (p.scale_with) cells.push(p.name in t.effective ? fmt(t.effective[p.name]) : '');
        }
        for (const a of attrNames) cells.push(attrText((t.attrs || {})[a]));
        for (const c of cells) row.insertCell().textContent = String(c);
      }
      const box = document.createElement('div'); box.className = 'wide';
      box.appendChild(tbl); top.appendChild(box);
    }
    failedTable();
    const set = document.getElementById('settings');
    set.textContent = '';
    const s = data.settings || {};
    const tbl = document.createElement('table');
    tbl.id = 'settings-table';
    const add = (k, v) => { const r = tbl.insertRow(); r.insertCell().textContent = clean(k); const c = r.insertCell(); c.className = 'json'; c.textContent = clean(v); };
    add('study', data.study.name); add('direction', data.study.direction);
    for (const k of ['sampler', 'pruner', 'budget', 'objective']) if (s[k] !== undefined) add(k, JSON.stringify(s[k], null, 1).replace(/\n\s*/g, ' '));
    for (const p of data.params) {
      let d = p.kind + (p.kind === 'categorical' || p.kind === 'ordinal' ? ' [' + p.labels.join(', ') + ']' : ' [' + fmt(p.low) + ', ' + fmt(p.high) + ']' + (p.log ? ' log' : '') + (p.step ? ' step ' + p.step : ''));
      if (p.when) d += '; when ' + JSON.stringify(p.when);
      if (p.scale_with) d += '; scale_with ' + p.scale_with.param + ' (' + p.scale_with.rule + ', reference ' + p.scale_with.reference +
        '): effective = sampled * (' + p.scale_with.param + ' / ' + p.scale_with.reference + ')^' + (p.scale_with.rule === 'linear' ? '1' : '0.5');
      add('param ' + p.name, d);
    }
    set.appendChild(tbl);
    if (data.settings_error) set.appendChild(text('The stored settings (space.json) could not be read or are not valid (a run refuses them): ' + clean(data.settings_error)));
    else if (!data.settings) set.appendChild(text('The study has no stored space.json (made through the C++ API).'));
  }

  function header() {
    document.getElementById('title').textContent = 'hpsearch report: ' + clean(data.study.name);
    const c = data.counts;
    const best = data.top.length ? 'best value ' + valueText(data.top[0]) + ' (trial ' + data.top[0].n + ')' : 'no COMPLETE trial yet';
    document.getElementById('summary').textContent = data.n_trials + ' trials (' + Object.keys(c).map(k => c[k] + ' ' + k).join(', ') + '); ' +
      data.study.direction + '; ' + best + '. ' + (mode.live ? 'Live: updated ' + new Date().toLocaleTimeString() + '.' : 'Generated ' + data.generated + '.');
    const d = data.downsampled, parts = [];
    if (d.points) parts.push('the optimization history shows ' + d.points[0] + ' of ' + d.points[1] + ' COMPLETE trials (the best tenth, then every k-th)');
    if (d.slices) parts.push('slice and contour points show ' + d.slices[0] + ' of ' + d.slices[1] + ' COMPLETE trials (likewise)');
    if (d.parcoords) parts.push('parallel coordinates show ' + d.parcoords[0] + ' of ' + d.parcoords[1] + ' COMPLETE trials (likewise; drawn as SVG lines in ' + PC_BANDS + ' value bands, without brushing)');
    if (d.curves) parts.push('learning curves show ' + d.curves[0] + ' of ' + d.curves[1] + ' trials (the best tenth, then every k-th)');
    if (d.timeline) parts.push('the timeline shows the ' + d.timeline[0] + ' most recently started of ' + d.timeline[1] + ' trials');
    document.getElementById('downsampled').textContent = parts.length ? 'Downsampled for speed (above ' + data.downsample_above + ' trials): ' + parts.join('; ') + '. Best-so-far lines, importances, contour cells and the top trials use every trial.' : '';
  }

  // Draws the plots, those in view first, then the rest in page order, a
  // few per task, so the page paints and answers between them. Resolves to
  // {plots, first}: how many plots, and when (ms since navigation start)
  // those in view at the start were drawn.
  const YIELD_EVERY = 4;
  function draw(first) {
    header();
    tables();
    const specs = plots();
    const inView = s => { const r = document.getElementById(s.id).getBoundingClientRect(); return r.top < window.innerHeight && r.bottom > 0; };
    const seen = specs.filter(inView);
    const order = seen.concat(specs.filter(s => !inView(s)));
    let firstMs = seen.length ? null : Math.round(performance.now());
    let chain = Promise.resolve();
    for (const [i, s] of order.entries()) {
      // A task per plot costs the browser a style and layout pass each
      // (about 0.1 s at 100,000 trials): yield after the plots in view and
      // then every YIELD_EVERY plots.
      if (i === seen.length || (i > seen.length && (i - seen.length) % YIELD_EVERY === 0))
        chain = chain.then(() => new Promise(res => setTimeout(res, 0)));
      chain = chain.then(() => {
        const el = document.getElementById(s.id);
        el.dataset.marks = s.marks;
        // A plot without data is a sentence saying why, not empty axes.
        if (!s.marks) {
          if (!el.classList.contains('empty')) { Plotly.purge(el); el.classList.add('empty'); }
          el.textContent = s.empty || 'No data yet.';
          el.dataset.ms = 0;
          if (i === seen.length - 1) firstMs = Math.round(performance.now());
          return;
        }
        const fresh = first || el.classList.contains('empty');
        if (el.classList.contains('empty')) { el.classList.remove('empty'); el.textContent = ''; }
        const layout = Object.assign({margin: {t: 40}}, s.layout);
        const t0 = performance.now();
        const drawn = (fresh ? Plotly.newPlot : Plotly.react)(el, s.data, layout, cfg);
        return drawn.catch(e => fail('plot ' + s.id + ': ' + e)).then(() => {
          el.dataset.ms = Math.round(performance.now() - t0);
          if (i === seen.length - 1) firstMs = Math.round(performance.now());
        });
      });
    }
    return chain.then(() => ({plots: specs.length, first: firstMs}));
  }

  // #hps-ready (hidden) marks the page drawn; its data: plots, ms (all
  // plots drawn), first_ms (the plots in view at load drawn), start_ms
  // (Plotly.js started to load), script_ms (Plotly.js loaded, the page's
  // script started), parse_ms (the study's JSON parsed); every time in ms
  // since navigation start. Each plot's element holds data-ms, how long its
  // drawing took.
  draw(true).then(r => {
    const ready = document.createElement('div');
    ready.id = 'hps-ready'; ready.hidden = true;
    Object.assign(ready.dataset, {plots: r.plots, ms: Math.round(performance.now()), firstMs: r.first,
      startMs: Math.round(window.hpsT0 || 0), scriptMs: Math.round(tScript), parseMs: Math.round(tParsed - tScript)});
    document.body.appendChild(ready);
  });

  // The last failed update of a live page (one line, replaced; "" clears
  // it): the page keeps showing the last state it got.
  function updateError(msg) {
    const el = document.getElementById('hps-update-error');
    el.textContent = msg ? 'Update failed at ' + new Date().toLocaleTimeString() + ': ' + msg + ' The page shows the last state it got.' : '';
  }

  if (mode.live) {
    let since = data.rev || 0;
    if (data.update_error) updateError(data.update_error);
    // Each answer holds the trials and the aggregates that changed since
    // the revision the page has ("reset": the whole data, e.g. after the
    // dashboard restarted).
    const poll = () => fetch(mode.poll_url + '?since=' + since).then(r => {
      if (!r.ok) return r.text().then(t => { throw new Error('HTTP ' + r.status + ': ' + t.trim()); });
      return r.json();
    }).then(d => {
      if (d.unchanged) { updateError(''); return; }
      if (d.reset) trials = new Map();
      for (const t of d.trials || []) trials.set(t.n, t);
      for (const k of Object.keys(d)) if (k !== 'trials' && k !== 'rev' && k !== 'reset') data[k] = d[k];
      since = d.rev;
      document.body.dataset.rev = since;
      updateError('');
      return draw(false);
    }).catch(e => updateError(String(e))).finally(() => setTimeout(poll, mode.poll_ms));
    setTimeout(poll, mode.poll_ms);
  }
})();
)JS";

}  // namespace hps::report
