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
const corpusName = (o) => (typeof o === "string" ? o : pick(o, "name", "corpus", "id"));
const documentName = (o) => (typeof o === "string" ? o : pick(o, "document", "name", "id"));
// Document ids are paths ("docs/guide.md"): each segment is encoded, the slashes kept.
const docPath = (corpus, document) => `/admin/corpora/${encodeURIComponent(corpus)}/documents/${String(document).split("/").map(encodeURIComponent).join("/")}`;
const countOf = (v) => (Array.isArray(v) ? v.length : v);

function when(v) {
  if (v === undefined || v === null) return "–";
  const d = typeof v === "number" ? new Date(v * 1000) : new Date(v);
  return Number.isNaN(d.getTime()) ? String(v) : d.toLocaleString("en-GB", { hour12: false });
}

const INGEST = "Ingest documents with deja corpus ingest PATH… --corpus NAME.";

function corporaTable(corpora, onOpen) {
  const maxChunks = Math.max(1, ...corpora.map((c) => countOf(pick(c, "chunks", "chunk_count")) || 0));
  return h("table", { class: "table" },
    h("thead", {}, h("tr", {}, h("th", {}, "corpus"), h("th", { class: "num" }, "documents"), h("th", {}, "chunks"), h("th", {}, ""))),
    h("tbody", {}, corpora.map((c) => {
      const name = corpusName(c);
      const chunks = countOf(pick(c, "chunks", "chunk_count"));
      return h("tr", { "data-corpus": name },
        h("td", {}, h("strong", {}, name)),
        h("td", { class: "num" }, num(countOf(pick(c, "documents", "document_count")))),
        h("td", {}, chunks === undefined ? "–" : meter(chunks, { max: maxChunks, color: "#0f766e", label: num(chunks) })),
        h("td", {}, h("button", { class: "ghost small", type: "button", onclick: () => onOpen(name) }, "Documents")));
    })));
}

// One document: version, chunks, format, and its re-ingest (file picker) and remove actions.
function documentRow(d, maxChunks, { reingest, remove }) {
  const name = documentName(d);
  const chunks = countOf(pick(d, "chunks", "chunk_count"));
  const file = h("input", { type: "file", hidden: true });
  file.addEventListener("change", () => file.files[0] && reingest(name, file.files[0]));
  const confirm = h("button", { class: "danger small", type: "button", hidden: true }, "Confirm remove");
  const ask = h("button", { class: "ghost small danger", type: "button" }, "Remove…");
  ask.addEventListener("click", () => { ask.hidden = true; confirm.hidden = false; });
  confirm.addEventListener("click", () => remove(name));
  return h("tr", { "data-document": name },
    h("td", {}, h("span", {}, name), d.title ? h("span", { class: "note block" }, d.title) : null),
    h("td", { class: "num" }, num(pick(d, "version"))),
    h("td", {}, chunks === undefined ? "–" : meter(chunks, { max: maxChunks, color: "#2563eb", label: num(chunks) })),
    h("td", { class: "hide-narrow" }, [d.format || "", d.bytes ? ` · ${num(d.bytes / 1024, 1)} KiB` : ""].join("")),
    h("td", { class: "hide-narrow" }, when(pick(d, "ingested_at", "updated_at", "created_at"))),
    h("td", { class: "actions" }, h("button", { class: "ghost small", type: "button", onclick: () => file.click() }, "Re-ingest…"), file, ask, confirm));
}

function documentsTable(docs, actions) {
  const maxChunks = Math.max(1, ...docs.map((d) => countOf(pick(d, "chunks", "chunk_count")) || 0));
  return h("table", { class: "table" },
    h("thead", {}, h("tr", {}, h("th", {}, "document"), h("th", { class: "num" }, "version"), h("th", {}, "chunks"), h("th", { class: "hide-narrow" }, "format"), h("th", { class: "hide-narrow" }, "ingested"), h("th", {}, ""))),
    h("tbody", {}, docs.map((d) => documentRow(d, maxChunks, actions))));
}

class CorporaPage {
  constructor(root, api, toast) {
    this.api = api;
    this.toast = toast;
    this.tenant = h("input", { id: "corpus-tenant", type: "text", value: "default", spellcheck: "false" });
    this.corporaBox = h("div", { id: "corpora" });
    this.docsBox = h("div", { id: "corpus-documents" });
    const form = h("form", { class: "form-row" }, h("label", { class: "field" }, "Tenant", this.tenant), h("button", { type: "submit" }, "Show corpora"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.loadCorpora();
    });
    root.append(
      h("div", { class: "page-head" }, h("h1", {}, "Corpora")),
      card("Corpora", h("div", {}, form, this.corporaBox), { note: "The documents a tenant's RAG requests retrieve from (deja corpus …)." }),
      this.docsBox,
    );
  }

  t() {
    return query({ tenant: this.tenant.value.trim() });
  }

  async loadCorpora() {
    clear(this.docsBox);
    clear(this.corporaBox, h("p", { class: "note" }, "Loading…"));
    let r;
    try {
      // 404: no corpus API on this gateway; 400: corpora switched off (the message says so).
      r = await this.api.request("GET", `/admin/corpora${this.t()}`, { allow: [400, 404] });
    } catch (err) {
      clear(this.corporaBox, message(err.message, "error"));
      return;
    }
    const corpora = r.status === 200 ? listOf(r.data, "corpora") : [];
    this.corporaBox.dataset.state = corpora.length ? "list" : "empty";
    if (corpora.length) {
      clear(this.corporaBox, corporaTable(corpora, (name) => this.loadDocuments(name)));
      return;
    }
    const why = r.status === 200 ? "This tenant has no corpus yet." : r.status === 400 && r.data && r.data.error ? r.data.error.message : "This gateway has no corpus API.";
    clear(this.corporaBox, h("div", { class: "empty-state", id: "corpora-empty" }, h("strong", {}, "No corpora"), h("p", { class: "note" }, `${why} ${INGEST}`)));
  }

  async loadDocuments(corpus) {
    clear(this.docsBox, h("p", { class: "note" }, "Loading…"));
    let docs;
    try {
      docs = listOf(await this.api.get(`/admin/corpora/${encodeURIComponent(corpus)}/documents${this.t()}`), "documents");
    } catch (err) {
      clear(this.docsBox, message(err.message, "error"));
      return;
    }
    const actions = { reingest: (name, file) => this.put(corpus, name, file), remove: (name) => this.del(corpus, name) };
    const upload = h("input", { type: "file", id: "corpus-upload" });
    upload.addEventListener("change", () => upload.files[0] && this.put(corpus, upload.files[0].name, upload.files[0]));
    const add = h("button", { type: "button", onclick: () => upload.click() }, "Add or replace a document");
    clear(this.docsBox, card(`Documents in ${corpus}`, h("div", {},
      docs.length ? documentsTable(docs, actions) : message("No documents in this corpus.", "info"),
      h("div", { class: "actions" }, add, upload)), { note: "Re-ingesting a changed document bumps its version and invalidates the answers built from it." }));
  }

  async put(corpus, document, file) {
    try {
      const body = await file.arrayBuffer();
      const r = await this.api.request("PUT", `${docPath(corpus, document)}${this.t()}`, { body, contentType: file.type || "application/octet-stream" });
      const d = r.data || {};
      this.toast(d.status ? `${document}: ${d.status}${d.version ? ` (version ${d.version}, ${d.chunks} chunks)` : ""}` : `Ingested ${document}`);
      await this.loadDocuments(corpus);
    } catch (err) {
      this.toast(err.message, "error");
    }
  }

  async del(corpus, document) {
    try {
      const d = (await this.api.del(`${docPath(corpus, document)}${this.t()}`)) || {};
      this.toast(`Removed ${document}${d.invalidated !== undefined ? ` and ${d.invalidated} cached answers built from it` : ""}`);
      await this.loadDocuments(corpus);
    } catch (err) {
      this.toast(err.message, "error");
    }
  }
}

export function mount(root, { api, toast }) {
  new CorporaPage(root, api, toast).loadCorpora();
  return null;
}
