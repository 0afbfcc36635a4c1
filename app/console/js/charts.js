// Charts drawn as SVG from the admin API's JSON: a line chart and a (stacked) bar chart, with
// axes, ticks, labels, a legend, vertical markers (θ, τ) and highlighted points. No library:
// the console works offline and these two shapes are all it needs.

const NS = "http://www.w3.org/2000/svg";
const MARGIN = { top: 14, right: 24, bottom: 40, left: 52 };
// Half the width of a tick label in px (11 px sans-serif, ~6.2 px per character).
const halfLabel = (text) => String(text).length * 3.1;

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function title(text) {
  return s("title", {}, text);
}

// "Nice" tick values covering [lo, hi].
export function ticks(lo, hi, count = 5) {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  if (hi === lo) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => raw <= st) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toFixed(10));
  return out;
}

function timeTicks(lo, hi, count = 5) {
  const span = hi - lo;
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200];
  const step = steps.find((st) => span / st <= count) || 3600 * Math.ceil(span / count / 3600);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(v);
  return out;
}

function clockLabel(t) {
  return new Date(t * 1000).toLocaleTimeString("en-GB", { hour12: false });
}

const rendered = new WeakMap();

// Draw into `container` now and again whenever it is resized.
function mount(container, opts, draw) {
  const paint = () => {
    const width = Math.max(280, container.clientWidth || 600);
    const height = opts.height || 220;
    const svg = s("svg", {
      width,
      height,
      viewBox: `0 0 ${width} ${height}`,
      role: "img",
      "aria-label": opts.label || "chart",
      class: "chart-svg",
    });
    draw(svg, width, height);
    container.replaceChildren(svg);
    if (opts.legend !== false && opts.series && opts.series.length > 1) container.append(legend(opts.series));
  };
  const state = rendered.get(container);
  if (state) state.paint = paint;
  else {
    const entry = { paint, width: container.clientWidth };
    rendered.set(container, entry);
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(() => {
        if (Math.abs(container.clientWidth - entry.width) > 4) {
          entry.width = container.clientWidth;
          entry.paint();
        }
      }).observe(container);
    }
  }
  paint();
}

function legend(series) {
  const div = document.createElement("div");
  div.className = "legend";
  for (const sr of series) {
    const item = document.createElement("span");
    const sw = document.createElement("i");
    sw.style.background = sr.color;
    item.append(sw, document.createTextNode(sr.name));
    div.append(item);
  }
  return div;
}

function scales(opts, width, height, yMaxDefault) {
  const x = opts.x || {};
  const y = opts.y || {};
  const x0 = x.min;
  const x1 = x.max === x.min ? x.min + 1 : x.max;
  const y0 = y.min ?? 0;
  let y1 = y.max ?? yMaxDefault;
  if (!(y1 > y0)) y1 = y0 + 1;
  const pw = width - MARGIN.left - MARGIN.right;
  const ph = height - MARGIN.top - MARGIN.bottom;
  return {
    sx: (v) => MARGIN.left + ((v - x0) / (x1 - x0)) * pw,
    sy: (v) => MARGIN.top + ph - ((v - y0) / (y1 - y0)) * ph,
    x0, x1, y0, y1, pw, ph,
  };
}

function axes(svg, sc, opts, width, height) {
  const x = opts.x || {};
  const y = opts.y || {};
  const g = s("g", { class: "axes" });
  const fy = y.format || ((v) => String(v));
  const yt = ticks(sc.y0, sc.y1, opts.yTicks || 4).filter((v) => !y.integer || Number.isInteger(v));
  for (const v of yt) {
    const py = sc.sy(v);
    g.append(s("line", { x1: MARGIN.left, x2: width - MARGIN.right, y1: py, y2: py, class: "grid" }));
    g.append(s("text", { x: MARGIN.left - 6, y: py + 4, "text-anchor": "end", class: "tick" }, fy(v)));
  }
  const fx = x.format || (x.type === "time" ? clockLabel : (v) => String(v));
  const xt = x.type === "time" ? timeTicks(sc.x0, sc.x1, Math.max(2, Math.floor(sc.pw / 90))) : ticks(sc.x0, sc.x1, Math.max(2, Math.floor(sc.pw / 70)));
  const base = height - MARGIN.bottom;
  g.append(s("line", { x1: MARGIN.left, x2: width - MARGIN.right, y1: base, y2: base, class: "axis" }));
  g.append(s("line", { x1: MARGIN.left, x2: MARGIN.left, y1: MARGIN.top, y2: base, class: "axis" }));
  for (const v of xt) {
    const px = sc.sx(v);
    const text = fx(v);
    // A label that would run past either edge is anchored to it instead of centred (a centred
    // "18:56:05" at the right edge lost its last character).
    let anchor = "middle";
    if (px + halfLabel(text) > width - 2) anchor = "end";
    else if (px - halfLabel(text) < 2) anchor = "start";
    g.append(s("line", { x1: px, x2: px, y1: base, y2: base + 4, class: "axis" }));
    g.append(s("text", { x: px, y: base + 16, "text-anchor": anchor, class: "tick" }, text));
  }
  if (x.label) g.append(s("text", { x: MARGIN.left + sc.pw / 2, y: height - 4, "text-anchor": "middle", class: "axis-label" }, x.label));
  if (y.label) {
    g.append(s("text", { x: 12, y: MARGIN.top + sc.ph / 2, "text-anchor": "middle", transform: `rotate(-90 12 ${MARGIN.top + sc.ph / 2})`, class: "axis-label" }, y.label));
  }
  svg.append(g);
}

function markers(svg, sc, list, height) {
  for (const m of list || []) {
    if (m.x === null || m.x === undefined || !Number.isFinite(m.x)) continue;
    if (m.x < sc.x0 || m.x > sc.x1) continue;
    const px = sc.sx(m.x);
    const g = s("g", { class: `marker ${m.cls || ""}`, "data-marker": m.id || m.label });
    g.append(s("line", { x1: px, x2: px, y1: MARGIN.top, y2: height - MARGIN.bottom, stroke: m.color || "#c2410c", "stroke-dasharray": "5 3", "stroke-width": 2 }));
    const anchor = px > MARGIN.left + sc.pw * 0.8 ? "end" : "start";
    g.append(s("text", { x: px + (anchor === "end" ? -4 : 4), y: MARGIN.top + 10, "text-anchor": anchor, class: "marker-label", fill: m.color || "#c2410c" }, m.label));
    g.append(title(m.title || m.label));
    svg.append(g);
  }
}

// opts: {label, height, x: {min, max, type, label, format}, y: {min, max, label, format},
//        series: [{name, color, points: [[x, y|null], ...]}], markers: [{x, label, color}],
//        dots: [{x, y, label, color}]}
export function lineChart(container, opts) {
  mount(container, opts, (svg, width, height) => {
    const all = opts.series.flatMap((sr) => sr.points.filter((p) => p[1] !== null && p[1] !== undefined));
    const xs = all.map((p) => p[0]);
    const o = { ...opts, x: { ...opts.x } };
    o.x.min = opts.x.min ?? (xs.length ? Math.min(...xs) : 0);
    o.x.max = opts.x.max ?? (xs.length ? Math.max(...xs) : 1);
    const yMax = Math.max(0, ...all.map((p) => p[1]));
    const sc = scales(o, width, height, yMax * 1.1 || 1);
    axes(svg, sc, o, width, height);
    if (!all.length) {
      svg.append(s("text", { x: MARGIN.left + sc.pw / 2, y: MARGIN.top + sc.ph / 2, "text-anchor": "middle", class: "empty" }, opts.empty || "no data yet"));
    }
    markers(svg, sc, opts.markers, height);
    for (const sr of opts.series) {
      let d = "";
      let pen = false;
      for (const [x, y] of sr.points) {
        if (y === null || y === undefined) {
          pen = false;
          continue;
        }
        d += `${pen ? "L" : "M"}${sc.sx(x).toFixed(1)},${sc.sy(y).toFixed(1)}`;
        pen = true;
      }
      const g = s("g", { class: "series", "data-series": sr.name });
      g.append(s("path", { d, fill: "none", stroke: sr.color, "stroke-width": 2, "stroke-dasharray": sr.dashed ? "6 4" : null }));
      const fy = (opts.y && opts.y.format) || String;
      const fx = (opts.x && opts.x.format) || (opts.x.type === "time" ? clockLabel : String);
      for (const [x, y] of sr.points) {
        if (y === null || y === undefined) continue;
        const c = s("circle", { cx: sc.sx(x), cy: sc.sy(y), r: sr.points.length > 60 ? 1.5 : 3, fill: sr.color, class: "pt" });
        c.append(title(`${sr.name}: ${fy(y)} at ${fx(x)}`));
        g.append(c);
      }
      svg.append(g);
    }
    for (const dot of opts.dots || []) {
      if (!Number.isFinite(dot.x) || !Number.isFinite(dot.y)) continue;
      const g = s("g", { class: "dot", "data-dot": dot.id || dot.label });
      g.append(s("circle", { cx: sc.sx(dot.x), cy: sc.sy(dot.y), r: 6, fill: "#fff", stroke: dot.color || "#111", "stroke-width": 3 }));
      g.append(title(dot.label));
      svg.append(g);
    }
  });
}

// opts: {label, height, x: {min, max, type, label, format}, y: {label, format},
//        series: [{name, color}], bars: [{x0, x1, values: [..per series..], label}],
//        markers: [{x, label, color}]}
export function barChart(container, opts) {
  mount(container, opts, (svg, width, height) => {
    const bars = opts.bars;
    const o = { ...opts, x: { ...opts.x } };
    o.x.min = opts.x.min ?? (bars.length ? Math.min(...bars.map((b) => b.x0)) : 0);
    o.x.max = opts.x.max ?? (bars.length ? Math.max(...bars.map((b) => b.x1)) : 1);
    const top = Math.max(0, ...bars.map((b) => b.values.reduce((a, v) => a + (v || 0), 0)));
    const sc = scales(o, width, height, top ? top * 1.1 : 1);
    axes(svg, sc, o, width, height);
    if (!top) {
      svg.append(s("text", { x: MARGIN.left + sc.pw / 2, y: MARGIN.top + sc.ph / 2, "text-anchor": "middle", class: "empty" }, opts.empty || "no data yet"));
    }
    const g = s("g", { class: "bars" });
    const fy = (opts.y && opts.y.format) || String;
    for (const b of bars) {
      if (b.x1 < sc.x0 || b.x0 > sc.x1) continue;
      let acc = 0;
      const x0 = sc.sx(Math.max(b.x0, sc.x0));
      const w = Math.max(1, sc.sx(Math.min(b.x1, sc.x1)) - x0 - 1);
      b.values.forEach((v, i) => {
        if (!v) return;
        const y0 = sc.sy(acc);
        const y1 = sc.sy(acc + v);
        acc += v;
        const sr = opts.series[i];
        const r = s("rect", { x: x0, y: y1, width: w, height: Math.max(0.5, y0 - y1), fill: sr.color, class: "bar", "data-series": sr.name });
        r.append(title(`${b.label || ""} ${sr.name}: ${fy(v)}`.trim()));
        g.append(r);
      });
    }
    svg.append(g);
    markers(svg, sc, opts.markers, height);
  });
}

// A horizontal meter (0..1) for tables and cards: a bar plus its value.
export function meter(value, { max = 1, min = 0, color = "#2563eb", label = null, mark = null, markTitle = "" } = {}) {
  const wrap = document.createElement("span");
  wrap.className = "meter";
  const bar = document.createElement("span");
  bar.className = "meter-bar";
  const fill = document.createElement("span");
  fill.className = "meter-fill";
  const scale = (v) => Math.max(0, Math.min(1, (v - min) / (max - min)));
  const frac = value === null || value === undefined ? 0 : scale(value);
  fill.style.width = `${(frac * 100).toFixed(1)}%`;
  fill.style.background = color;
  bar.append(fill);
  if (mark !== null && mark !== undefined) {
    // A tick at a cut-off (θ or τ), so the distance still to go is visible.
    const tick = document.createElement("span");
    tick.className = "meter-mark";
    tick.style.left = `calc(${(scale(mark) * 100).toFixed(1)}% - 1px)`;
    tick.title = markTitle;
    bar.append(tick);
  }
  const text = document.createElement("span");
  text.className = "meter-text";
  text.textContent = label ?? (value === null || value === undefined ? "–" : `${(value * 100).toFixed(1)}%`);
  wrap.append(bar, text);
  return wrap;
}
