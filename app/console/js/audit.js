// Audit: the recent admin actions of this gateway process (the durable record is the
// deja.audit log), newest first, with a chart of actions per minute by family.

import { query } from "./api.js";
import { barChart } from "./charts.js";
import { card, clear, h, message, num } from "./dom.js";

export const title = "Audit";
const POLL_MS = 5000;
const FAMILY_COLORS = { cache: "#0f766e", threshold: "#2563eb", replicas: "#d97706", corpus: "#7c3aed", other: "#9ca3af" };

function family(action) {
  const f = String(action).split(".")[0];
  return f in FAMILY_COLORS ? f : f.startsWith("corp") ? "corpus" : "other";
}

function details(rec) {
  const rest = Object.fromEntries(Object.entries(rec).filter(([k]) => !["at", "who", "action", "count"].includes(k)));
  return JSON.stringify(rest);
}

function actionsChart(el, actions) {
  const fams = Object.keys(FAMILY_COLORS);
  const byMinute = new Map();
  for (const a of actions) {
    if (!a.at) continue;
    const m = Math.floor(a.at / 60) * 60;
    const row = byMinute.get(m) || fams.map(() => 0);
    row[fams.indexOf(family(a.action))] += 1;
    byMinute.set(m, row);
  }
  const now = Date.now() / 1000;
  barChart(el, {
    label: "Admin actions per minute",
    height: 180,
    x: { type: "time", min: Math.min(now - 1800, ...byMinute.keys()), max: now + 60, label: "time" },
    y: { label: "actions", format: (v) => num(v), integer: true },
    series: fams.map((f) => ({ name: f, color: FAMILY_COLORS[f] })),
    bars: [...byMinute.entries()].map(([m, values]) => ({ x0: m, x1: m + 60, values, label: new Date(m * 1000).toLocaleTimeString("en-GB") })),
    empty: "no admin actions yet",
  });
}

function actionsTable(actions) {
  return h("table", { class: "table", id: "audit-table" },
    h("thead", {}, h("tr", {}, h("th", {}, "time"), h("th", {}, "action"), h("th", { class: "num" }, "count"), h("th", { class: "hide-narrow" }, "who"), h("th", {}, "details"))),
    h("tbody", {}, actions.map((a) => h("tr", { "data-action": a.action },
      h("td", { class: "nowrap" }, a.at ? new Date(a.at * 1000).toLocaleTimeString("en-GB") : "–"),
      h("td", {}, h("span", { class: `badge ${family(a.action)}` }, a.action)),
      h("td", { class: "num" }, a.count === undefined ? "" : num(a.count)),
      h("td", { class: "hide-narrow mono" }, a.who || "–"),
      h("td", { class: "mono details" }, details(a))))));
}

export function mount(root, { api }) {
  const filter = h("select", { id: "audit-filter" }, h("option", { value: "" }, "all actions"), ["cache", "threshold", "replicas", "corpus"].map((f) => h("option", { value: f }, f)));
  const chart = h("div", { class: "chart", id: "chart-audit" });
  const list = h("div", { id: "audit-list" });
  root.append(
    h("div", { class: "page-head" }, h("h1", {}, "Audit")),
    card("Admin actions per minute", chart, { note: "The recent admin actions kept in memory by this process." }),
    card("Recent admin actions", h("div", {}, h("div", { class: "form-row" }, h("label", { class: "field" }, "Show", filter)), list), { note: "Every admin action is also a JSON line on the deja.audit logger." }),
  );
  let stopped = false;
  let timer = null;
  async function poll() {
    try {
      const actions = (await api.get(`/admin/audit${query({ action: filter.value, limit: 200 })}`)).actions;
      if (!stopped) {
        actionsChart(chart, actions);
        clear(list, actions.length ? actionsTable(actions) : message("No admin actions recorded yet in this gateway process.", "info"));
      }
    } catch (err) {
      if (!stopped) clear(list, message(err.message, "error"));
    }
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  }
  filter.addEventListener("change", () => {
    clearTimeout(timer);
    poll();
  });
  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
