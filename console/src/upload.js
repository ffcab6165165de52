// Chunked uploads (sfmapi §6.3) that survive a dropped connection: the upload id is
// kept in session storage per file, and after any failure the server's
// `received_bytes` says where to go on, so nothing is sent twice or skipped.

import { api, ApiError } from './api.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const keyOf = (file) => `tessera.upload.${file.name}.${file.size}.${file.lastModified}`;

/**
 * Upload one file; `onProgress(sent, total)` after each chunk. Answers the blob's
 * SHA-256 once finalized. Retries a failed chunk up to 8 times with backoff, each time
 * asking the server how much it already has.
 */
export async function uploadFile(file, onProgress = () => {}) {
  if (file.size === 0) throw new ApiError(422, { detail: `${file.name} is empty` });
  const saved = sessionStorage.getItem(keyOf(file));
  let up = null;
  if (saved) {
    try { up = await api(`/v1/uploads/${saved}`); } catch { up = null; }
    // Only an upload that can still take bytes or be finalized is resumed.
    if (up && (up.expected_size !== file.size || !['open', 'received', 'finalized'].includes(up.state))) up = null;
  }
  if (!up) up = await api('/v1/uploads', { method: 'POST', body: { expected_size: file.size } });
  sessionStorage.setItem(keyOf(file), up.upload_id);
  // The server says how much one chunk may carry.
  const step = up.max_chunk_bytes || 2 << 20;
  let sent = up.received_bytes || 0;
  let failures = 0;
  onProgress(sent, file.size);
  while (up.state === 'open' && sent < file.size) {
    const end = Math.min(sent + step, file.size);
    try {
      const r = await api(`/v1/uploads/${up.upload_id}`, {
        method: 'PATCH',
        body: file.slice(sent, end),
        headers: { 'content-range': `bytes ${sent}-${end - 1}/${file.size}` },
      });
      sent = r.received_bytes ?? end;
      failures = 0;
    } catch (e) {
      const retry = e.status === 0 || e.status === 416 || e.status === 409 || e.status >= 500;
      if (!retry || ++failures > 8) throw e;
      await sleep(Math.min(8000, 250 * 2 ** failures));
      const now = await api(`/v1/uploads/${up.upload_id}`).catch(() => null);
      if (now) { sent = now.received_bytes; up = now; }
    }
    onProgress(sent, file.size);
  }
  const done = up.state === 'finalized' ? up : await api(`/v1/uploads/${up.upload_id}:finalize`, { method: 'POST' });
  sessionStorage.removeItem(keyOf(file));
  return done.blob_sha;
}
