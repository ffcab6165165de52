// The console's only way to the server: the public HTTP API, with the key kept in
// session storage (never local storage, never a cookie), sent as a bearer token.

const KEY = 'tessera.apiKey';

export const auth = {
  get key() { return sessionStorage.getItem(KEY); },
  set key(v) { if (v) sessionStorage.setItem(KEY, v); else sessionStorage.removeItem(KEY); },
};

/** A problem+json answer, or a network failure (status 0). */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }
}

function headersWithAuth(extra = {}) {
  const h = { ...extra };
  if (auth.key) h.Authorization = `Bearer ${auth.key}`;
  return h;
}

const listeners = new Set();
/** Called with no argument whenever the server answers 401. */
export function onUnauthorized(f) { listeners.add(f); }

/**
 * Call the API. JSON bodies are sent as JSON; Blobs and byte arrays as they are.
 * Answers the parsed JSON (or null for 204), or the Response itself with `raw`.
 */
export async function api(path, { method = 'GET', body, headers = {}, raw = false, signal } = {}) {
  // The key goes to this server only: never to a URL of another origin (a presigned
  // download URL, say), whatever a caller passes.
  if (new URL(path, location.origin).origin !== location.origin) {
    throw new ApiError(0, { detail: `${path} is not on this server; the key is not sent there` });
  }
  const h = headersWithAuth(headers);
  let payload = body;
  const binary = body instanceof Blob || body instanceof ArrayBuffer || ArrayBuffer.isView(body);
  if (body !== undefined && !binary) {
    h['content-type'] = 'application/json';
    payload = JSON.stringify(body);
  } else if (binary && !h['content-type']) {
    h['content-type'] = 'application/octet-stream';
  }
  let r;
  try {
    r = await fetch(path, { method, headers: h, body: payload, signal });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, { detail: `the server did not answer (${e.message})` });
  }
  if (r.status === 401) listeners.forEach((f) => f());
  if (!r.ok && r.status !== 304) {
    let problem;
    try { problem = await r.json(); } catch { problem = { detail: `${r.status} ${r.statusText}` }; }
    throw new ApiError(r.status, problem);
  }
  if (raw) return r;
  if (r.status === 204) return null;
  const ct = r.headers.get('content-type') || '';
  return ct.includes('json') ? r.json() : r;
}

/** Every item of a paged list. */
export async function all(path) {
  const items = [];
  let token = null;
  do {
    const sep = path.includes('?') ? '&' : '?';
    const page = await api(token ? `${path}${sep}page_token=${encodeURIComponent(token)}` : path);
    items.push(...(page.items || []));
    token = page.next_page_token;
  } while (token);
  return items;
}

const blobCache = new Map();
/**
 * An object URL for bytes behind auth (an <img src> cannot send the key), cached by
 * path and `version`: a photo's files at one URL change when it is re-blurred, so
 * callers pass its `variant_version`. Cleared with the key ([`forget`]), so another
 * key never sees what this one fetched.
 */
export async function blobUrl(path, version = '') {
  const k = `${path}#${version}`;
  if (!blobCache.has(k)) {
    blobCache.set(k, api(path, { raw: true }).then(async (r) => URL.createObjectURL(await r.blob())));
    blobCache.get(k).catch(() => blobCache.delete(k));
  }
  return blobCache.get(k);
}

/** Hand `blob` to the browser as a file download named `name`. */
function saveBlob(blob, name) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
}

/** Bytes per request of a download: under the 6 MB a Lambda function may answer on AWS. */
const PART = 4 * 1024 * 1024;

/**
 * Download what `path` answers as a file: a plain link cannot send the key, so the bytes
 * are fetched with it, in Range parts of at most 4 MiB (a PLY of a survey is hundreds of
 * MB; on AWS one answer of the API function holds at most 6 MB), and saved under the name
 * the server's Content-Disposition gives (else `name`, else the path's last part).
 * `window.__tessera.downloadPart` sets a smaller part (tests).
 */
export async function download(path, name) {
  const part = window.__tessera?.downloadPart || PART;
  const first = await api(path, { raw: true, headers: { Range: `bytes=0-${part - 1}` } });
  const parts = [await first.blob()];
  const total = Number(/\/(\d+)$/.exec(first.headers.get('content-range') || '')?.[1]);
  if (first.status === 206 && Number.isFinite(total)) {
    for (let at = parts[0].size; at < total; at += part) {
      const r = await api(path, { raw: true, headers: { Range: `bytes=${at}-${Math.min(at + part, total) - 1}` } });
      if (r.status !== 206) throw new ApiError(r.status, { detail: `${path}: the server stopped answering in parts` });
      parts.push(await r.blob());
    }
  }
  const blob = new Blob(parts, { type: first.headers.get('content-type') || 'application/octet-stream' });
  if (first.status === 206 && blob.size !== total) throw new ApiError(0, { detail: `${path}: got ${blob.size} of ${total} bytes` });
  const given = /filename="([^"]+)"/.exec(first.headers.get('content-disposition') || '')?.[1];
  const saved = given || name || path.split('?')[0].split('/').pop();
  saveBlob(blob, saved);
  return { name: saved, bytes: blob.size };
}

/** Save `value` as a pretty-printed JSON file. */
export function saveJson(value, name) {
  saveBlob(new Blob([JSON.stringify(value, null, 2)], { type: 'application/json' }), name);
}

/** Drop the key and everything fetched or kept with it. */
export function forget() {
  auth.key = null;
  for (const p of blobCache.values()) p.then((u) => URL.revokeObjectURL(u)).catch(() => {});
  blobCache.clear();
  caps = null;
  for (const k of Object.keys(sessionStorage)) if (k.startsWith('tessera.')) sessionStorage.removeItem(k);
}

/** The capabilities, fetched once. */
let caps;
export function capabilities() {
  // A failure is not kept: the next call asks again.
  caps ||= api('/v1/capabilities').catch((e) => { caps = null; throw e; });
  return caps;
}
