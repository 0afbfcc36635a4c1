// Overview: hit rates by layer over time, requests by outcome, savings, and the replicas.
// The history is the gateway's own ring (/admin/timeline, one point per sample interval), so
// the charts are full the moment the page opens; the page re-reads it every POLL_MS.

import { barChart, lineChart, meter } from "./charts.js";
import { card, clear, duration, h, message, num, pct } from "./dom.js";

export const title = "Overview";
const POLL_MS = 2000;

export const OUTCOME_COLORS = {
  exact: "#0f766e",
  semantic: "#2563eb",
  coalesced: "#7c3aed",
  miss: "#9ca3af",
  bypass: "#d97706",
  off: "#dc2626",
};
const REPLICA_COLORS = ["#0f766e", "#2563eb", "#d97706", "#7c3aed", "#db2777", "#65a30d", "#0891b2", "#b91c1c"];

function kpi(id, label, value, sub = "") {
  return h("div", { class: "kpi", "data-kpi": id }, h("span", { class: "kpi-label" }, label), h("span", { class: "kpi-value" }, value), h("span", { class: "kpi-sub" }, sub));
}

function hitRates(points) {
  const rate = (p, names) => (p.requests ? names.reduce((a, n) => a + (p.outcomes[n] || 0), 0) / p.requests : null);
  return [
    { name: "exact", color: OUTCOME_COLORS.exact, points: points.map((p) => [p.at, rate(p, ["exact"])]) },
    { name: "semantic", color: OUTCOME_COLORS.semantic, points: points.map((p) => [p.at, rate(p, ["semantic"])]) },
    { name: "all layers", color: "#111827", dashed: true, points: points.map((p) => [p.at, rate(p, ["exact", "semantic"])]) },
  ];
}

function outcomeBars(points, interval) {
  const names = Object.keys(OUTCOME_COLORS).filter((n) => points.some((p) => n in p.outcomes));
  return {
    series: names.map((n) => ({ name: n, color: OUTCOME_COLORS[n] })),
    bars: points.map((p) => ({ x0: p.at - (p.seconds || interval), x1: p.at, values: names.map((n) => p.outcomes[n] || 0), label: new Date(p.at * 1000).toLocaleTimeString("en-GB") })),
  };
}

function replicaCard(r) {
  const breaker = r.breaker.state;
  const status = !r.healthy ? "down" : breaker !== "closed" ? "breaker" : "up";
  return h(
    "div",
    { class: `replica ${status}`, "data-replica": r.name },
    h("div", { class: "replica-head" }, h("span", { class: `dot ${status}`, title: status }), h("strong", {}, r.name), r.simulated ? h("span", { class: "badge" }, "simulated") : null),
    h(
      "dl",
      {},
      h("dt", {}, "Health"), h("dd", {}, r.healthy ? "healthy" : "failing"),
      h("dt", {}, "Breaker"), h("dd", {}, breaker + (r.breaker.open_for_seconds ? ` (${duration(r.breaker.open_for_seconds)})` : "")),
      h("dt", {}, "In flight"), h("dd", { "data-field": "in_flight" }, num(r.in_flight)),
      h("dt", {}, "Running / waiting"), h("dd", {}, `${num(r.metrics.num_requests_running)} / ${num(r.metrics.num_requests_waiting)}`),
      h("dt", {}, "KV cache"), h("dd", {}, meter(r.metrics.kv_cache_usage_perc, { color: "#d97706" })),
      h("dt", {}, "Prefix-cache hits"), h("dd", { "data-field": "prefix" }, meter(r.metrics.prefix_cache_hit_rate, { color: "#0f766e" })),
      h("dt", {}, "Share of keys"), h("dd", {}, pct(r.share_of_keys)),
    ),
    r.last_error ? h("p", { class: "note error" }, r.last_error) : null,
  );
}

function timeAxis(tl) {
  const points = tl.points;
  const now = Date.now() / 1000;
  const span = tl.interval * 30; // at least 30 intervals wide, then as long as the history
  const first = points.length ? points[0].at - (points[0].seconds || tl.interval) : now;
  const last = points.length ? points[points.length - 1].at : now;
  return { type: "time", min: Math.min(first, now - span), max: Math.max(now, last), label: "time" };
}

class Overview {
  constructor(root, api) {
    this.api = api;
    this.stopped = false;
    this.timer = null;
    this.kpis = h("div", { class: "kpis", id: "kpis" });
    this.hitChart = h("div", { class: "chart", id: "chart-hit-rate" });
    this.outcomeChart = h("div", { class: "chart", id: "chart-outcomes" });
    this.savedChart = h("div", { class: "chart", id: "chart-saved" });
    this.prefixChart = h("div", { class: "chart", id: "chart-prefix" });
    this.latencyChart = h("div", { class: "chart", id: "chart-latency" });
    this.errorChart = h("div", { class: "chart", id: "chart-errors" });
    this.queueChart = h("div", { class: "chart", id: "chart-queue" });
    this.replicas = h("div", { class: "replicas", id: "replicas" });
    this.status = h("p", { class: "note", id: "overview-status" }, "Loading…");
    root.append(
      h("div", { class: "page-head" }, h("h1", {}, "Overview"), this.status),
      this.kpis,
      h("div", { class: "grid two" },
        card("Hit rate by layer", this.hitChart, { note: "Share of requests answered by each cache layer, per interval." }),
        card("Requests by outcome", this.outcomeChart, { note: "X-Deja-Cache of every request, per interval." }),
        card("Saved by the cache", this.savedChart, { note: "Completion tokens served from cache per interval (model time saved in the tooltip)." }),
        card("Prefix-cache hit rate by replica", this.prefixChart, { note: "vLLM prefix-cache hits / queries (tokens), per interval." }),
        card("Latency", this.latencyChart, { note: "Whole-request latency p50 and p95 per interval (upper bound of its histogram bucket)." }),
        card("Errors", this.errorChart, { note: "Requests answered with a 5xx status, per interval." }),
        card("Rate limits and queue", this.queueChart, { note: "429s (tenant rate limit or overload) per interval, and requests waiting for a replica slot." }),
      ),
      card("Replicas", this.replicas, { note: "Health probes, circuit breakers, in-flight requests, and the replicas' own metrics." }),
    );
  }

  async refresh() {
    try {
      const [tl, rep] = await Promise.all([this.api.get("/admin/timeline"), this.api.get("/admin/replicas")]);
      if (this.stopped) return;
      this.renderKpis(tl.totals);
      this.renderCharts(tl, rep.replicas.map((r) => r.name));
      this.renderReplicas(rep);
      this.status.textContent = `Updated ${new Date().toLocaleTimeString("en-GB")} · one point every ${tl.interval} s · this gateway process`;
    } catch (err) {
      if (!this.stopped) this.status.textContent = `Update failed: ${err.message}`;
    }
    if (!this.stopped) this.timer = setTimeout(() => this.refresh(), POLL_MS);
  }

  renderKpis(t) {
    const o = t.outcomes;
    const hits = (o.exact || 0) + (o.semantic || 0);
    const share = (n) => pct(t.requests ? n / t.requests : null);
    clear(
      this.kpis,
      kpi("requests", "Requests", num(t.requests), "since start"),
      kpi("hit-rate", "Hit rate", share(hits), `${num(hits)} answered from cache`),
      kpi("exact", "Exact hits", num(o.exact || 0), share(o.exact || 0)),
      kpi("semantic", "Semantic hits", num(o.semantic || 0), share(o.semantic || 0)),
      kpi("tokens-saved", "Tokens saved", num(t.tokens_saved), "completion tokens"),
      kpi("time-saved", "Model time saved", duration(t.seconds_saved), "decode time"),
    );
  }

  renderCharts(tl, names) {
    const points = tl.points;
    const x = timeAxis(tl);
    const percent = { min: 0, max: 1, format: (v) => `${Math.round(v * 100)}%`, label: "hit rate" };
    lineChart(this.hitChart, { label: "Hit rate by layer over time", x, y: percent, series: hitRates(points), empty: "no requests yet" });
    const ob = outcomeBars(points, tl.interval);
    barChart(this.outcomeChart, { label: "Requests by outcome over time", x, y: { label: "requests", format: (v) => num(v), integer: true }, series: ob.series, bars: ob.bars, empty: "no requests yet" });
    barChart(this.savedChart, {
      label: "Tokens saved over time",
      x,
      y: { label: "tokens", format: (v) => num(v), integer: true },
      series: [{ name: "tokens saved", color: OUTCOME_COLORS.exact }],
      bars: points.map((p) => ({ x0: p.at - (p.seconds || tl.interval), x1: p.at, values: [p.tokens_saved], label: `${new Date(p.at * 1000).toLocaleTimeString("en-GB")} (${duration(p.seconds_saved)} of model time)` })),
      legend: false,
      empty: "nothing served from cache yet",
    });
    lineChart(this.prefixChart, {
      label: "Prefix-cache hit rate by replica over time",
      x,
      y: percent,
      series: names.map((n, i) => ({ name: n, color: REPLICA_COLORS[i % REPLICA_COLORS.length], points: points.map((p) => [p.at, p.prefix_hit_rate[n] ?? null]) })),
      empty: "no prefix-cache traffic yet",
    });
    this.renderHealth(points, x);
  }

  renderHealth(points, x) {
    const ms = (v) => (v * 1000 < 10 ? (v * 1000).toFixed(1) : num(Math.round(v * 1000)));
    lineChart(this.latencyChart, {
      label: "Request latency over time",
      x,
      y: { label: "ms", format: ms },
      series: [
        { name: "p50", color: "#2563eb", points: points.map((p) => [p.at, p.latency_p50 ?? null]) },
        { name: "p95", color: "#c2410c", points: points.map((p) => [p.at, p.latency_p95 ?? null]) },
      ],
      empty: "no requests yet",
    });
    barChart(this.errorChart, {
      label: "5xx errors over time",
      x,
      y: { label: "errors", format: (v) => num(v), integer: true },
      series: [{ name: "5xx", color: "#b91c1c" }],
      bars: points.map((p) => ({ x0: p.at - (p.seconds || 1), x1: p.at, values: [p.errors || 0], label: `${new Date(p.at * 1000).toLocaleTimeString("en-GB")}: ${num(p.errors || 0)} errors` })),
      legend: false,
      empty: "no errors",
    });
    lineChart(this.queueChart, {
      label: "429s and admission queue over time",
      x,
      y: { label: "requests", format: (v) => num(v), integer: true },
      series: [
        { name: "429 per interval", color: "#d97706", points: points.map((p) => [p.at, p.throttled ?? 0]) },
        { name: "waiting for a slot", color: "#7c3aed", dashed: true, points: points.map((p) => [p.at, p.queue ?? 0]) },
      ],
      empty: "no requests yet",
    });
  }

  renderReplicas(rep) {
    clear(
      this.replicas,
      rep.replicas.length ? rep.replicas.map(replicaCard) : message("No replicas configured.", "warn"),
      h("p", { class: "note" }, `Routing: ${rep.policy} (ε = ${rep.epsilon})`),
    );
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

export function mount(root, { api }) {
  const page = new Overview(root, api);
  page.refresh();
  return () => page.stop();
}
