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
      // 404: no corpus API on this gateway; 400: corpora switched off (the message says so).
      r = await api.request("GET", `/admin/corpora${query({ tenant: tenant.value.trim() })}`, { allow: [400, 404] });
    } catch (err) {
      clear(corporaBox, message(err.message, "error"));
      return;
    }
    const corpora = r.status === 200 ? listOf(r.data, "corpora") : [];
    if (!corpora.length) {
      corporaBox.dataset.state = "empty";
      const why = r.status === 200 ? "This tenant has no corpus yet." : r.status === 400 && r.data && r.data.error ? r.data.error.message : "This gateway has no corpus API.";
      clear(corporaBox, h("div", { class: "empty-state", id: "corpora-empty" }, h("strong", {}, "No corpora"), h("p", { class: "note" }, `${why} Ingest documents with deja corpus ingest PATH… --corpus NAME.`)));
      return;
    }
    corporaBox.dataset.state = "list";
    const maxChunks = Math.max(1, ...corpora.map((c) => countOf(pick(c, "chunks", "chunk_count")) || 0));
    clear(
      corporaBox,
      h("table", { class: "table" },
        h("thead", {}, h("tr", {}, h("th", {}, "corpus"), h("th", { class: "num" }, "documents"), h("th", {}, "chunks"), h("th", {}, ""))),
        h("tbody", {}, corpora.map((c) => {
          const name = corpusName(c);
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
      const name = documentName(d);
      const chunks = countOf(pick(d, "chunks", "chunk_count"));
      const file = h("input", { type: "file", hidden: true });
      file.addEventListener("change", () => file.files[0] && put(corpus, name, file.files[0]));
      const confirm = h("button", { class: "danger small", type: "button", hidden: true }, "Confirm remove");
      const remove = h("button", { class: "ghost small danger", type: "button" }, "Remove…");
      remove.addEventListener("click", () => { remove.hidden = true; confirm.hidden = false; });
      confirm.addEventListener("click", () => del(corpus, name));
      return h("tr", { "data-document": name },
        h("td", {}, h("span", {}, name), d.title ? h("span", { class: "note block" }, d.title) : null),
        h("td", { class: "num" }, num(pick(d, "version"))),
        h("td", {}, chunks === undefined ? "–" : meter(chunks, { max: maxChunks, color: "#2563eb", label: num(chunks) })),
        h("td", { class: "hide-narrow" }, [d.format || "", d.bytes ? ` · ${num(d.bytes / 1024, 1)} KiB` : ""].join("")),
        h("td", { class: "hide-narrow" }, when(pick(d, "ingested_at", "updated_at", "created_at"))),
        h("td", { class: "actions" }, h("button", { class: "ghost small", type: "button", onclick: () => file.click() }, "Re-ingest…"), file, remove, confirm));
    });
    clear(docsBox, card(`Documents in ${corpus}`, h("div", {},
      docs.length
        ? h("table", { class: "table" }, h("thead", {}, h("tr", {}, h("th", {}, "document"), h("th", { class: "num" }, "version"), h("th", {}, "chunks"), h("th", { class: "hide-narrow" }, "format"), h("th", { class: "hide-narrow" }, "ingested"), h("th", {}, ""))), h("tbody", {}, rows))
        : message("No documents in this corpus.", "info"),
      h("div", { class: "actions" }, uploadBtn, upload)), { note: "Re-ingesting a changed document bumps its version and invalidates the answers built from it." }));
  }

  async function put(corpus, document, file) {
    const t = tenant.value.trim();
    try {
      const bytes = await file.arrayBuffer();
      const r = await api.request("PUT", `${docPath(corpus, document)}${query({ tenant: t })}`, { body: bytes, contentType: file.type || "application/octet-stream" });
      const d = r.data || {};
      toast(d.status ? `${document}: ${d.status}${d.version ? ` (version ${d.version}, ${d.chunks} chunks)` : ""}` : `Ingested ${document}`);
      await loadDocuments(corpus);
    } catch (err) {
      toast(err.message, "error");
    }
  }

  async function del(corpus, document) {
    const t = tenant.value.trim();
    try {
      const d = (await api.del(`${docPath(corpus, document)}${query({ tenant: t })}`)) || {};
      toast(`Removed ${document}${d.invalidated !== undefined ? ` and ${d.invalidated} cached answers built from it` : ""}`);
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
