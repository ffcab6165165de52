// A job's events (`GET /v1/jobs/{id}/events`) read over fetch rather than EventSource,
// which cannot send the API key. Resumes with `Last-Event-ID` after a dropped
// connection or a reload (the last id is kept per job in session storage), and applies
// an event only if its id is the next one: none missing, none twice.

import { api } from './api.js';

/** A job's statuses after which nothing more happens. */
export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'cancelled_dirty']);
/** Most events kept in session storage per job. */
const MAX_KEPT = 5000;

/** Split an SSE body into frames, keeping the unfinished tail. */
export function frames(buffer) {
  const out = [];
  let rest = buffer;
  let m;
  while ((m = /\r?\n\r?\n/.exec(rest))) {
    const block = rest.slice(0, m.index);
    rest = rest.slice(m.index + m[0].length);
    const f = { id: null, event: 'message', data: [] };
    for (const line of block.split(/\r?\n/)) {
      if (!line || line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
      if (field === 'id') f.id = value;
      else if (field === 'event') f.event = value;
      else if (field === 'data') f.data.push(value);
    }
    if (f.data.length) out.push({ ...f, data: f.data.join('\n') });
  }
  return { out, rest };
}

/**
 * Follow a job's events until it ends. `onEvent(event)` gets each event once, in
 * order, from the first after `after`; `onState({connected, reconnects, last})` follows
 * the connection. Answers a
 * handle with `stop()` and `drop()` (close the current connection, as a network would).
 */
export function follow(jobId, { onEvent, onState = () => {}, onEnd = () => {}, after = 0 }) {
  // What this tab already received, replayed first after a reload; the stream then
  // resumes after the last of them.
  const storeKey = `tessera.events.${jobId}`;
  let kept = [];
  try { kept = JSON.parse(sessionStorage.getItem(storeKey) || '[]'); } catch { kept = []; }
  if (!Array.isArray(kept)) kept = [];
  let last = 0;
  for (const e of kept) {
    if (e.seq !== last + 1) break;
    last = e.seq;
    // Events the caller already has (`after`) are not given again.
    if (e.seq > after) onEvent(e);
  }
  kept = kept.slice(0, last);
  if (after > last) {
    // Nothing kept past what the caller has (storage full or cleared): resume after it.
    kept = null;
    last = after;
  }
  // Written at most once a second; past MAX_KEPT (or the storage quota) nothing more is
  // kept and a reload replays the whole stream from the server instead.
  let saveTimer = null;
  const save = () => {
    saveTimer = null;
    if (!kept) return;
    try { sessionStorage.setItem(storeKey, JSON.stringify(kept)); } catch { kept = null; sessionStorage.removeItem(storeKey); }
  };
  const keep = (e) => {
    if (!kept) return;
    if (kept.length >= MAX_KEPT) {
      kept = null;
      clearTimeout(saveTimer);
      saveTimer = null;
      sessionStorage.removeItem(storeKey);
      return;
    }
    kept.push(e);
    saveTimer ||= setTimeout(save, 1000);
  };
  let stopped = false;
  let reconnects = 0;
  let controller = null;
  // Ends the wait between two connections early, when the stream is stopped.
  let wake = null;
  const state = (connected) => onState({ connected, reconnects, last });

  async function once() {
    controller = new AbortController();
    const headers = { Accept: 'text/event-stream' };
    if (last > 0) headers['Last-Event-ID'] = String(last);
    const r = await api(`/v1/jobs/${jobId}/events`, { raw: true, headers, signal: controller.signal });
    state(true);
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const { out, rest } = frames(buffer);
      buffer = rest;
      for (const f of out) {
        const seq = Number(f.id);
        if (!Number.isFinite(seq) || seq !== last + 1) continue;
        last = seq;
        const event = JSON.parse(f.data);
        keep(event);
        onEvent(event);
      }
    }
  }

  const loop = (async () => {
    let delay = 500;
    let idle = 0;
    while (!stopped) {
      const before = last;
      try {
        await once();
        delay = 500;
      } catch (e) {
        if (stopped) break;
        // A refused key or a job that is gone will not come back by retrying.
        if (e.status >= 400 && e.status < 500 && e.status !== 408 && e.status !== 429) {
          onState({ connected: false, reconnects, last, error: e.message });
          break;
        }
        delay = Math.min(8000, delay * 2);
      }
      state(false);
      if (stopped) break;
      // The stream ends when the job has ended and every event was sent; it also ends
      // when a connection drops. Only the job's status tells which.
      const job = await api(`/v1/jobs/${jobId}`).catch(() => null);
      if (stopped) break;
      if (job && TERMINAL.has(job.status) && last >= (await latest(jobId))) {
        if (saveTimer) { clearTimeout(saveTimer); save(); }
        if (!stopped) onEnd(job);
        break;
      }
      // Many reconnects in a row with nothing new: something is wrong; say so and stop.
      idle = last === before ? idle + 1 : 0;
      if (idle >= 30) {
        onState({ connected: false, reconnects, last, error: 'the event stream makes no progress' });
        break;
      }
      reconnects += 1;
      await new Promise((r) => { wake = r; setTimeout(r, delay * (idle > 3 ? 4 : 1)); });
      wake = null;
    }
  })();

  return {
    // Stops following; the promise settles once the loop has made its last request
    // (a page about to delete the run waits for it, so nothing asks for a run that is
    // gone).
    stop() {
      stopped = true;
      controller?.abort();
      wake?.();
      if (saveTimer) { clearTimeout(saveTimer); save(); }
      return loop;
    },
    drop() { controller?.abort(); },
  };
}

async function latest(jobId) {
  const p = await api(`/v1/jobs/${jobId}/progress`).catch(() => null);
  return p?.latest_event_id ?? 0;
}
