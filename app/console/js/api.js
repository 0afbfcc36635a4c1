// The admin API client. The admin key travels only in the Authorization header of fetch
// calls to this origin; it is kept in sessionStorage (this tab, until it closes or the user
// signs out) and never appears in a URL.

const STORAGE_KEY = "deja.adminKey";

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function savedKey() {
  return sessionStorage.getItem(STORAGE_KEY);
}

export function forgetKey() {
  sessionStorage.removeItem(STORAGE_KEY);
}

export class Api {
  constructor(key, onUnauthorized = () => {}) {
    this.key = key;
    this.onUnauthorized = onUnauthorized;
  }

  remember() {
    sessionStorage.setItem(STORAGE_KEY, this.key);
  }

  async request(method, path, { json, body, contentType, allow = [] } = {}) {
    const headers = { authorization: `Bearer ${this.key}`, accept: "application/json" };
    if (json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(json);
    } else if (contentType) {
      headers["content-type"] = contentType;
    }
    let resp;
    try {
      resp = await fetch(path, { method, headers, body, cache: "no-store", credentials: "omit" });
    } catch (err) {
      throw new ApiError(0, `the gateway did not answer (${err.message})`, "network");
    }
    const data = parsed(await resp.text());
    if (resp.ok || allow.includes(resp.status)) return { status: resp.status, data };
    throw this.failure(resp, data);
  }

  failure(resp, data) {
    const err = data && data.error ? data.error : {};
    const msg = err.message || (data && data.detail) || `${resp.status} ${resp.statusText}`;
    if (resp.status === 401) this.onUnauthorized(msg);
    return new ApiError(resp.status, typeof msg === "string" ? msg : JSON.stringify(msg), err.code);
  }

  // Save a file the gateway serves (sent with the key, so not a plain link); its size.
  async download(path, filename) {
    let resp;
    try {
      resp = await fetch(path, { headers: { authorization: `Bearer ${this.key}` }, cache: "no-store", credentials: "omit" });
    } catch (err) {
      throw new ApiError(0, `the gateway did not answer (${err.message})`, "network");
    }
    if (!resp.ok) throw this.failure(resp, parsed(await resp.text()));
    const blob = await resp.blob();
    if (!blob.size) return 0;
    const url = URL.createObjectURL(blob);
    const link = Object.assign(document.createElement("a"), { href: url, download: filename, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
    return blob.size;
  }

  async get(path, options) {
    return (await this.request("GET", path, options)).data;
  }

  async post(path, json) {
    return (await this.request("POST", path, { json })).data;
  }

  async put(path, json) {
    return (await this.request("PUT", path, { json })).data;
  }

  async del(path) {
    return (await this.request("DELETE", path)).data;
  }
}

function parsed(text) {
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return null;
  }
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
}
