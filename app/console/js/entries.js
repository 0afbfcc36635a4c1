// Entries: search cached questions by meaning, one entry's answer, hits, age, TTL and sources,
// delete it; invalidate by filter with a dry run first; the near-miss browser, the recent served
// pairs and the labelled pairs (labels.js).

import { query } from "./api.js";
import { meter } from "./charts.js";
import { ago, card, clear, duration, fixed, h, message, num, pct } from "./dom.js";
import { labelButtons, labelledPairs, servedPairs } from "./labels.js";

export const title = "Entries";

const TABS = [
  ["search", "Search", "#entries"],
  ["near-misses", "Near misses", "#entries/near-misses"],
  ["served", "Served", "#entries/served"],
  ["labelled", "Labelled", "#entries/labelled"],
  ["invalidate", "Invalidate by filter", "#entries/invalidate"],
];

function answerText(answer) {
  if (answer.text !== null && answer.text !== undefined) return answer.text;
  const m = answer.message || {};
  if (typeof m.content === "string" && m.content) return m.content;
  if (Array.isArray(m.content)) return m.content.map((p) => p.text || "").join("");
  if (m.tool_calls) return JSON.stringify(m.tool_calls, null, 2);
  return m.refusal || "";
}

function sourcesOf(answer) {
  const src = answer.sources;
  if (!src || (Array.isArray(src) && !src.length)) return "none (not a RAG answer)";
  if (Array.isArray(src)) return src.map((s) => (typeof s === "string" ? s : `${s.corpus ? `${s.corpus}/` : ""}${s.document}@${s.version}`)).join(", ");
  return JSON.stringify(src);
}

export function mount(root, ctx) {
  const tab = TABS.some(([id]) => id === ctx.sub) ? ctx.sub : "search";
  root.append(
    h("div", { class: "page-head" }, h("h1", {}, "Entries")),
    h("nav", { class: "subnav", "aria-label": "Entries views" }, TABS.map(([id, label, href]) => h("a", { href, "aria-current": id === tab ? "page" : "false", "data-tab": id }, label))),
  );
  const detail = h("div", { id: "entry-detail", class: "detail", hidden: true });
  const body = h("div", { class: "entries-body" });
  root.append(h("div", { class: "split" }, body, detail));
  const showEntry = (id) => openEntry(ctx, detail, id);
  if (tab === "near-misses") return nearMisses(body, ctx, showEntry);
  if (tab === "served") return servedPairs(body, ctx, showEntry);
  if (tab === "labelled") return labelledPairs(body, ctx);
  if (tab === "invalidate") return invalidate(body, ctx);
  return search(body, ctx, showEntry);
}

function deleteButtons(onConfirm) {
  const confirm = h("button", { id: "entry-delete-confirm", class: "danger", type: "button", hidden: true }, "Confirm delete");
  const del = h("button", { id: "entry-delete", class: "danger ghost", type: "button" }, "Delete…");
  del.addEventListener("click", () => {
    confirm.hidden = false;
    del.hidden = true;
  });
  confirm.addEventListener("click", async () => {
    confirm.disabled = true;
    if (!(await onConfirm())) confirm.disabled = false;
  });
  return [del, confirm];
}

function entryDetail(e, panel, onConfirm) {
  const usage = e.answer.usage || {};
  return [
    h("div", { class: "detail-head" }, h("h2", {}, "Entry"), h("button", { class: "ghost small", type: "button", onclick: () => (panel.hidden = true) }, "Close")),
    h("p", { class: "question", id: "entry-question" }, e.question || "(no question text)"),
    h("h3", {}, "Answer"),
    h("pre", { class: "answer", id: "entry-answer" }, answerText(e.answer)),
    h(
      "dl",
      { class: "meta" },
      h("dt", {}, "Hits"), h("dd", { id: "entry-hits" }, num(e.hits)),
      h("dt", {}, "Age"), h("dd", {}, duration(e.age_seconds)),
      h("dt", {}, "TTL left"), h("dd", {}, e.ttl_seconds === null ? "–" : duration(e.ttl_seconds)),
      h("dt", {}, "Sources"), h("dd", { id: "entry-sources" }, sourcesOf(e.answer)),
      h("dt", {}, "Tenant"), h("dd", {}, e.tenant),
      h("dt", {}, "Namespace"), h("dd", {}, e.namespace || "—"),
      h("dt", {}, "Model"), h("dd", {}, e.model),
      h("dt", {}, "Tokens"), h("dd", {}, `${num(usage.prompt_tokens)} prompt, ${num(usage.completion_tokens)} completion`),
      h("dt", {}, "Entry id"), h("dd", { class: "mono" }, e.id),
    ),
    ...learnt(e),
    h("div", { class: "actions" }, deleteButtons(onConfirm)),
  ];
}

// What the learning loop made of an entry: its promoted paraphrases (aliases) and the verdicts
// about it with the cut-off they earn; or, for an alias, the entry it stands for.
function learnt(e) {
  if (e.alias_of) {
    return [h("p", { class: "note", id: "entry-alias-of" }, `A promoted paraphrase: an alias of entry ${e.alias_of.slice(0, 12)}…, served that entry's answer.`)];
  }
  const out = [h("h3", {}, `Promoted paraphrases (${num(e.aliases.length)})`)];
  out.push(e.aliases.length
    ? h("ul", { class: "aliases", id: "entry-aliases" }, e.aliases.map((a) => h("li", {}, h("span", { class: "q" }, a.question || "(no text)"), h("span", { class: "note" }, ` · ${num(a.hits)} hits`))))
    : h("p", { class: "note" }, "None yet: a grey-zone question the judge calls the same is added here."));
  const cut = e.cutoff ? `cut-off ${fixed(e.cutoff.tau)} at target ${pct(e.cutoff.target)}` : "";
  out.push(h("h3", {}, `Verdicts (${num(e.evidence.length)})`));
  out.push(e.evidence.length
    ? h("ul", { class: "verdicts", id: "entry-verdicts" }, e.evidence.map((v) => h("li", {}, `${v.correct ? "right" : "wrong"} · ${v.source}${v.score === null ? "" : ` at ${fixed(v.score)}`}`)))
    : h("p", { class: "note" }, "No verdicts yet (judge, shadow checks, feedback, labels)."));
  if (cut) out.push(h("p", { class: "note", id: "entry-cutoff" }, cut));
  return out;
}

// Load one entry into the detail panel; deleting it removes it from both layers.
async function openEntry({ api, toast }, panel, id) {
  panel.hidden = false;
  clear(panel, h("p", { class: "note" }, "Loading…"));
  let e;
  try {
    e = await api.get(`/admin/cache/entries/${encodeURIComponent(id)}`);
  } catch (err) {
    clear(panel, message(err.status === 404 ? "This entry is gone (expired, evicted or invalidated)." : err.message, "warn"));
    return;
  }
  const onConfirm = async () => {
    try {
      await api.del(`/admin/cache/entries/${encodeURIComponent(id)}`);
    } catch (err) {
      toast(err.message, "error");
      return false;
    }
    toast("Entry deleted from both layers");
    clear(panel, message("Deleted. The next identical or similar request is a miss.", "ok"));
    panel.dataset.deleted = id;
    return true;
  };
  clear(panel, entryDetail(e, panel, onConfirm));
  panel.dataset.entry = id;
}

function resultsTable(rows, ranked, showEntry) {
  const now = Date.now() / 1000;
  const trs = rows.map((e) =>
    h(
      "tr",
      { class: "clickable", "data-entry-id": e.id, tabindex: "0", onclick: () => showEntry(e.id), onkeydown: (ev) => ev.key === "Enter" && showEntry(e.id) },
      h("td", { class: "q" }, e.question || "(no text)"),
      ranked ? h("td", {}, meter(e.similarity, { label: fixed(e.similarity, 3) })) : null,
      h("td", { class: "num" }, num(e.hits)),
      h("td", {}, duration(now - e.created_at)),
      h("td", {}, e.tenant),
      h("td", { class: "hide-narrow" }, e.model),
    ),
  );
  return h("table", { class: "table" },
    h("thead", {}, h("tr", {}, h("th", {}, "question"), ranked ? h("th", {}, "similarity") : null, h("th", { class: "num" }, "hits"), h("th", {}, "age"), h("th", {}, "tenant"), h("th", { class: "hide-narrow" }, "model"))),
    h("tbody", {}, trs));
}

function search(body, { api }, showEntry) {
  const q = h("input", { id: "entry-query", type: "search", placeholder: "Search cached questions by meaning (empty: newest)", spellcheck: "false" });
  const tenant = h("input", { id: "entry-tenant", type: "text", placeholder: "any tenant", spellcheck: "false" });
  const results = h("div", { id: "entry-results" });
  const form = h(
    "form",
    { class: "form-row", id: "entry-search" },
    h("label", { class: "field grow" }, "Question", q),
    h("label", { class: "field" }, "Tenant", tenant),
    h("button", { type: "submit" }, "Search"),
  );
  body.append(card("Cached questions", h("div", {}, form, results), { note: "With a question, entries are ranked by the similarity of their question to it (the semantic index)." }));
  async function run() {
    const text = q.value.trim();
    clear(results, h("p", { class: "note" }, "Searching…"));
    try {
      const data = await api.get(`/admin/cache/entries${query({ q: text, tenant: tenant.value.trim(), limit: 50 })}`);
      const empty = message(text ? "No cached question is similar to that." : "The cache is empty.", "info");
      clear(results, data.entries.length ? resultsTable(data.entries, Boolean(text), showEntry) : empty);
    } catch (err) {
      clear(results, message(err.message, "error"));
    }
  }
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    run();
  });
  run();
  return null;
}

function nearMissCard(m, ctx, showEntry) {
  const value = m.cut === "tau" ? m.score : m.similarity;
  return h(
    "article",
    { class: "near", "data-entry-id": m.entry_id },
    h("div", { class: "near-pair" },
      h("div", {}, h("span", { class: "label" }, "asked"), h("p", { class: "q asked" }, m.question)),
      h("div", {}, h("span", { class: "label" }, "nearly matched"), h("p", { class: "q cached" }, m.cached_question)),
    ),
    h("div", { class: "near-scores" },
      h("span", {}, `cosine ${fixed(m.similarity)}`),
      m.score !== null ? h("span", {}, `score ${fixed(m.score)}`) : null,
      h("span", { class: "gap" }, `${m.cut === "tau" ? "τ" : "θ"} ${fixed(m.cutoff)} (−${fixed(m.gap)})`),
      meter(value, { min: Math.max(0, m.cutoff - 0.25), max: Math.min(1, m.cutoff + 0.05), color: "#d97706", label: " ", mark: m.cutoff, markTitle: `cut-off ${fixed(m.cutoff)}` }),
      h("span", { class: "note" }, `${m.tenant} · ${m.model} · ${ago(m.at)}`),
      labelButtons(m, ctx),
      h("button", { class: "ghost small", type: "button", onclick: () => showEntry(m.entry_id) }, "Open cached entry"),
    ),
  );
}

function nearMisses(body, ctx, showEntry) {
  const { api } = ctx;
  const margin = h("select", { id: "near-margin" }, ["0.10", "0.05", "0.02"].map((m) => h("option", { value: m }, `within ${m} of the cut-off`)));
  const list = h("div", { id: "near-misses", class: "near-list" });
  const refresh = h("button", { type: "button", class: "ghost" }, "Refresh");
  body.append(
    card(
      "Near misses",
      h("div", {}, h("div", { class: "form-row" }, h("label", { class: "field" }, "Show", margin), refresh), list),
      { note: "Recent misses whose best cached candidate fell just under the cut-off (θ on the cosine, τ on the verifier's score), with the question it nearly matched. Many good pairs here mean the setting is too strict: label them “same” or “different”." },
    ),
  );
  async function load() {
    try {
      const rows = (await api.get(`/admin/semantic/near-misses${query({ margin: margin.value, limit: 100 })}`)).near_misses;
      list.dataset.count = String(rows.length);
      clear(list, rows.length ? rows.map((m) => nearMissCard(m, ctx, showEntry)) : message("No near misses recorded yet in this gateway process.", "info"));
    } catch (err) {
      clear(list, message(err.message, "error"));
    }
  }
  margin.addEventListener("change", load);
  refresh.addEventListener("click", load);
  load();
  return null;
}

function plural(n) {
  return `${n} ${n === 1 ? "entry" : "entries"}`;
}

function dryRunRows(rows) {
  return h("table", { class: "table" },
    h("thead", {}, h("tr", {}, h("th", {}, "question"), h("th", {}, "tenant"), h("th", {}, "model"), h("th", { class: "num" }, "hits"))),
    h("tbody", {}, rows.map((e) => h("tr", { "data-entry-id": e.id }, h("td", { class: "q" }, e.question || "(no text)"), h("td", {}, e.tenant), h("td", {}, e.model), h("td", { class: "num" }, num(e.hits))))));
}

// Invalidate by filter: the remove button only acts on the filter a dry run just previewed.
class Invalidate {
  constructor(body, api, toast) {
    this.api = api;
    this.toast = toast;
    this.previewed = null;
    const input = (id, attrs = {}) => h("input", { id, type: "text", spellcheck: "false", ...attrs });
    this.fields = {
      tenant: input("inv-tenant"),
      model: input("inv-model"),
      namespace: input("inv-namespace"),
      older_than: input("inv-older", { type: "number", min: "0", step: "1", placeholder: "seconds" }),
      query: input("inv-query", { placeholder: "questions similar to…" }),
      min_similarity: input("inv-min-sim", { type: "number", min: "0", max: "1", step: "0.01", placeholder: "default θ" }),
    };
    this.run = h("button", { id: "inv-run", type: "button", class: "danger", disabled: true }, "Invalidate");
    this.out = h("div", { id: "inv-result" });
    const f = this.fields;
    const form = h(
      "form",
      { id: "inv-form" },
      h("div", { class: "form-row wrap" }, h("label", { class: "field" }, "Tenant", f.tenant), h("label", { class: "field" }, "Model", f.model), h("label", { class: "field" }, "Namespace", f.namespace), h("label", { class: "field" }, "Older than (s)", f.older_than)),
      h("div", { class: "form-row wrap" }, h("label", { class: "field grow" }, "Similar to", f.query), h("label", { class: "field" }, "Min similarity", f.min_similarity)),
      h("div", { class: "actions" }, h("button", { id: "inv-dry-run", type: "submit" }, "Preview (dry run)"), this.run),
    );
    body.append(card("Invalidate by filter", h("div", {}, form, this.out), { note: "Every given condition must hold. A dry run lists what would go; only then can you remove it, from both layers, for every process." }));
    for (const el of Object.values(f)) el.addEventListener("input", () => this.forget());
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.dryRun();
    });
    this.run.addEventListener("click", () => this.invalidate());
  }

  spec() {
    const s = {};
    for (const [k, el] of Object.entries(this.fields)) {
      const v = el.value.trim();
      if (v) s[k] = el.type === "number" ? Number(v) : v;
    }
    return s;
  }

  forget() {
    this.run.disabled = true;
    this.previewed = null;
  }

  async dryRun() {
    const s = this.spec();
    try {
      const r = await this.api.post("/admin/cache/invalidate", { ...s, dry_run: true });
      this.previewed = JSON.stringify(s);
      this.run.disabled = r.count === 0;
      this.run.textContent = `Invalidate ${plural(r.count)}`;
      const rows = r.entries || [];
      clear(
        this.out,
        h("p", { class: "msg info", id: "inv-count", "data-count": String(r.count) }, `${r.count} ${r.count === 1 ? "entry matches" : "entries match"}.`),
        rows.length ? dryRunRows(rows) : null,
      );
    } catch (err) {
      clear(this.out, message(err.message, "error"));
    }
  }

  async invalidate() {
    const s = this.spec();
    if (this.previewed !== JSON.stringify(s)) return;
    this.forget();
    try {
      const r = await this.api.post("/admin/cache/invalidate", { ...s, dry_run: false });
      this.toast(`Invalidated ${plural(r.count)}`);
      clear(this.out, h("p", { class: "msg ok", id: "inv-done", "data-count": String(r.count) }, `Removed ${plural(r.count)} from both layers.`));
    } catch (err) {
      clear(this.out, message(err.message, "error"));
    }
  }
}

function invalidate(body, { api, toast }) {
  new Invalidate(body, api, toast);
  return null;
}
