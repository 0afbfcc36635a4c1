// Quality: where the scores of recent lookups fall (θ and the verifier cut-off τ marked), the
// calibration curve with the current point, live precision from shadow checks, and setting θ
// or the precision target (global, per tenant, per model) with a preview of the expected hit
// rate, and the pairs it would start or stop serving (to label), before saving.

import { barChart, lineChart, meter } from "./charts.js";
import { card, clear, debounce, fixed, h, message, num, pct } from "./dom.js";
import { flipLists } from "./labels.js";

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

const IDLE = "Move the value to see what it would serve.";

function previewLines(p, isTheta) {
  const cur = p.current;
  const pro = p.proposed;
  const lines = [
    h("div", { class: "preview-line", id: "preview-traffic" },
      h("strong", {}, "Recent traffic: "),
      p.lookups
        ? [`current ${pct(cur.hit_rate)} → `, h("span", { class: "proposed", id: "preview-proposed" }, `proposed ${pct(pro.hit_rate)}`), ` of the last ${num(p.lookups)} semantic lookups`, pro.unknown ? ` (${num(pro.unknown)} never verified, not counted as hits)` : ""]
        : h("span", { id: "preview-proposed" }, "no semantic lookups recorded yet in this process"),
    ),
  ];
  if (p.calibration) {
    const c = p.calibration.proposed;
    const text = c.tau === null
      ? `a ${pct(c.target, 0)} target was never reached on the calibration pairs: no semantic hits`
      : `target ${pct(c.target, 0)} → τ ${fixed(c.tau)}, hit rate ${pct(c.hit_rate)} of duplicates on the held-out pairs (now ${pct(p.calibration.current.hit_rate)})`;
    lines.push(h("div", { class: "preview-line", id: "preview-calibration" }, h("strong", {}, "Calibration: "), text));
  }
  if (isTheta) lines.push(h("div", { class: "preview-line" }, h("strong", {}, "θ: "), `${fixed(p.theta.current)} → ${fixed(p.theta.proposed)}`));
  return lines;
}

// The form that sets θ or the precision target, with its preview.
class Setter {
  constructor(api, toast, onSaved, onPreview) {
    this.api = api;
    this.ctx = { api, toast };
    this.toast = toast;
    this.onSaved = onSaved;
    this.onPreview = onPreview;
    this.sem = null;
    this.what = h("select", { id: "setting-what" }, h("option", { value: "precision" }, "precision target"), h("option", { value: "theta" }, "θ (cosine floor)"));
    this.level = h("select", { id: "setting-level" }, h("option", { value: "global" }, "global"), h("option", { value: "tenant" }, "one tenant"), h("option", { value: "model" }, "one model"));
    this.name = h("input", { id: "setting-name", type: "text", placeholder: "tenant or model name", spellcheck: "false" });
    this.range = h("input", { id: "setting-range", type: "range", min: "0.5", max: "1", step: "0.005" });
    this.value = h("input", { id: "setting-value", type: "number", min: "0", max: "1", step: "0.005", inputmode: "decimal" });
    this.preview = h("div", { id: "preview", class: "preview", "aria-live": "polite" }, h("p", { class: "note" }, IDLE));
    this.save = h("button", { id: "setting-save", type: "button", disabled: true }, "Save");
    this.nameRow = h("label", { class: "field", hidden: true }, "Name", this.name);
    this.levels = h("div", {});
    const later = debounce(() => this.runPreview(), 150);
    for (const el of [this.what, this.level]) el.addEventListener("change", () => this.reset());
    this.name.addEventListener("input", () => this.reset());
    this.edited = false;  // a value typed before the first settings arrive is kept
    this.range.addEventListener("input", () => { this.edited = true; this.value.value = this.range.value; later(); });
    this.value.addEventListener("input", () => { this.edited = true; this.range.value = this.value.value; later(); });
    this.save.addEventListener("click", () => this.store());
  }

  element() {
    return h("div", { class: "setter" },
      h("div", { class: "form-row" }, h("label", { class: "field" }, "Setting", this.what), h("label", { class: "field" }, "Level", this.level), this.nameRow),
      h("div", { class: "form-row" }, h("label", { class: "field grow" }, "Value", this.range), h("label", { class: "field" }, "", this.value), this.save),
      this.preview,
      h("h3", {}, "Current values"),
      this.levels,
    );
  }

  update(sem) {
    const first = this.sem === null;
    this.sem = sem;
    clear(this.levels, levelsTable(sem, (w, l, n) => this.removeOverride(w, l, n)));
    if (first && !this.edited) this.reset();
  }

  scope() {
    return { what: this.what.value, level: this.level.value, name: this.name.value.trim() };
  }

  // The value in force at the chosen level: its override, else the global value.
  resolved() {
    const { what, level, name } = this.scope();
    const levels = what === "precision" ? this.sem.precision : this.sem.theta;
    if (level === "tenant" && name in levels.tenants) return levels.tenants[name];
    if (level === "model" && name in levels.models) return levels.models[name];
    return levels.global;
  }

  reset() {
    const isPrecision = this.what.value === "precision";
    for (const el of [this.range, this.value]) {
      el.min = isPrecision ? "0.5" : "0.3";
      el.max = "1";
      el.step = isPrecision ? "0.01" : "0.005";
    }
    this.nameRow.hidden = this.level.value === "global";
    if (this.sem) {
      this.range.value = String(this.resolved());
      this.value.value = String(this.resolved());
    }
    this.edited = false;
    this.save.disabled = true;
    clear(this.preview, h("p", { class: "note" }, IDLE));
    this.onPreview(null);
  }

  async runPreview() {
    const v = Number(this.value.value);
    const { what, level, name } = this.scope();
    if (!Number.isFinite(v)) return;
    if (level !== "global" && !name) {
      clear(this.preview, message("Name the tenant or model first.", "warn"));
      return;
    }
    const q = level === "global" ? "" : `?${level}=${encodeURIComponent(name)}`;
    this.preview.dataset.state = "loading";
    try {
      const p = await this.api.post(`/admin/threshold/preview${q}`, changeOf(what, level, name, v));
      clear(this.preview, previewLines(p, what === "theta"), flipLists(p, this.ctx));
      Object.assign(this.preview.dataset, { state: "ready", value: String(v), current: String(p.current.hit_rate), proposed: String(p.proposed.hit_rate) });
      this.onPreview(p.calibration ? p.calibration.proposed.tau : null);
      this.save.disabled = false;
    } catch (err) {
      clear(this.preview, message(err.message, "error"));
      this.preview.dataset.state = "error";
    }
  }

  async store() {
    const v = Number(this.value.value);
    const { what, level, name } = this.scope();
    this.save.disabled = true;
    try {
      await this.api.put("/admin/threshold", changeOf(what, level, name, v));
      this.toast(`Saved: ${what === "precision" ? "precision target" : "θ"} ${level === "global" ? "(global)" : `for ${level} ${name}`} = ${v}`);
      await this.onSaved();
    } catch (err) {
      this.toast(err.message, "error");
      this.save.disabled = false;
    }
  }

  async removeOverride(what, level, name) {
    const key = level === "tenant" ? "tenants" : "models";
    const change = what === "precision" ? { precision: { [key]: { [name]: null } } } : { [key]: { [name]: null } };
    try {
      await this.api.put("/admin/threshold", change);
      this.toast(`Removed the ${what} override for ${level} ${name}`);
      await this.onSaved();
    } catch (err) {
      this.toast(err.message, "error");
    }
  }
}

class QualityPage {
  constructor(root, api, toast) {
    this.api = api;
    this.stopped = false;
    this.timer = null;
    this.sem = null;
    this.proposedTau = null;
    this.simChart = h("div", { class: "chart", id: "chart-similarity" });
    this.scoreChart = h("div", { class: "chart", id: "chart-score" });
    this.calChart = h("div", { class: "chart", id: "chart-calibration" });
    this.shadowBox = h("div", {});
    this.status = h("p", { class: "note", id: "quality-status" }, "Loading…");
    this.histNote = h("p", { class: "note" }, "");
    this.setter = new Setter(api, toast, () => this.load(), (tau) => this.showProposed(tau));
    root.append(
      h("div", { class: "page-head" }, h("h1", {}, "Quality"), this.status),
      h("div", { class: "grid two" },
        card("Similarity of recent lookups", h("div", {}, this.simChart, this.histNote), { note: "Best cached candidate's cosine similarity per lookup; θ is the candidates' floor." }),
        card("Verifier decision score", this.scoreChart, { note: "Best candidate's decision score per verified lookup; τ is the cut-off for the precision target." }),
        card("Calibration curve", this.calChart, { note: "Measured on held-out labelled pairs (calibration.json): precision and hit rate at each cut-off; the dot is the current setting." }),
        card("Live precision", this.shadowBox, { note: "Shadow checks: a sample of semantic hits re-asked to the model and compared." }),
      ),
      card("Set θ or the precision target", this.setter.element(), { note: "Nothing changes until you save; the preview replays the recent lookups of this process under the new value.", cls: "wide" }),
    );
  }

  showProposed(tau) {
    this.proposedTau = tau;
    if (this.sem && this.sem.calibration) calibrationChart(this.calChart, this.sem.calibration, tau);
  }

  async load() {
    const [s, lk] = await Promise.all([this.api.get("/admin/semantic"), this.api.get("/admin/semantic/lookups")]);
    if (this.stopped) return;
    this.sem = s;
    this.status.textContent = s.enabled
      ? `Verifier: ${s.verifier ? s.verifier.model_id : "off (cosine alone at θ)"} · precision target ${fixed(s.precision.global, 2)} · θ ${fixed(s.theta.global, 3)} · updated ${new Date().toLocaleTimeString("en-GB")}`
      : "The semantic layer is off on this gateway (DEJA_SEMANTIC_ENABLED).";
    histogram(this.simChart, lk.similarity, { label: "cosine similarity", marker: lk.theta, markerLabel: "θ", color: THETA, empty: "no semantic lookups yet" });
    histogram(this.scoreChart, lk.score, { label: "decision score", marker: lk.tau, markerLabel: "τ", color: TAU, empty: lk.verified ? "no verified lookups yet" : "the verifier is off" });
    this.histNote.textContent = `${num(lk.lookups)} recent lookups, ${num(lk.no_candidate)} found no cached question in scope.`;
    if (s.calibration) calibrationChart(this.calChart, s.calibration, this.proposedTau);
    else clear(this.calChart, message("No calibration table: the verifier is off.", "warn"));
    clear(this.shadowBox, shadowCard(s.shadow));
    this.setter.update(s);
  }

  async poll() {
    try {
      await this.load();
    } catch (err) {
      if (!this.stopped) this.status.textContent = `Update failed: ${err.message}`;
    }
    if (!this.stopped) this.timer = setTimeout(() => this.poll(), POLL_MS);
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

export function mount(root, { api, toast }) {
  const page = new QualityPage(root, api, toast);
  page.poll();
  return () => page.stop();
}
