// fntrace's HTML report: a flame graph, a timeline and the function table of one trace
// (and, from `fntrace diff`, the changes between two), drawn from the JSON island
// above.  No network, no library: the page must open anywhere, offline, forever.
//
// The data (output/html_report.py says what each holds):
//   stacks  flat [parent, name id] per call path; path 0 is the root
//   nodes   slot -> flat [path, calls, total ns, self ns] per (thread, call path)
//   bars    slot -> flat [start ns from t0, dur ns, depth, path, complete], by start
//   tasks   [{name, nodes}]: each asyncio Task's nodes; bar_tasks slot -> each bar's
//           Task (0: none, n: tasks[n - 1])
//   functions [name id, hits, total, self, avg, p50, p99, max, "file:line"]
//
// The view is in the address's hash (#view=flame&thread=all&search=re&zoom=name), so a
// link shows what its sender saw.
"use strict";
(function () {
const D = JSON.parse(document.getElementById("data").textContent);
const $ = (id) => document.getElementById(id);
const ROW = 17;            // a flame graph row, px
const BAR = 14;            // a timeline bar, px

// ---- numbers -------------------------------------------------------------------
function fmtNs(ns) {
  if (ns === undefined || ns === null) return "";
  const a = Math.abs(ns);
  if (a < 1e3) return ns + " ns";
  if (a < 1e6) return (ns / 1e3).toFixed(3) + " \u00b5s";
  if (a < 1e9) return (ns / 1e6).toFixed(3) + " ms";
  return (ns / 1e9).toFixed(3) + " s";
}
const fmtInt = (n) => n.toLocaleString("en-US");
const pct = (part, whole) => whole > 0 ? (100 * part / whole).toFixed(1) + "%" : "-";
function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
}

// ---- call paths ----------------------------------------------------------------
const NPATHS = D.stacks.length / 2;
const pathParent = new Int32Array(NPATHS), pathName = new Int32Array(NPATHS);
for (let k = 0; k < NPATHS; k++) { pathParent[k] = D.stacks[2 * k]; pathName[k] = D.stacks[2 * k + 1]; }
const fnOf = new Map();                     // name id -> function row
for (const r of D.functions) fnOf.set(r[0], r);
const nameOf = (id) => id < 0 ? "all" : D.names[id];
const whereOf = (id) => { const r = fnOf.get(id); return r ? r[8] : ""; };
const threadOf = new Map(D.threads.map((t) => [String(t.slot), t]));
function threadLabel(t) {
  const pids = new Set(D.threads.map((x) => x.pid));
  return `${t.name}-${t.tid}` + (pids.size > 1 ? ` (process ${t.pid})` : "");
}

// ---- state, kept in the address's hash -------------------------------------------
const state = {view: "flame", thread: "all", search: "", zoom: ""};
let searchRe = null;
function readHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  for (const k of Object.keys(state)) if (h.has(k)) state[k] = h.get(k);
  if (!["flame", "timeline", "functions", "changes"].includes(state.view)) state.view = "flame";
  if (state.view === "changes" && !D.diff) state.view = "flame";
  if (state.thread !== "all" && !threadOf.has(state.thread) && taskOf(state.thread) < 0 &&
      !D.threads.some((t) => "p" + t.pid === state.thread)) state.thread = "all";
}
function writeHash() {
  const h = new URLSearchParams();
  for (const [k, v] of Object.entries(state)) if (v && !(k === "thread" && v === "all")) h.set(k, v);
  history.replaceState(null, "", "#" + h.toString());
}
function setSearch(text) {
  state.search = text;
  searchRe = null;
  if (text) {
    try { searchRe = new RegExp(text, "i"); }
    catch (e) { searchRe = new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i"); }
  }
}
const matches = (id) => searchRe !== null && id >= 0 && searchRe.test(D.names[id]);

// a selection "tN": the asyncio Task D.tasks[N] (-1: not a Task's)
function taskOf(sel) {
  const n = sel[0] === "t" ? +sel.slice(1) : -1;
  return n >= 0 && n < (D.tasks || []).length ? n : -1;
}
// the thread slots a selection shows: "all", "pPID" (a process's threads), a Task's
// ("tN": every thread, its bars only) or a slot
function slotsOf(sel) {
  if (sel === "all" || taskOf(sel) >= 0) return D.threads.map((t) => String(t.slot));
  if (sel[0] === "p") return D.threads.filter((t) => "p" + t.pid === sel).map((t) => String(t.slot));
  return [sel];
}
function selectionLabel(sel) {
  if (taskOf(sel) >= 0) return "task " + D.tasks[taskOf(sel)].name;
  return sel === "all" ? "all threads" : sel[0] === "p" ? "process " + sel.slice(1) : threadLabel(threadOf.get(sel));
}

// ---- the flame graph's tree of one thread (or all) -------------------------------
function buildTree(thread) {
  const byPath = new Map();
  const root = {path: 0, name: -1, calls: 0, total: 0, self: 0, kids: [], up: null, depth: 0};
  byPath.set(0, root);
  let maxDepth = 0;
  function get(p) {
    let n = byPath.get(p);
    if (n) return n;
    const up = get(pathParent[p]);
    n = {path: p, name: pathName[p], calls: 0, total: 0, self: 0, kids: [], up: up, depth: up.depth + 1};
    if (n.depth > maxDepth) maxDepth = n.depth;
    up.kids.push(n);
    byPath.set(p, n);
    return n;
  }
  const task = taskOf(thread);
  for (const s of task >= 0 ? [null] : slotsOf(thread)) {
    const flat = task >= 0 ? D.tasks[task].nodes : D.nodes[s] || [];
    for (let i = 0; i < flat.length; i += 4) {
      const n = get(flat[i]);
      n.calls += flat[i + 1]; n.total += flat[i + 2]; n.self += flat[i + 3];
    }
  }
  for (const k of root.kids) root.total += k.total;
  for (const n of byPath.values()) root.calls += n.calls;
  (function sort(n) {       // flamegraph.pl's order: by name, so runs compare by eye
    n.kids.sort((a, b) => nameOf(a.name) < nameOf(b.name) ? -1 : nameOf(a.name) > nameOf(b.name) ? 1 : 0);
    for (const k of n.kids) sort(k);
  })(root);
  return {root, byPath, maxDepth};
}

const hues = new Map();
function hue(name) {        // a warm colour of its own for each name (flamegraph.pl's)
  let c = hues.get(name);
  if (c) return c;
  let h = 2166136261;       // FNV-1a: neighbouring names far apart
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 16777619) >>> 0;
  const v1 = (h & 0xff) / 255, v2 = ((h >>> 8) & 0xff) / 255, v3 = ((h >>> 16) & 0xff) / 255;
  c = `rgb(${205 + Math.round(50 * v3)},${Math.round(60 + 170 * v1)},${Math.round(60 * v2)})`;
  hues.set(name, c);
  return c;
}
function diffColour(n) {
  const base = D.diff.by_stack[n.path];
  if (base === undefined || n.path === 0) return "#d8d8d8";
  if (base < 0) return "#a040d0";
  const d = (n.total - base) / Math.max(base, 1);
  if (Math.abs(d) < 0.05) return "#d8d8d8";
  const t = Math.min(1, Math.abs(d));
  const mix = (a, b) => Math.round(a + (b - a) * t);
  return d > 0 ? `rgb(${mix(245, 224)},${mix(200, 64)},${mix(190, 48)})`
               : `rgb(${mix(200, 48)},${mix(215, 112)},${mix(245, 224)})`;
}

// a canvas W x H CSS pixels, sharp on a high-density screen, cleared; its context
function canvas2d(cv, W, H) {
  const dpr = window.devicePixelRatio || 1;
  cv.width = W * dpr; cv.height = H * dpr; cv.style.height = H + "px";
  const g = cv.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, W, H);
  g.font = "11px ui-monospace, Menlo, Consolas, monospace";
  g.textBaseline = "middle";
  return g;
}

let flame = null;           // {root, byPath, maxDepth, rects, focus}
function drawFlame() {
  const cv = $("flame-canvas");
  if (!flame) flame = buildTree(state.thread);
  let focus = flame.root;
  if (state.zoom) {         // the widest frame of that name
    let best = null;
    for (const n of flame.byPath.values())
      if (n.name >= 0 && D.names[n.name] === state.zoom && (!best || n.total > best.total)) best = n;
    if (best) focus = best;
  }
  flame.focus = focus;
  const W = cv.clientWidth || 1200, H = (flame.maxDepth + 1) * ROW + 4;
  const g = canvas2d(cv, W, H);
  const rects = [];
  for (let d = 0; d <= flame.maxDepth; d++) rects.push([]);
  let drawn = 0, hidden = 0;
  const diffing = D.diff && state.thread === "all";
  function box(n, x, w) {
    const y = n.depth * ROW;
    const m = matches(n.name);
    g.fillStyle = m ? "#e040e0" : diffing ? diffColour(n) : n.name < 0 ? "#c8c8c8" : hue(D.names[n.name]);
    g.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
    if (w > 28) {
      const label = n.name < 0 ? `all (${fmtInt(n.calls)} calls, ${fmtNs(n.total)})` : D.names[n.name];
      const room = Math.floor((w - 6) / 6.6);
      g.fillStyle = "#000";
      g.fillText(label.length > room ? label.slice(0, Math.max(room - 1, 1)) + "\u2026" : label, x + 3, y + ROW / 2);
    }
    rects[n.depth].push([x, w, n]);
    drawn++;
  }
  // the focus's callers, each the whole width, then the focus's tree
  for (let a = focus.up; a; a = a.up) box(a, 0, W);
  (function lay(n, x, w) {
    box(n, x, w);
    let sum = 0;
    for (const k of n.kids) sum += k.total;
    const scale = w / Math.max(n.total, sum, 1);
    let at = x;
    for (const k of n.kids) {
      const kw = k.total * scale;
      if (kw >= 0.5) lay(k, at, kw); else hidden++;
      at += kw;
    }
  })(focus, 0, W);
  flame.rects = rects;
  cv.dataset.drawn = drawn;
  cv.dataset.focus = nameOf(focus.name);
  const who = selectionLabel(state.thread);
  $("flame-info").textContent = (focus === flame.root
    ? `${who}: ${fmtInt(flame.root.calls)} calls, ${fmtNs(flame.root.total)}. Click a frame to zoom in, the top row to zoom out.`
    : `${who}, zoomed to ${nameOf(focus.name)}: ${fmtNs(focus.total)}, ${pct(focus.total, flame.root.total)} of the run. Click the top row to zoom out.`)
    + (hidden ? ` ${fmtInt(hidden)} frames narrower than half a pixel are not drawn.` : "");
  $("diff-legend").hidden = !diffing;
  showMatched();
}
function flameAt(ev) {
  if (!flame || !flame.rects) return null;
  const cv = $("flame-canvas"), r = cv.getBoundingClientRect();
  const x = ev.clientX - r.left, d = Math.floor((ev.clientY - r.top) / ROW);
  for (const [rx, rw, n] of flame.rects[d] || []) if (x >= rx && x < rx + rw) return n;
  return null;
}
function showMatched() {
  if (!searchRe) { $("matched").textContent = ""; return; }
  if (!flame) flame = buildTree(state.thread);
  let total = 0;
  const names = new Set();
  (function walk(n, under) {
    const m = matches(n.name);
    if (m) names.add(n.name);
    if (m && !under) total += n.total;
    for (const k of n.kids) walk(k, under || m);
  })(flame.root, false);
  $("matched").textContent = `Matched: ${pct(total, flame.root.total)} (${names.size} function${names.size === 1 ? "" : "s"})`;
  $("matched").dataset.functions = names.size;
  $("matched").dataset.ns = total;
}

// ---- the timeline -----------------------------------------------------------------
const tl = {v0: 0, v1: Math.max(D.span, 1), lanes: []};
function laneSlots() {
  const task = taskOf(state.thread);
  return slotsOf(state.thread).filter((s) => D.bars[s] &&
    (task < 0 || (D.bar_tasks[s] || []).includes(task + 1)));
}
// whether bar i (its index in the slot's flat list / 5) is shown for the selection
function barShown(slot, i) {
  const task = taskOf(state.thread);
  return task < 0 || (D.bar_tasks[slot] || [])[i] === task + 1;
}
function drawTimeline() {
  const cv = $("timeline-canvas");
  const slots = laneSlots();
  const lanes = [];
  let y = 22;
  for (const s of slots) {
    const b = D.bars[s] || [];
    let maxDepth = 0;
    for (let i = 2; i < b.length; i += 5) if (b[i] > maxDepth && barShown(s, (i - 2) / 5)) maxDepth = b[i];
    const h = 16 + (b.length ? (maxDepth + 1) * BAR : BAR) + 6;
    lanes.push({slot: s, y: y, h: h, bars: b});
    y += h;
  }
  tl.lanes = lanes;
  const W = cv.clientWidth || 1200, H = Math.max(y, 60);
  const g = canvas2d(cv, W, H);
  const scale = W / (tl.v1 - tl.v0);
  // the time axis: about ten ticks at a round step
  const step = Math.pow(10, Math.floor(Math.log10((tl.v1 - tl.v0) / 8 || 1)));
  const tick = [1, 2, 5, 10].map((m) => m * step).find((s) => (tl.v1 - tl.v0) / s <= 10) || step * 10;
  g.fillStyle = "#666"; g.strokeStyle = "#e4e4e4";
  for (let t = Math.ceil(tl.v0 / tick) * tick; t <= tl.v1; t += tick) {
    const x = (t - tl.v0) * scale;
    g.beginPath(); g.moveTo(x + 0.5, 14); g.lineTo(x + 0.5, H); g.stroke();
    g.fillText(fmtNs(Math.round(t)).replace(/(\.\d*?)0+ /, "$1 ").replace(". ", " "), x + 3, 7);
  }
  let drawn = 0;
  for (const lane of lanes) {
    const t = threadOf.get(lane.slot);
    g.fillStyle = "#333";
    g.fillText(t ? threadLabel(t) : "slot " + lane.slot, 4, lane.y + 8);
    const b = lane.bars, top = lane.y + 16;
    const filled = new Map();     // depth -> the last pixel column drawn below a pixel
    for (let i = 0; i < b.length; i += 5) {
      const x = (b[i] - tl.v0) * scale, w = b[i + 1] * scale;
      if (x + w < 0 || x > W || !barShown(lane.slot, i / 5)) continue;
      const depth = b[i + 2], name = pathName[b[i + 3]];
      const by = top + depth * BAR;
      if (w < 1) {                  // below a pixel: one column for all that fall in it
        const col = Math.floor(x);
        if (filled.get(depth) === col) continue;
        filled.set(depth, col);
        g.fillStyle = matches(name) ? "#e040e0" : "#999";
        g.fillRect(col, by, 1, BAR - 1);
        drawn++;
        continue;
      }
      g.fillStyle = matches(name) ? "#e040e0" : hue(D.names[name]);
      const x0 = Math.max(x, 0), x1 = Math.min(x + w, W);
      g.fillRect(x0, by, Math.max(x1 - x0 - 0.5, 1), BAR - 1);
      if (!b[i + 4]) { g.fillStyle = "#a40"; g.fillRect(x1 - 3, by, 3, BAR - 1); }
      if (x1 - x0 > 30) {
        const label = D.names[name], room = Math.floor((x1 - x0 - 6) / 6.6);
        g.fillStyle = "#000";
        g.fillText(label.length > room ? label.slice(0, Math.max(room - 1, 1)) + "\u2026" : label, x0 + 3, by + BAR / 2);
      }
      drawn++;
    }
  }
  cv.dataset.drawn = drawn;
  let bars = 0;
  for (const s of slots) for (let i = 0; i < (D.bars[s] || []).length / 5; i++) bars += barShown(s, i);
  $("timeline-info").textContent =
    `${fmtNs(Math.round(tl.v0))} to ${fmtNs(Math.round(tl.v1))} of ${fmtNs(D.span)}: ${fmtInt(bars)} calls. Wheel to zoom, drag to pan, double-click to see it all.` +
    (D.bars_dropped && D.bar_floor ? ` The trace's ${fmtInt(D.bars_dropped)} calls shorter than ${fmtNs(D.bar_floor)} are inside their callers' bars.` : "");
}
function timelineAt(ev) {
  const cv = $("timeline-canvas"), r = cv.getBoundingClientRect();
  const x = ev.clientX - r.left, y = ev.clientY - r.top;
  const lane = tl.lanes.find((l) => y >= l.y + 16 && y < l.y + l.h);
  if (!lane) return null;
  const depth = Math.floor((y - lane.y - 16) / BAR);
  const t = tl.v0 + x * (tl.v1 - tl.v0) / (cv.clientWidth || 1);
  const slack = 2 * (tl.v1 - tl.v0) / (cv.clientWidth || 1);
  const b = lane.bars;
  for (let i = 0; i < b.length; i += 5)
    if (b[i + 2] === depth && b[i] - slack <= t && t <= b[i] + b[i + 1] + slack && barShown(lane.slot, i / 5))
      return {slot: lane.slot, start: b[i], dur: b[i + 1], path: b[i + 3], complete: b[i + 4]};
  return null;
}

// ---- the tables ---------------------------------------------------------------------
const FN_COLUMNS = [["Function", 0, "name"], ["Hits", 1], ["Total", 2, "ns"], ["Self", 3, "ns"],
  ["Avg", 4, "ns"], ["p50", 5, "ns"], ["p99", 6, "ns"], ["Max", 7, "ns"], ["Where", 8, "where"]];
const fnSort = {col: 2, asc: false};
const SHOWN = 2000;
function drawTable(table, columns, rows, sort, cell, info, what) {
  const thead = table.tHead, tbody = table.tBodies[0];
  thead.innerHTML = "<tr>" + columns.map((c, i) =>
    `<th data-col="${i}" class="${c[2] === "name" || c[2] === "where" ? "name" : ""}${sort.col === i ? " sorted" + (sort.asc ? " asc" : "") : ""}">${esc(c[0])}</th>`).join("") + "</tr>";
  const key = columns[sort.col][1];
  const value = (r) => typeof key === "function" ? key(r) : r[key];
  const shown = rows.filter((r) => !searchRe || searchRe.test(cell.name(r)));
  shown.sort((a, b) => {
    const x = value(a), y = value(b);
    const c = typeof x === "string" ? (x < y ? -1 : x > y ? 1 : 0) : x - y;
    return (sort.asc ? c : -c) || (cell.name(a) < cell.name(b) ? -1 : 1);
  });
  tbody.innerHTML = shown.slice(0, SHOWN).map((r) => cell.row(r)).join("");
  $(info).textContent = `${fmtInt(shown.length)} ${what}` + (searchRe ? " matching the search" : "") +
    (shown.length > SHOWN ? `; the first ${fmtInt(SHOWN)} shown` : "") + ". Click a column to sort by it.";
  thead.onclick = (ev) => {
    const th = ev.target.closest("th");
    if (!th) return;
    const i = +th.dataset.col;
    if (sort.col === i) sort.asc = !sort.asc; else { sort.col = i; sort.asc = columns[i][2] === "name" || columns[i][2] === "where"; }
    drawTable(table, columns, rows, sort, cell, info, what);
  };
}
const fnCell = {
  name: (r) => D.names[r[0]],
  row: (r) => "<tr" + (matches(r[0]) ? ' class="hit"' : "") + ">" + FN_COLUMNS.map((c) => {
    const v = r[c[1]];
    if (c[2] === "name") return `<td class="name" title="${esc(D.names[v])}">${esc(D.names[v])}</td>`;
    if (c[2] === "where") return `<td class="where">${esc(v)}</td>`;
    return `<td data-v="${v}">${c[2] === "ns" ? fmtNs(v) : fmtInt(v)}</td>`;
  }).join("") + "</tr>",
};
function drawFunctions() {
  drawTable($("function-table"), FN_COLUMNS, D.functions, fnSort, fnCell, "functions-info",
    D.functions_total > D.functions.length ? `of ${fmtInt(D.functions_total)} functions (the ${fmtInt(D.functions.length)} with the most time kept in this file)` : "functions");
}
// the changes: [function, hits a, b, total a, b, self a, b, p99 a, b, in a, in b];
// sorted as `fntrace diff` sorts: the largest change in self time first
const CH_COLUMNS = [["Function", 0, "name"], ["Hits base", 1], ["Hits new", 2],
  ["Self base", 5, "ns"], ["Self new", 6, "ns"], ["\u0394 self", (r) => Math.abs(r[6] - r[5]), "dns"],
  ["\u0394 self %", (r) => r[5] ? (r[6] - r[5]) / r[5] : Infinity, "pct"],
  ["Total base", 3, "ns"], ["Total new", 4, "ns"], ["p99 base", 7, "ns"], ["p99 new", 8, "ns"]];
const chSort = {col: 5, asc: false};
const chCell = {
  name: (r) => r[0],
  row: (r) => {
    const d = r[6] - r[5];
    const cls = !r[9] ? "new" : !r[10] ? "down" : Math.abs(d) < 0.05 * r[5] ? "" : d > 0 ? "up" : "down";
    const ns = (i) => `<td data-v="${r[i]}">${fmtNs(r[i])}</td>`;
    return `<tr><td class="name" title="${esc(r[0])}">${esc(r[0])}${!r[9] ? " (new)" : !r[10] ? " (gone)" : ""}</td>` +
      `<td data-v="${r[1]}">${fmtInt(r[1])}</td><td data-v="${r[2]}">${fmtInt(r[2])}</td>` + ns(5) + ns(6) +
      `<td class="${cls}" data-v="${d}">${(d > 0 ? "+" : "") + fmtNs(d)}</td>` +
      `<td class="${cls}">${r[5] ? (d > 0 ? "+" : "") + (100 * d / r[5]).toFixed(1) + "%" : "new"}</td>` +
      ns(3) + ns(4) + ns(7) + ns(8) + "</tr>";
  },
};
function drawChanges() {
  if (!D.diff) return;
  drawTable($("change-table"), CH_COLUMNS, D.diff.changes, chSort, chCell, "changes-info", "functions compared");
}

// ---- the tooltip --------------------------------------------------------------------
const tip = $("tip");
function showTip(ev, html) {
  if (!html) { tip.hidden = true; return; }
  tip.innerHTML = html;
  tip.hidden = false;
  const w = tip.offsetWidth, h = tip.offsetHeight;
  tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - w - 4) + "px";
  tip.style.top = Math.min(ev.clientY + 14, window.innerHeight - h - 4) + "px";
}
function fnLines(id) {
  const r = fnOf.get(id);
  if (!r) return "";
  return `<tr><td>function</td><td>${fmtInt(r[1])} calls, avg ${fmtNs(r[4])}, p99 ${fmtNs(r[6])}, max ${fmtNs(r[7])}</td></tr>`;
}
function nodeTip(n) {
  if (n.name < 0) return `<b>all</b><table><tr><td>calls</td><td>${fmtInt(n.calls)}</td></tr><tr><td>total</td><td>${fmtNs(n.total)}</td></tr></table>`;
  let html = `<b>${esc(D.names[n.name])}</b><br>${esc(whereOf(n.name))}<table>` +
    `<tr><td>here</td><td>${fmtInt(n.calls)} calls, total ${fmtNs(n.total)} (${pct(n.total, flame.root.total)}), self ${fmtNs(n.self)}, avg ${fmtNs(Math.floor(n.total / Math.max(n.calls, 1)))}</td></tr>` +
    fnLines(n.name);
  if (D.diff && state.thread === "all") {
    const base = D.diff.by_stack[n.path];
    html += base < 0 ? "<tr><td>base</td><td>not in the base run</td></tr>"
      : `<tr><td>base</td><td>total ${fmtNs(base)} \u2192 ${fmtNs(n.total)} (${base ? ((n.total - base) > 0 ? "+" : "") + (100 * (n.total - base) / base).toFixed(1) + "%" : "new"})</td></tr>`;
  }
  return html + "</table>";
}
function barTip(b) {
  const name = pathName[b.path];
  return `<b>${esc(D.names[name])}</b><br>${esc(whereOf(name))}<table>` +
    `<tr><td>this call</td><td>${fmtNs(b.dur)} at ${fmtNs(b.start)}${b.complete ? "" : " (no return in the trace)"}</td></tr>` +
    fnLines(name) + "</table>";
}

// ---- wiring ---------------------------------------------------------------------------
function show() {
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.view === state.view);
  for (const v of document.querySelectorAll(".view")) v.classList.toggle("active", v.id === state.view);
  if (state.view === "flame") drawFlame();
  else if (state.view === "timeline") drawTimeline();
  else if (state.view === "functions") drawFunctions();
  else if (state.view === "changes") drawChanges();
  showMatched();
  writeHash();
  document.body.dataset.ready = state.view;
}
function start() {
  readHash();
  setSearch(state.search);
  $("title").textContent = D.title + (D.diff ? `: ${D.diff.base} \u2192 ${D.diff.new}` : "");
  const threads = new Set(D.threads.map((t) => t.tid)).size;
  $("summary").textContent = `${D.file}: ${D.tracer}, ${fmtInt(D.calls)} calls of ${fmtInt(D.functions_total)} functions on ${threads} thread${threads === 1 ? "" : "s"}, ${fmtNs(D.span)}` +
    (D.argv.length ? ` \u2014 ${D.argv.join(" ")}` : "");
  const warn = [];
  if (D.lost) warn.push(`${fmtInt(D.lost)} events were lost while recording: the calls around them are cut.`);
  if (D.incomplete) warn.push(`${fmtInt(D.incomplete)} calls have no return in the trace: they run to where their thread's trace ends.`);
  if (D.tracer === "function") warn.push("A function tracer trace has no durations: see the function table's hits.");
  $("warnings").textContent = warn.join(" ");
  const sel = $("thread");
  const pids = [...new Set(D.threads.map((t) => t.pid))];
  sel.innerHTML = `<option value="all">all threads</option>` +
    (pids.length > 1 ? pids.map((p) => `<option value="p${p}">process ${p}</option>`).join("") : "") +
    (D.tasks || []).map((t, i) => `<option value="t${i}">task ${esc(t.name)}</option>`).join("") +
    D.threads.map((t) => `<option value="${t.slot}">${esc(threadLabel(t))}</option>`).join("");
  sel.value = state.thread;
  sel.onchange = () => { state.thread = sel.value; state.zoom = ""; flame = null; show(); };
  $("search").value = state.search;
  $("search").oninput = () => { setSearch($("search").value); show(); };
  $("changes-tab").hidden = !D.diff;
  for (const b of document.querySelectorAll(".tab")) b.onclick = () => { state.view = b.dataset.view; show(); };
  const fc = $("flame-canvas");
  fc.onmousemove = (ev) => { const n = flameAt(ev); showTip(ev, n && nodeTip(n)); };
  fc.onmouseleave = () => showTip(null, "");
  fc.onclick = (ev) => {
    const n = flameAt(ev);
    if (!n) return;
    state.zoom = n === flame.focus || n.name < 0 ? (n.up && n !== flame.root ? nameOf(n.up.name) : "") : D.names[n.name];
    if (state.zoom === "all") state.zoom = "";
    show();
  };
  const tc = $("timeline-canvas");
  let drag = null;
  tc.onmousemove = (ev) => {
    if (drag) {
      const dt = (ev.clientX - drag.x) * (tl.v1 - tl.v0) / (tc.clientWidth || 1);
      tl.v0 = drag.v0 - dt; tl.v1 = drag.v1 - dt; drawTimeline(); return;
    }
    const b = timelineAt(ev); showTip(ev, b && barTip(b));
  };
  tc.onmousedown = (ev) => { drag = {x: ev.clientX, v0: tl.v0, v1: tl.v1}; };
  window.addEventListener("mouseup", () => { drag = null; });
  tc.onmouseleave = () => showTip(null, "");
  tc.onwheel = (ev) => {
    ev.preventDefault();
    const r = tc.getBoundingClientRect(), f = (ev.clientX - r.left) / (tc.clientWidth || 1);
    const at = tl.v0 + f * (tl.v1 - tl.v0);
    const k = ev.deltaY < 0 ? 0.8 : 1.25;
    const w = Math.max((tl.v1 - tl.v0) * k, 10);
    tl.v0 = at - f * w; tl.v1 = tl.v0 + w; drawTimeline();
  };
  tc.ondblclick = () => { tl.v0 = 0; tl.v1 = Math.max(D.span, 1); drawTimeline(); };
  window.addEventListener("resize", () => show());
  window.addEventListener("hashchange", () => { readHash(); setSearch(state.search); $("search").value = state.search; flame = null; show(); });
  show();
}
start();
// how long the page took to open and draw (benchmarks/html_report.py reads it)
document.body.dataset.loadMs = Math.round(performance.now());
})();
