// Labelling what the verifier decided: "same" / "different" buttons on a pair of questions (a
// near miss, a served hit, a pair a θ preview would start or stop serving), the recent served
// pairs, and the labelled pairs with their export (the file `deja calibrate --pairs` reads).

import { query } from "./api.js";
import { ago, card, clear, fixed, h, message, num } from "./dom.js";

const LABELS = [["same", "Same"], ["different", "Different"]];
const EXPORT_NAME = "deja-labelled-pairs.jsonl";

function labelBody(pair, label) {
  const body = { label };
  for (const k of ["question", "cached_question", "entry_id", "tenant", "model"]) body[k] = pair[k];
  for (const k of ["similarity", "score"]) if (pair[k] !== null && pair[k] !== undefined) body[k] = pair[k];
  return body;
}

// Two toggle buttons; the pressed one is the pair's label. Pressing the other changes it,
// pressing the pressed one again removes it.
export function labelButtons(pair, { api, toast }, onChange = () => {}) {
  let current = { label: pair.label || null, id: pair.label_id || null };
  const box = h("span", { class: "labelling", role: "group", "aria-label": "Is one answer right for both questions?" });
  const buttons = Object.fromEntries(LABELS.map(([k, text]) => [k, h("button", { type: "button", class: `small label-${k}`, "data-label": k, onclick: () => set(k) }, text)]));
  const paint = () => {
    box.dataset.label = current.label || "";
    for (const [k, b] of Object.entries(buttons)) b.setAttribute("aria-pressed", String(current.label === k));
  };
  async function set(label) {
    for (const b of Object.values(buttons)) b.disabled = true;
    try {
      if (current.label === label) {
        await api.del(`/admin/semantic/labels/${encodeURIComponent(current.id)}`);
        current = { label: null, id: null };
        toast("Label removed");
      } else {
        const saved = await api.post("/admin/semantic/labels", labelBody(pair, label));
        current = { label: saved.label, id: saved.id };
        toast(`Labelled “${label}”`);
      }
      onChange(current);
    } catch (err) {
      toast(err.message, "error");
    }
    for (const b of Object.values(buttons)) b.disabled = false;
    paint();
  }
  box.append(h("span", { class: "note hide-narrow" }, "same answer?"), buttons.same, buttons.different);
  paint();
  return box;
}

// One pair as a card: both questions, the scores, its label buttons and (optionally) a link
// to the cached entry.
export function pairCard(p, ctx, { cachedLabel = "served", showEntry = null, extra = [] } = {}) {
  return h(
    "article",
    { class: "near pair", "data-entry-id": p.entry_id },
    h("div", { class: "near-pair" },
      h("div", {}, h("span", { class: "label" }, "asked"), h("p", { class: "q asked" }, p.question)),
      h("div", {}, h("span", { class: "label" }, cachedLabel), h("p", { class: "q cached" }, p.cached_question)),
    ),
    h("div", { class: "near-scores" },
      h("span", {}, `cosine ${fixed(p.similarity)}`),
      p.score !== null && p.score !== undefined ? h("span", {}, `score ${fixed(p.score)}`) : null,
      extra,
      h("span", { class: "note" }, `${p.tenant} · ${p.model}${p.at ? ` · ${ago(p.at)}` : ""}`),
      labelButtons(p, ctx),
      showEntry ? h("button", { class: "ghost small", type: "button", onclick: () => showEntry(p.entry_id) }, "Open cached entry") : null,
    ),
  );
}

// Entries → Served: the recent semantic hits of this process, to label.
export function servedPairs(body, ctx, showEntry) {
  const list = h("div", { id: "served-pairs", class: "near-list" });
  const refresh = h("button", { type: "button", class: "ghost" }, "Refresh");
  body.append(card("Served semantically", h("div", {}, h("div", { class: "form-row" }, refresh), list), {
    note: "Recent semantic hits: a question served the answer of a different cached question. Label each pair: “different” marks a wrong hit.",
  }));
  async function load() {
    try {
      const rows = (await ctx.api.get(`/admin/semantic/served${query({ limit: 100 })}`)).served;
      list.dataset.count = String(rows.length);
      clear(list, rows.length ? rows.map((p) => pairCard(p, ctx, { showEntry })) : message("No semantic hit recorded yet in this gateway process.", "info"));
    } catch (err) {
      clear(list, message(err.message, "error"));
    }
  }
  refresh.addEventListener("click", load);
  load();
  return null;
}

function labelledRow(x, ctx) {
  const tr = h("tr", { "data-label-id": x.id, "data-label": x.label },
    h("td", { class: "q asked" }, x.question),
    h("td", { class: "q cached" }, x.cached_question),
    h("td", { class: "num" }, fixed(x.score ?? x.similarity)),
    h("td", { class: "hide-narrow" }, x.tenant),
    h("td", { class: "hide-narrow" }, ago(x.at)),
  );
  tr.append(h("td", {}, labelButtons({ ...x, label_id: x.id }, ctx, (now) => (tr.dataset.label = now.label || ""))));
  return tr;
}

// Entries → Labelled: every labelled pair, newest first, and the export.
export function labelledPairs(body, ctx) {
  const tenant = h("input", { id: "labels-tenant", type: "text", placeholder: "any tenant", spellcheck: "false" });
  const list = h("div", { id: "labelled-pairs" });
  const summary = h("p", { class: "note", id: "labels-summary" }, "");
  const exportButton = h("button", { id: "labels-export", type: "button" }, "Export labelled pairs");
  const form = h("form", { class: "form-row wrap" }, h("label", { class: "field" }, "Tenant", tenant), h("button", { type: "submit", class: "ghost" }, "Show"), exportButton);
  body.append(card("Labelled pairs", h("div", {}, form, summary, list), {
    note: "Pairs labelled here, kept in the gateway's data dir. The export is the JSONL file `deja calibrate --pairs FILE` reads: recalibrate the verifier on your own traffic.",
  }));
  async function load() {
    try {
      const data = await ctx.api.get(`/admin/semantic/labels${query({ tenant: tenant.value.trim(), limit: 500 })}`);
      summary.textContent = `${num(data.total)} labelled, ${num(data.same)} same, ${num(data.total - data.same)} different.`;
      list.dataset.count = String(data.total);
      const rows = data.labels.map((x) => labelledRow(x, ctx));
      clear(list, rows.length
        ? h("table", { class: "table" }, h("thead", {}, h("tr", {}, h("th", {}, "asked"), h("th", {}, "cached"), h("th", { class: "num" }, "score"), h("th", { class: "hide-narrow" }, "tenant"), h("th", { class: "hide-narrow" }, "labelled"), h("th", {}, "label"))), h("tbody", {}, rows))
        : message("No labelled pairs yet: label near misses and served pairs with the Same / Different buttons.", "info"));
    } catch (err) {
      clear(list, message(err.message, "error"));
    }
  }
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    load();
  });
  exportButton.addEventListener("click", async () => {
    try {
      const size = await ctx.api.download(`/admin/semantic/labels/export${query({ tenant: tenant.value.trim() })}`, EXPORT_NAME);
      ctx.toast(size ? `Exported ${EXPORT_NAME}` : "No labelled pairs to export", size ? "ok" : "warn");
    } catch (err) {
      ctx.toast(err.message, "error");
    }
  });
  load();
  return null;
}

// Under the θ preview's figures: the pairs the change would start and stop serving.
export function flipLists(p, ctx) {
  const list = (id, title, rows, total, empty) => h("div", { class: "flips", id },
    h("h3", {}, `${title} (${num(total)})`),
    rows.length
      ? h("div", { class: "near-list" }, rows.map((r) => pairCard(r, ctx, { cachedLabel: "cached", extra: r.lookups > 1 ? h("span", {}, `${r.lookups} lookups`) : null })))
      : h("p", { class: "note" }, empty),
    total > rows.length ? h("p", { class: "note" }, `${num(total - rows.length)} more not shown (highest scores first).`) : null,
  );
  return [
    list("preview-start", "Would start serving", p.start, p.start_total, "No recent lookup would start being served."),
    list("preview-stop", "Would stop serving", p.stop, p.stop_total, "No recent hit would stop being served."),
  ];
}
