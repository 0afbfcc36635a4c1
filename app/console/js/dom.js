// Small DOM and formatting helpers. Every text from the server goes in through textContent
// (never innerHTML), so a cached question can never inject markup into the console.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "value") el.value = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function pct(x, digits = 1) {
  return x === null || x === undefined || Number.isNaN(x) ? "–" : `${(x * 100).toFixed(digits)}%`;
}

export function num(x, digits = 0) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return Number(x).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.abs(seconds);
  if (s < 1) return `${(seconds * 1000).toFixed(0)} ms`;
  if (s < 120) return `${seconds.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 7200) return `${(seconds / 60).toFixed(0)} min`;
  if (s < 172800) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toFixed(1)} d`;
}

export function clock(epochSeconds) {
  const d = new Date(epochSeconds * 1000);
  return d.toLocaleTimeString("en-GB", { hour12: false });
}

export function ago(epochSeconds) {
  return `${duration(Date.now() / 1000 - epochSeconds)} ago`;
}

export function fixed(x, digits = 3) {
  return x === null || x === undefined ? "–" : Number(x).toFixed(digits);
}

// A card with a title, an optional note and a body.
export function card(title, body, { note = null, cls = "" } = {}) {
  return h("section", { class: `card ${cls}` }, h("h2", {}, title), note ? h("p", { class: "note" }, note) : null, body);
}

export function message(text, kind = "info") {
  return h("p", { class: `msg ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

// Run fn at most once per `ms` after the last call.
export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
