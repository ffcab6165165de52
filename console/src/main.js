// The console: a hash router over views, each built only from the public API. With
// `--auth api_key` the page asks for a key first and keeps it in session storage.

import { api, auth, forget, onUnauthorized } from './api.js';
import { h, fill, errorBox } from './dom.js';
import * as projects from './views/projects.js';
import * as dataset from './views/dataset.js';
import * as job from './views/job.js';
import * as privacy from './views/privacy.js';
import * as webhooks from './views/webhooks.js';

// What tests and people debugging can read: the page's own state, not pixels.
window.__tessera = { errors: [], views: 0 };

const routes = [
  [/^#\/?$/, () => projects.list()],
  [/^#\/projects\/([\w-]+)$/, (pid) => projects.detail(pid)],
  [/^#\/projects\/([\w-]+)\/datasets\/([\w-]+)$/, (pid, did) => dataset.view(pid, did)],
  [/^#\/projects\/([\w-]+)\/privacy$/, (pid) => privacy.photos(pid)],
  [/^#\/photos\/([\w-]+)$/, (id) => privacy.photo(id)],
  [/^#\/jobs\/([\w-]+)$/, (id) => job.view(id)],
  [/^#\/webhooks$/, () => webhooks.list()],
  [/^#\/webhooks\/([\w-]+)$/, (id) => webhooks.detail(id)],
];

let cleanup = null;
// Renders overlap when the address changes mid-load: only the newest may draw.
let rendering = 0;
// Whether this tab has been let in: then a 401 comes through `onUnauthorized`, and no
// page needs a probe first.
let admitted = false;

function askForKey(main, why) {
  const input = h('input', { type: 'password', autocomplete: 'off', placeholder: 'tsk_…', required: true });
  fill(main,
    h('section', { class: 'card narrow' },
      h('h1', {}, 'API key'),
      h('p', {}, why || 'This server asks for an API key. It is kept in this tab only (session storage) and sent with each request.'),
      h('form', {
        onsubmit: (e) => {
          e.preventDefault();
          auth.key = input.value.trim();
          render();
        },
      }, h('label', { for: 'key' }, 'Key'), Object.assign(input, { id: 'key' }), h('button', { type: 'submit' }, 'Use this key'))));
  input.focus();
}

async function render() {
  const mine = ++rendering;
  const main = document.getElementById('main');
  cleanup?.();
  cleanup = null;
  document.getElementById('signout').hidden = !auth.key;
  const route = routes.find(([re]) => re.test(location.hash || '#/'));
  if (!route) {
    fill(main, h('p', {}, 'No such page. ', h('a', { href: '#/' }, 'Projects')));
    return;
  }
  try {
    if (!admitted) {
      // One authenticated call first: 401 means a key is needed.
      const hadKey = Boolean(auth.key);
      const probe = await api('/v1/projects?page_size=1', { raw: true }).catch((e) => e);
      if (mine !== rendering) return;
      if (probe?.status === 401) {
        askForKey(main, hadKey ? 'That key was refused. Enter another.' : undefined);
        return;
      }
      admitted = true;
    }
    fill(main, h('p', { class: 'dim' }, 'Loading…'));
    const args = (location.hash || '#/').match(route[0]).slice(1);
    const view = await route[1](...args);
    if (mine !== rendering) {
      view.cleanup?.();
      return;
    }
    fill(main, view.el);
    cleanup = view.cleanup || null;
    window.__tessera.views += 1;
    window.__tessera.page = location.hash || '#/';
    document.title = `${view.title || 'Tessera'} · Tessera console`;
    main.focus({ preventScroll: true });
  } catch (e) {
    if (mine !== rendering) return;
    // A refused key: `onUnauthorized` has asked for another.
    if (e?.status === 401) return;
    fill(main, errorBox(e));
    window.__tessera.errors.push(String(e?.message || e));
  }
}

onUnauthorized(() => {
  const hadKey = Boolean(auth.key);
  admitted = false;
  if (hadKey) forget();
  if (!document.querySelector('#key')) {
    askForKey(document.getElementById('main'), hadKey ? 'The server refused the key. Enter another.' : undefined);
  }
});
// On a phone a table's rows are stacked as cards (app.css): each cell carries its
// column's name, whichever view built the table. Setting an attribute is no change of
// children, so this never wakes itself.
let labelling = 0;
new MutationObserver(() => {
  cancelAnimationFrame(labelling);
  labelling = requestAnimationFrame(() => {
    for (const t of document.querySelectorAll('table.list')) {
      const names = [...t.querySelectorAll('thead th')].map((th) => th.textContent.trim());
      for (const tr of t.querySelectorAll('tbody tr')) {
        [...tr.children].forEach((td, i) => { if (names[i] && td.dataset.label !== names[i]) td.dataset.label = names[i]; });
      }
    }
  });
}).observe(document.getElementById('main'), { childList: true, subtree: true });
document.getElementById('signout').addEventListener('click', () => { forget(); admitted = false; render(); });
window.addEventListener('hashchange', render);
api('/version').then((v) => { document.getElementById('server').textContent = `v${v.version || ''}`; }).catch(() => {});
render();
