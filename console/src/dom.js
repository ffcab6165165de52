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

/** An error shown where it happened, with what the server said. */
export function errorBox(e) {
  const p = e?.problem || {};
  return h('div', { class: 'error', role: 'alert' },
    h('strong', {}, p.title || 'Error'), ' ', e?.message || String(e),
    p.capability ? h('span', { class: 'dim' }, ` (capability ${p.capability})`) : null);
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
  phase(p) { return String(p || '').replaceAll('_', ' '); },
};

/** A labelled form field. */
export function field(label, input, hint) {
  const id = input.id || `f-${Math.random().toString(36).slice(2)}`;
  input.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), input, hint ? h('small', { class: 'dim' }, hint) : null);
}
