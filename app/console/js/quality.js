// Quality: where the scores of recent lookups fall (θ and the verifier cut-off τ marked), the
// calibration curve with the current point, live precision from shadow checks, and setting θ
// or the precision target (global, per tenant, per model) with a preview of the expected hit
// rate before saving.

import { barChart, lineChart, meter } from "./charts.js";
import { card, clear, debounce, fixed, h, message, num, pct } from "./dom.js";

export const title = "Quality";
const POLL_MS = 5000;
const SERVED = "#2563eb";
const MISSED = "#9ca3af";
const THETA = "#c2410c";
const TAU = "#7c3aed";
const PROPOSED = "#db2777";

function histogram(el, bins, { label, marker, markerLabel, color, empty }) {
  const used = bins.filter((b) => b.served || b.missed);
  const lo = Math.min(0.5, ...used.map((b) => b.lo), marker ?? 1);
  barChart(el, {
    label,
    height: 200,
    x: { min: Math.floor(lo * 10) / 10, max: 1, label, format: (v) => v.toFixed(2) },
    y: { label: "lookups", format: (v) => num(v), integer: true },
    series: [{ name: "served", color: SERVED }, { name: "not served", color: MISSED }],
    bars: bins.map((b) => ({ x0: b.lo, x1: b.hi, values: [b.served, b.missed], label: `${b.lo.toFixed(3)}–${b.hi.toFixed(3)}` })),
    markers: marker === null || marker === undefined ? [] : [{ x: marker, label: `${markerLabel} ${marker.toFixed(3)}`, color, id: markerLabel }],
    empty,
  });
}

function calibrationChart(el, cal, proposedTau) {
  const rows = cal.table.filter((r) => r.tau !== null);
  const active = rows.find((r) => Math.abs(r.tau - cal.active_tau) < 1e-9);
  const dots = [];
  if (active) {
    dots.push({ x: active.tau, y: active.precision, label: `current: precision ${pct(active.precision)} at τ ${fixed(active.tau)}`, color: THETA, id: "current-precision" });
    dots.push({ x: active.tau, y: active.hit_rate, label: `current: hit rate ${pct(active.hit_rate)} at τ ${fixed(active.tau)}`, color: THETA, id: "current-hit-rate" });
  }
  const markers = [{ x: cal.active_tau, label: "current τ", color: THETA, id: "current" }];
  if (proposedTau !== null && proposedTau !== undefined && Math.abs(proposedTau - cal.active_tau) > 1e-9) {
    markers.push({ x: proposedTau, label: "proposed", color: PROPOSED, id: "proposed" });
  }
  lineChart(el, {
    label: "Calibration curve: precision and hit rate against the verifier cut-off",
    height: 240,
    x: { type: "linear", label: "verifier cut-off τ (set through the precision target)", format: (v) => v.toFixed(2) },
    y: { min: 0, max: 1, label: "share", format: (v) => `${Math.round(v * 100)}%` },
    series: [
      { name: "precision", color: "#0f766e", points: rows.map((r) => [r.tau, r.precision]) },
      { name: "hit rate (duplicates served)", color: SERVED, points: rows.map((r) => [r.tau, r.hit_rate]) },
    ],
    markers,
    dots,
  });
}

function shadowCard(shadow) {
  if (!shadow) return message("Shadow checks are off (DEJA_SEMANTIC_SHADOW_RATE = 0): no live precision estimate.", "warn");
  const total = Object.values(shadow.tenants).reduce((a, t) => ({ agree: a.agree + t.agree, disagree: a.disagree + t.disagree }), { agree: 0, disagree: 0 });
  const decided = total.agree + total.disagree;
  const bands = Object.entries(shadow.bands);
  return h(
    "div",
    { id: "live-precision" },
    h("div", { class: "kpis compact" },
      h("div", { class: "kpi" }, h("span", { class: "kpi-label" }, "Live precision"), h("span", { class: "kpi-value" }, decided ? pct(total.agree / decided) : "–"), h("span", { class: "kpi-sub" }, `${num(decided)} checked hits agree/disagree`)),
      h("div", { class: "kpi" }, h("span", { class: "kpi-label" }, "Sample rate"), h("span", { class: "kpi-value" }, pct(shadow.rate)), h("span", { class: "kpi-sub" }, `${num(shadow.checked)} checks started`)),
    ),
    bands.length
      ? h("div", { class: "bands" }, bands.map(([name, b]) => h("div", { class: "band" }, h("span", { class: "band-name" }, `similarity ${name}`), meter(b.estimated_precision, { color: "#0f766e", label: `${b.estimated_precision === null ? "–" : pct(b.estimated_precision)} (${b.agree}/${b.agree + b.disagree})` }))))
      : h("p", { class: "note" }, "No semantic hit has been re-asked yet."),
  );
}

function levelsTable(sem, onRemove) {
  const rows = [];
  const add = (what, level, name, value) => rows.push(h("tr", {}, h("td", {}, what), h("td", {}, level), h("td", {}, name || "—"), h("td", { class: "num" }, fixed(value, 3)), h("td", {}, level === "global" ? "" : h("button", { class: "ghost small", type: "button", onclick: () => onRemove(what, level, name) }, "remove"))));
  add("precision", "global", "", sem.precision.global);
  for (const [k, v] of Object.entries(sem.precision.tenants)) add("precision", "tenant", k, v);
  for (const [k, v] of Object.entries(sem.precision.models)) add("precision", "model", k, v);
  add("θ", "global", "", sem.theta.global);
  for (const [k, v] of Object.entries(sem.theta.tenants)) add("θ", "tenant", k, v);
  for (const [k, v] of Object.entries(sem.theta.models)) add("θ", "model", k, v);
  return h("table", { class: "table", id: "levels" }, h("thead", {}, h("tr", {}, h("th", {}, "setting"), h("th", {}, "level"), h("th", {}, "name"), h("th", { class: "num" }, "value"), h("th", {}, ""))), h("tbody", {}, rows));
}

// {"precision": {"tenants": {"acme": 0.95}}} and the like: the body PUT /admin/threshold takes.
function changeOf(what, level, name, value) {
  const inner = level === "global" ? { global: value } : { [level === "tenant" ? "tenants" : "models"]: { [name]: value } };
  return what === "precision" ? { precision: inner } : inner;
}

export function mount(root, { api, toast }) {
  const simChart = h("div", { class: "chart", id: "chart-similarity" });
  const scoreChart = h("div", { class: "chart", id: "chart-score" });
  const calChart = h("div", { class: "chart", id: "chart-calibration" });
  const shadowBox = h("div", {});
  const levelsBox = h("div", {});
  const status = h("p", { class: "note", id: "quality-status" }, "Loading…");
  const histNote = h("p", { class: "note" }, "");

  const what = h("select", { id: "setting-what" }, h("option", { value: "precision" }, "precision target"), h("option", { value: "theta" }, "θ (cosine floor)"));
  const level = h("select", { id: "setting-level" }, h("option", { value: "global" }, "global"), h("option", { value: "tenant" }, "one tenant"), h("option", { value: "model" }, "one model"));
  const name = h("input", { id: "setting-name", type: "text", placeholder: "tenant or model name", spellcheck: "false" });
  const range = h("input", { id: "setting-range", type: "range", min: "0.5", max: "1", step: "0.005" });
  const value = h("input", { id: "setting-value", type: "number", min: "0", max: "1", step: "0.005", inputmode: "decimal" });
  const previewBox = h("div", { id: "preview", class: "preview", "aria-live": "polite" }, h("p", { class: "note" }, "Move the value to see what it would serve."));
  const save = h("button", { id: "setting-save", type: "button", disabled: true }, "Save");
  const nameRow = h("label", { class: "field", hidden: true }, "Name", name);

  let sem = null;
  let proposedTau = null;
  let stopped = false;
  let timer = null;

  root.append(
    h("div", { class: "page-head" }, h("h1", {}, "Quality"), status),
    h("div", { class: "grid two" },
      card("Similarity of recent lookups", h("div", {}, simChart, histNote), { note: "Best cached candidate's cosine similarity per lookup; θ is the candidates' floor." }),
      card("Verifier decision score", scoreChart, { note: "Best candidate's decision score per verified lookup; τ is the cut-off for the precision target." }),
      card("Calibration curve", calChart, { note: "Measured on held-out labelled pairs (calibration.json): precision and hit rate at each cut-off; the dot is the current setting." }),
      card("Live precision", shadowBox, { note: "Shadow checks: a sample of semantic hits re-asked to the model and compared." }),
    ),
    card(
      "Set θ or the precision target",
      h("div", { class: "setter" },
        h("div", { class: "form-row" },
          h("label", { class: "field" }, "Setting", what),
          h("label", { class: "field" }, "Level", level),
          nameRow,
        ),
        h("div", { class: "form-row" }, h("label", { class: "field grow" }, "Value", range), h("label", { class: "field" }, "", value), save),
        previewBox,
        h("h3", {}, "Current values"),
        levelsBox,
      ),
      { note: "Nothing changes until you save; the preview replays the recent lookups of this process under the new value.", cls: "wide" },
    ),
  );

  function resolved() {
    if (!sem) return null;
    const levels = what.value === "precision" ? sem.precision : sem.theta;
    const n = name.value.trim();
    if (level.value === "tenant" && n in levels.tenants) return levels.tenants[n];
    if (level.value === "model" && n in levels.models) return levels.models[n];
    return levels.global;
  }

  function syncBounds() {
    const isPrecision = what.value === "precision";
    for (const el of [range, value]) {
      el.min = isPrecision ? "0.5" : "0.3";
      el.max = "1";
      el.step = isPrecision ? "0.01" : "0.005";
    }
    nameRow.hidden = level.value === "global";
    const v = resolved();
    if (v !== null) {
      range.value = String(v);
      value.value = String(v);
    }
    save.disabled = true;
    clear(previewBox, h("p", { class: "note" }, "Move the value to see what it would serve."));
    proposedTau = null;
  }

  const runPreview = debounce(async () => {
    const v = Number(value.value);
    if (!Number.isFinite(v)) return;
    if (level.value !== "global" && !name.value.trim()) {
      clear(previewBox, message("Name the tenant or model first.", "warn"));
      return;
    }
    const change = changeOf(what.value, level.value, name.value.trim(), v);
    const q = level.value === "tenant" ? `?tenant=${encodeURIComponent(name.value.trim())}` : level.value === "model" ? `?model=${encodeURIComponent(name.value.trim())}` : "";
    previewBox.dataset.state = "loading";
    try {
      const p = await api.post(`/admin/threshold/preview${q}`, change);
      renderPreview(p, v);
      save.disabled = false;
    } catch (err) {
      clear(previewBox, message(err.message, "error"));
      previewBox.dataset.state = "error";
    }
  }, 150);

  function renderPreview(p, v) {
    const cur = p.current;
    const pro = p.proposed;
    const rows = [
      h("div", { class: "preview-line", id: "preview-traffic" },
        h("strong", {}, "Recent traffic: "),
        p.lookups
          ? [`current ${pct(cur.hit_rate)} → `, h("span", { class: "proposed", id: "preview-proposed" }, `proposed ${pct(pro.hit_rate)}`), ` of the last ${num(p.lookups)} semantic lookups`, pro.unknown ? ` (${num(pro.unknown)} never verified, not counted as hits)` : ""]
          : h("span", { id: "preview-proposed" }, "no semantic lookups recorded yet in this process"),
      ),
    ];
    if (p.calibration) {
      const c = p.calibration.proposed;
      proposedTau = c.tau;
      rows.push(h("div", { class: "preview-line", id: "preview-calibration" }, h("strong", {}, "Calibration: "), c.tau === null ? `a ${pct(c.target, 0)} target was never reached on the calibration pairs: no semantic hits` : `target ${pct(c.target, 0)} → τ ${fixed(c.tau)}, hit rate ${pct(c.hit_rate)} of duplicates on the held-out pairs (now ${pct(p.calibration.current.hit_rate)})`));
    }
    if (what.value === "theta") rows.push(h("div", { class: "preview-line" }, h("strong", {}, "θ: "), `${fixed(p.theta.current)} → ${fixed(p.theta.proposed)}`));
    clear(previewBox, rows);
    previewBox.dataset.state = "ready";
    previewBox.dataset.value = String(v);
    previewBox.dataset.current = String(cur.hit_rate);
    previewBox.dataset.proposed = String(pro.hit_rate);
    if (sem && sem.calibration) calibrationChart(calChart, sem.calibration, proposedTau);
  }

  async function saveSetting() {
    const v = Number(value.value);
    const change = changeOf(what.value, level.value, name.value.trim(), v);
    save.disabled = true;
    try {
      await api.put("/admin/threshold", change);
      toast(`Saved: ${what.value === "precision" ? "precision target" : "θ"} ${level.value === "global" ? "(global)" : `for ${level.value} ${name.value.trim()}`} = ${v}`);
      await load();
    } catch (err) {
      toast(err.message, "error");
      save.disabled = false;
    }
  }

  async function remove(w, lvl, n) {
    const key = lvl === "tenant" ? "tenants" : "models";
    const change = w === "precision" ? { precision: { [key]: { [n]: null } } } : { [key]: { [n]: null } };
    try {
      await api.put("/admin/threshold", change);
      toast(`Removed the ${w} override for ${lvl} ${n}`);
      await load();
    } catch (err) {
      toast(err.message, "error");
    }
  }

  for (const el of [what, level]) el.addEventListener("change", syncBounds);
  name.addEventListener("input", () => { syncBounds(); });
  range.addEventListener("input", () => { value.value = range.value; runPreview(); });
  value.addEventListener("input", () => { range.value = value.value; runPreview(); });
  save.addEventListener("click", saveSetting);

  async function load() {
    const [s, lk] = await Promise.all([api.get("/admin/semantic"), api.get("/admin/semantic/lookups")]);
    if (stopped) return;
    const first = sem === null;
    sem = s;
    if (!s.enabled) {
      status.textContent = "The semantic layer is off on this gateway (DEJA_SEMANTIC_ENABLED).";
    } else {
      status.textContent = `Verifier: ${s.verifier ? s.verifier.model_id : "off (cosine alone at θ)"} · precision target ${fixed(s.precision.global, 2)} · θ ${fixed(s.theta.global, 3)} · updated ${new Date().toLocaleTimeString("en-GB")}`;
    }
    histogram(simChart, lk.similarity, { label: "cosine similarity", marker: lk.theta, markerLabel: "θ", color: THETA, empty: "no semantic lookups yet" });
    histogram(scoreChart, lk.score, { label: "decision score", marker: lk.tau, markerLabel: "τ", color: TAU, empty: lk.verified ? "no verified lookups yet" : "the verifier is off" });
    histNote.textContent = `${num(lk.lookups)} recent lookups, ${num(lk.no_candidate)} found no cached question in scope.`;
    if (s.calibration) calibrationChart(calChart, s.calibration, proposedTau);
    else clear(calChart, message("No calibration table: the verifier is off.", "warn"));
    clear(shadowBox, shadowCard(s.shadow));
    clear(levelsBox, levelsTable(s, remove));
    if (first) syncBounds();
  }

  async function poll() {
    try {
      await load();
    } catch (err) {
      if (!stopped) status.textContent = `Update failed: ${err.message}`;
    }
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  }
  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
