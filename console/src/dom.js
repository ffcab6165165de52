// Small DOM helpers: elements from data (never from HTML strings, so nothing a server
// or a file name says can become markup), a status line, and formatting.

/** `h('button', {onclick, class: 'x'}, 'text', child)`. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) {
      // Handlers only as functions: a string would be script from data.
      if (typeof v !== 'function') throw new TypeError(`h(): ${k} must be a function`);
      el.addEventListener(k.slice(2), v);
    }
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
/** An SVG element with attributes (its text, if any, set with `textContent`). */
export function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

/** A status as a badge (job, task, photo). */
export function badge(status, attrs = {}) {
  return h('span', { class: `badge ${status}`, ...attrs }, status);
}

/** The sfmapi recipes that make a reconstruction (the others are stage jobs). */
export const RECON_RECIPES = ['incremental', 'global', 'hierarchical'];

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  for (const c of children.flat(Infinity)) {
    if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** A short message for the status line (read out by screen readers). */
export function toast(message, kind = 'info') {
  const t = document.getElementById('toast');
  t.className = kind;
  t.textContent = message;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.textContent = ''; t.className = ''; }, 6000);
}

/** What an HTTP status means to the person who asked, instead of its reason phrase. */
const HEADLINES = {
  0: 'The server did not answer.',
  400: 'That was not accepted.', 403: 'This key may not do that.', 404: 'Not found.',
  409: 'Not possible right now.', 413: 'Too large.', 415: 'Not a file type this accepts.',
  422: 'That was not accepted.', 429: 'Too many requests: try again shortly.',
  501: 'This server cannot do that.', 503: 'The server is busy: try again shortly.',
};

/** Ids (26-character ULIDs) shortened to their last six characters: people compare those. */
export const shortIds = (text) => String(text).replace(/\b[0-9A-HJKMNP-TV-Z]{26}\b/g, (id) => `…${id.slice(-6)}`);

/** An error shown where it happened, with what the server said (ids shortened; the full text on hover). */
export function errorBox(e) {
  const p = e?.problem || {};
  const status = e?.status;
  const headline = HEADLINES[status] || (status >= 500 ? 'The server failed.' : 'Something went wrong.');
  const said = e?.message || String(e);
  return h('div', { class: 'error', role: 'alert', title: said },
    h('strong', {}, headline), ' ', shortIds(said),
    p.capability ? h('span', { class: 'dim' }, ` (this server lacks ${p.capability})`) : null);
}

export const fmt = {
  bytes(n) {
    if (n == null) return '–';
    const u = ['B', 'KiB', 'MiB', 'GiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i += 1; }
    return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
  },
  time(iso) { return iso ? new Date(iso).toLocaleString() : '–'; },
  ms(ms) { return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`; },
  /** From one ISO time to another (or to now), as people say it: 42 s, 3 min 5 s, 2 h 4 min. */
  duration(from, to) {
    const s = Math.max(0, Math.round(((to ? new Date(to) : new Date()) - new Date(from)) / 1000));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  },
  phase(p) { return String(p || '').replaceAll('_', ' '); },
};

/** A labelled form field. */
export function field(label, input, hint) {
  const id = input.id || `f-${Math.random().toString(36).slice(2)}`;
  input.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), input, hint ? h('small', { class: 'dim' }, hint) : null);
}

/**
 * A reconstruction's options in a few words ("incremental · sequential pairs · two-stage
 * BA · GPS · PLY, NVM"), from the job's `x-tessera.options`: what tells two runs over
 * one dataset apart. `datasets` maps dataset ids to names, where known.
 */
export function describeSpec(job, datasets = new Map()) {
  const o = job['x-tessera']?.options;
  if (!o) return job.recipe;
  const parts = [];
  if (o.image_set && datasets.has(o.image_set)) parts.push(datasets.get(o.image_set));
  parts.push(o.mapper || job.recipe);
  if (o.pairs?.strategy) parts.push(`${o.pairs.strategy.replaceAll('_', ' ')} pairs`);
  if (o.ba && o.ba !== 'standard') parts.push(`${o.ba.replaceAll('_', '-')} BA`);
  if (o.georef?.mode && o.georef.mode !== 'none') parts.push(`georeferenced by ${o.georef.mode.toUpperCase()}`);
  const ex = (o.exports || []).filter((e) => e !== 'colmap-bin' && e !== 'points-bin');
  const names = { ply: 'PLY', nvm: 'NVM', 'colmap-text': 'COLMAP text' };
  if (ex.length) parts.push(`exports ${ex.map((e) => names[e] || e).join(', ')}`);
  if (o.max_image_size) parts.push(`≤ ${o.max_image_size} px`);
  return parts.join(' · ');
}

/** What COLMAP's camera models assume, in words a photographer knows. */
const CAMERA_MODELS = {
  SIMPLE_PINHOLE: 'one focal length, no lens distortion',
  PINHOLE: 'two focal lengths, no lens distortion',
  SIMPLE_RADIAL: 'one focal length and one distortion term: phones and most cameras',
  RADIAL: 'one focal length and two distortion terms: wider lenses',
  OPENCV: 'two focal lengths, radial and tangential distortion: action and drone cameras',
  OPENCV_FISHEYE: 'fisheye lenses',
  FULL_OPENCV: 'strong distortion, many photos needed',
  SIMPLE_RADIAL_FISHEYE: 'fisheye, one distortion term',
  RADIAL_FISHEYE: 'fisheye, two distortion terms',
  FOV: 'very wide lenses',
  THIN_PRISM_FISHEYE: 'fisheye with thin-prism distortion',
};
export const cameraModelSays = (name) => CAMERA_MODELS[name] || 'see COLMAP\'s camera models';

/**
 * A place to drop files, or to choose them with the system's picker (by keyboard too):
 * `onFiles` gets every file dropped or chosen. The hidden input carries `label`.
 */
export function dropZone({ id, label, text, accept = 'image/*,.heic,.heif', multiple = true, onFiles }) {
  const input = h('input', {
    type: 'file', multiple, accept, id, class: 'visually-hidden', 'aria-label': label,
    onchange: () => { const files = [...input.files]; onFiles(files); input.value = ''; },
  });
  const zone = h('div', {
    class: 'drop',
    ondragover: (e) => { e.preventDefault(); zone.classList.add('over'); },
    ondragleave: () => zone.classList.remove('over'),
    ondrop: (e) => { e.preventDefault(); zone.classList.remove('over'); onFiles([...e.dataTransfer.files]); },
  }, h('p', {}, text, ' '),
  h('label', { for: id, class: 'button', tabindex: 0, onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); input.click(); } } }, 'choose files'), input);
  return zone;
}

/**
 * Ask before deleting (the browser's own dialog, which a keyboard and a screen reader
 * handle), then run `act`; an error is shown in `out`.
 */
export async function confirmDelete(question, act, out) {
  if (!window.confirm(question)) return;
  try { await act(); } catch (e) { if (out) fill(out, errorBox(e)); else toast(e.message, 'error'); }
}

/**
 * The pipeline request for a reconstruction of `dataset` (what the recipe form sends,
 * and what "run again" sends again from a run's options). `pairs` absent: the server
 * chooses.
 */
export function pipelineRequest({ dataset, mapper, pairs, ba, georeference, exports, crs }) {
  const options = { ba: ba || 'standard', georeference: georeference || 'none', exports };
  // The survey exports' coordinate system: left to the server's default when not given.
  if (crs) options.crs = crs;
  const body = { dataset_id: dataset, spec: { kind: mapper, 'x-tessera': options } };
  if (pairs) body.pairs = pairs;
  return body;
}
