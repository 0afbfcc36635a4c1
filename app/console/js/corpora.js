// Corpora: a tenant's corpora and their documents (version, chunk count), with re-ingest
// (upload the file again: PUT raw bytes) and remove. Built against the corpus admin API
// (GET /admin/corpora?tenant=T, GET /admin/corpora/{corpus}/documents?tenant=T,
// PUT|DELETE /admin/corpora/{corpus}/documents/{document}); a gateway without it answers 404,
// shown as "no corpora".

import { query } from "./api.js";
import { meter } from "./charts.js";
import { card, clear, h, message, num } from "./dom.js";

export const title = "Corpora";

const pick = (o, ...names) => names.map((n) => o[n]).find((v) => v !== undefined && v !== null);
const listOf = (data, key) => (Array.isArray(data) ? data : (data && (data[key] || data.items)) || []);
const nameOf = (o) => (typeof o === "string" ? o : pick(o, "name", "corpus", "document", "id"));
const countOf = (v) => (Array.isArray(v) ? v.length : v);

function when(v) {
  if (v === undefined || v === null) return "–";
  const d = typeof v === "number" ? new Date(v * 1000) : new Date(v);
  return Number.isNaN(d.getTime()) ? String(v) : d.toLocaleString("en-GB", { hour12: false });
}

export function mount(root, { api, toast }) {
  const tenant = h("input", { id: "corpus-tenant", type: "text", value: "default", spellcheck: "false" });
  const corporaBox = h("div", { id: "corpora" });
  const docsBox = h("div", { id: "corpus-documents" });
  const form = h("form", { class: "form-row" }, h("label", { class: "field" }, "Tenant", tenant), h("button", { type: "submit" }, "Show corpora"));
  root.append(
    h("div", { class: "page-head" }, h("h1", {}, "Corpora")),
    card("Corpora", h("div", {}, form, corporaBox), { note: "The documents a tenant's RAG requests retrieve from (deja corpus …)." }),
    docsBox,
  );

  async function loadCorpora() {
    clear(docsBox);
    clear(corporaBox, h("p", { class: "note" }, "Loading…"));
    let r;
    try {
      r = await api.request("GET", `/admin/corpora${query({ tenant: tenant.value.trim() })}`, { allow: [404] });
    } catch (err) {
      clear(corporaBox, message(err.message, "error"));
      return;
    }
    const corpora = r.status === 404 ? [] : listOf(r.data, "corpora");
    if (!corpora.length) {
      corporaBox.dataset.state = "empty";
      clear(corporaBox, h("div", { class: "empty-state", id: "corpora-empty" }, h("strong", {}, "No corpora"), h("p", { class: "note" }, r.status === 404 ? "This gateway has no corpora for that tenant (or no corpus API). Ingest documents with `deja corpus ingest PATH… --corpus NAME`." : "This tenant has no corpus yet. Ingest documents with `deja corpus ingest PATH… --corpus NAME`.")));
      return;
    }
    corporaBox.dataset.state = "list";
    const maxChunks = Math.max(1, ...corpora.map((c) => countOf(pick(c, "chunks", "chunk_count")) || 0));
    clear(
      corporaBox,
      h("table", { class: "table" },
        h("thead", {}, h("tr", {}, h("th", {}, "corpus"), h("th", { class: "num" }, "documents"), h("th", {}, "chunks"), h("th", {}, ""))),
        h("tbody", {}, corpora.map((c) => {
          const name = nameOf(c);
          const chunks = countOf(pick(c, "chunks", "chunk_count"));
          return h("tr", { "data-corpus": name },
            h("td", {}, h("strong", {}, name)),
            h("td", { class: "num" }, num(countOf(pick(c, "documents", "document_count")))),
            h("td", {}, chunks === undefined ? "–" : meter(chunks, { max: maxChunks, color: "#0f766e", label: num(chunks) })),
            h("td", {}, h("button", { class: "ghost small", type: "button", onclick: () => loadDocuments(name) }, "Documents")));
        }))),
    );
  }

  async function loadDocuments(corpus) {
    const t = tenant.value.trim();
    clear(docsBox, h("p", { class: "note" }, "Loading…"));
    let data;
    try {
      data = await api.get(`/admin/corpora/${encodeURIComponent(corpus)}/documents${query({ tenant: t })}`);
    } catch (err) {
      clear(docsBox, message(err.message, "error"));
      return;
    }
    const docs = listOf(data, "documents");
    const maxChunks = Math.max(1, ...docs.map((d) => countOf(pick(d, "chunks", "chunk_count")) || 0));
    const upload = h("input", { type: "file", id: "corpus-upload" });
    const uploadBtn = h("button", { type: "button" }, "Add or replace a document");
    uploadBtn.addEventListener("click", () => upload.click());
    upload.addEventListener("change", () => upload.files[0] && put(corpus, upload.files[0].name, upload.files[0]));
    const rows = docs.map((d) => {
      const name = nameOf(d);
      const chunks = countOf(pick(d, "chunks", "chunk_count"));
      const file = h("input", { type: "file", hidden: true });
      file.addEventListener("change", () => file.files[0] && put(corpus, name, file.files[0]));
      const confirm = h("button", { class: "danger small", type: "button", hidden: true }, "Confirm remove");
      const remove = h("button", { class: "ghost small danger", type: "button" }, "Remove…");
      remove.addEventListener("click", () => { remove.hidden = true; confirm.hidden = false; });
      confirm.addEventListener("click", () => del(corpus, name));
      return h("tr", { "data-document": name },
        h("td", {}, name),
        h("td", { class: "num" }, num(pick(d, "version"))),
        h("td", {}, chunks === undefined ? "–" : meter(chunks, { max: maxChunks, color: "#2563eb", label: num(chunks) })),
        h("td", { class: "hide-narrow" }, when(pick(d, "updated_at", "ingested_at", "created_at"))),
        h("td", { class: "actions" }, h("button", { class: "ghost small", type: "button", onclick: () => file.click() }, "Re-ingest…"), file, remove, confirm));
    });
    clear(docsBox, card(`Documents in ${corpus}`, h("div", {},
      docs.length
        ? h("table", { class: "table" }, h("thead", {}, h("tr", {}, h("th", {}, "document"), h("th", { class: "num" }, "version"), h("th", {}, "chunks"), h("th", { class: "hide-narrow" }, "updated"), h("th", {}, ""))), h("tbody", {}, rows))
        : message("No documents in this corpus.", "info"),
      h("div", { class: "actions" }, uploadBtn, upload)), { note: "Re-ingesting a changed document bumps its version and invalidates the answers built from it." }));
  }

  async function put(corpus, document, file) {
    const t = tenant.value.trim();
    try {
      const bytes = await file.arrayBuffer();
      await api.request("PUT", `/admin/corpora/${encodeURIComponent(corpus)}/documents/${encodeURIComponent(document)}${query({ tenant: t })}`, { body: bytes, contentType: file.type || "application/octet-stream" });
      toast(`Ingested ${document}`);
      await loadDocuments(corpus);
    } catch (err) {
      toast(err.message, "error");
    }
  }

  async function del(corpus, document) {
    const t = tenant.value.trim();
    try {
      await api.del(`/admin/corpora/${encodeURIComponent(corpus)}/documents/${encodeURIComponent(document)}${query({ tenant: t })}`);
      toast(`Removed ${document}`);
      await loadDocuments(corpus);
    } catch (err) {
      toast(err.message, "error");
    }
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    loadCorpora();
  });
  loadCorpora();
  return null;
}
