// The banner every page shows while the learning loop has raised a tenant's precision target
// because its live precision fell under it (GET /admin/semantic/corrections), with the two
// things ops can do about it: pin the tenant (no more moves) or reset it (the target they set).

import { clear, h, pct } from "./dom.js";

const POLL_MS = 15000;

function line(api, tenant, t, refresh) {
  const last = t.moves[t.moves.length - 1];
  const pin = h("button", { type: "button", class: "ghost", "data-action": "pin" }, t.pinned ? "Unpin" : "Pin");
  const reset = h("button", { type: "button", class: "ghost", "data-action": "reset" }, "Reset");
  pin.addEventListener("click", async () => {
    await api.put(`/admin/semantic/corrections/${encodeURIComponent(tenant)}`, { pinned: !t.pinned });
    refresh();
  });
  reset.addEventListener("click", async () => {
    await api.del(`/admin/semantic/corrections/${encodeURIComponent(tenant)}`);
    refresh();
  });
  const measured = last
    ? `live precision ${pct(last.precision)} (95% interval ${pct(last.interval[0])}–${pct(last.interval[1])}, ${last.verdicts} verdicts)`
    : "live precision under its target";
  return h("div", { class: "banner-line", "data-tenant": tenant },
    h("strong", {}, `Tenant ${tenant}: `),
    `${measured}, so its hits are now decided at a stricter precision target`,
    last ? `: ${pct(last.to)} instead of ${pct(last.to - t.raised)}` : ` (+${pct(t.raised)})`,
    t.pinned ? " — pinned." : ".",
    " ", pin, " ", reset);
}

// Mount the banner in `el`; returns stop().
export function mountBanner(el, api) {
  let timer = null;
  async function refresh() {
    let report;
    try {
      report = await api.get("/admin/semantic/corrections");
    } catch {
      return; // no semantic layer, or a passing failure: no banner
    }
    const raised = Object.entries(report.tenants).filter(([, t]) => t.raised > 0);
    el.hidden = raised.length === 0;
    clear(el, ...raised.map(([tenant, t]) => line(api, tenant, t, refresh)));
  }
  refresh();
  timer = setInterval(refresh, POLL_MS);
  return () => clearInterval(timer);
}
