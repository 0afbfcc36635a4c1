// The console shell: sign-in, navigation by URL fragment (#overview, #entries/near-misses…),
// and the page modules. Each page's mount(root, ctx) returns a stop() for its timers.

import { Api, ApiError, forgetKey, savedKey } from "./api.js";
import { clear, h, message } from "./dom.js";
import * as overview from "./overview.js";
import * as quality from "./quality.js";
import * as entries from "./entries.js";
import * as corpora from "./corpora.js";
import * as audit from "./audit.js";
import { mountBanner } from "./learning.js";

const PAGES = { overview, quality, entries, corpora, audit };

const app = document.getElementById("app");
const loginView = document.getElementById("login");
const loginForm = document.getElementById("login-form");
const loginError = document.getElementById("login-error");
const keyInput = document.getElementById("admin-key");
const main = document.getElementById("main");
const nav = document.getElementById("nav");
const toastBox = document.getElementById("toast");

let api = null;
let stopPage = null;
let stopBanner = null;
const banner = document.getElementById("banner");

function toast(text, kind = "ok") {
  const el = h("div", { class: `toast ${kind}`, role: "status" }, text);
  toastBox.append(el);
  setTimeout(() => el.remove(), 4000);
}

function showLogin(reason = "") {
  if (stopPage) stopPage();
  if (stopBanner) stopBanner();
  stopPage = null;
  stopBanner = null;
  banner.hidden = true;
  api = null;
  forgetKey();
  app.hidden = true;
  loginView.hidden = false;
  loginError.textContent = reason;
  keyInput.value = "";
  keyInput.focus();
}

async function signIn(key, { quiet = false } = {}) {
  const candidate = new Api(key, (msg) => showLogin(`Signed out: ${msg}`));
  try {
    await candidate.get("/admin/semantic");
  } catch (err) {
    if (quiet) return false;
    const text = err instanceof ApiError && err.status === 401
      ? "That key was not accepted."
      : err instanceof ApiError && err.status === 403
        ? err.message
        : `Cannot sign in: ${err.message}`;
    loginError.textContent = text;
    return false;
  }
  candidate.remember();
  api = candidate;
  loginView.hidden = true;
  app.hidden = false;
  stopBanner = mountBanner(banner, api);
  route();
  return true;
}

function route() {
  if (!api) return;
  const [name, sub] = (location.hash.replace(/^#/, "") || "overview").split("/");
  const page = PAGES[name] ? name : "overview";
  for (const a of nav.querySelectorAll("a")) a.setAttribute("aria-current", a.dataset.page === page ? "page" : "false");
  if (stopPage) stopPage();
  const root = clear(main);
  root.dataset.page = page;
  document.title = `deja · ${PAGES[page].title}`;
  try {
    stopPage = PAGES[page].mount(root, { api, toast, sub, navigate: (hash) => (location.hash = hash) }) || null;
  } catch (err) {
    root.append(message(`This page failed: ${err.message}`, "error"));
  }
}

loginForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const key = keyInput.value.trim();
  if (!key) {
    loginError.textContent = "Enter the admin key (DEJA_ADMIN_KEY).";
    return;
  }
  loginError.textContent = "";
  signIn(key);
});

document.getElementById("logout").addEventListener("click", () => showLogin("Signed out."));
window.addEventListener("hashchange", route);

const remembered = savedKey();
if (remembered) {
  signIn(remembered, { quiet: true }).then((ok) => ok || showLogin());
} else {
  showLogin();
}
