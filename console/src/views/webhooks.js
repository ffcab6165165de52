// Webhooks: where the tenant's notices are sent, and every delivery with its tries.
// Making and deleting one needs an admin key (the server says so otherwise); the signing
// secret is shown once, when the webhook is made.

import { api, all } from '../api.js';
import { h, fill, errorBox, field, fmt, toast, badge } from '../dom.js';

/** The notice types a webhook may ask for (tessera_core::notify::NoticeType). */
export const NOTICE_TYPES = [
  ['job.succeeded', 'a job succeeded'],
  ['job.failed', 'a job failed'],
  ['job.cancelled', 'a job was cancelled'],
  ['photo.published', 'a photo was published'],
  ['photo.unpublished', 'a published photo was withheld to be re-blurred'],
  ['photo.failed', 'a photo could not be processed'],
  ['reblur.finished', 'a project-wide re-blur finished'],
];

/** Delivery states after which nothing more happens. */
const SETTLED = ['succeeded', 'failed', 'dead', 'cancelled'];

/** Deliveries shown: the newest. */
const PAGE = 50;

/** How often the deliveries page reads again while a delivery is still being tried,
 * and while none is (new notices may be raised): each read is a query and a read per
 * delivery listed, so an idle page reads rarely, and a hidden tab not at all. */
const REFRESH_MS = 3000;
const IDLE_REFRESH_MS = 30000;

export async function list() {
  const [hooks, projects] = await Promise.all([
    api('/v1/x-tessera/webhooks').then((r) => r.items),
    all('/v1/projects').catch(() => []),
  ]);
  const projectName = (id) => projects.find((p) => p.project_id === id)?.name || id;
  window.__tessera.webhooks = { count: hooks.length };
  const url = h('input', { type: 'url', required: true, placeholder: 'https://example.com/tessera-hook', maxlength: 2000 });
  const scope = h('select', {},
    h('option', { value: '' }, 'every project'),
    projects.map((p) => h('option', { value: p.project_id }, p.name)));
  const boxes = NOTICE_TYPES.map(([type, what]) => {
    const box = h('input', { type: 'checkbox', value: type, checked: true, id: `ev-${type}` });
    return h('label', { class: 'check', for: box.id }, box, ' ', h('code', {}, type), h('span', { class: 'dim' }, ` ${what}`));
  });
  const out = h('div');
  const form = h('form', {
    onsubmit: async (e) => {
      e.preventDefault();
      const events = boxes.map((b) => b.querySelector('input')).filter((b) => b.checked).map((b) => b.value);
      if (!events.length) {
        fill(out, h('div', { class: 'error', role: 'alert' }, 'Pick at least one notice type.'));
        return;
      }
      try {
        const made = await api('/v1/x-tessera/webhooks', {
          method: 'POST',
          // Every type ticked is the same as none named: new types then reach it too.
          body: { url: url.value.trim(), project_id: scope.value || undefined, events: events.length === NOTICE_TYPES.length ? [] : events },
        });
        toast('Webhook made');
        window.__tessera.webhooks.secret = true;
        fill(out, h('div', { class: 'notice', role: 'status' },
          h('strong', {}, 'Signing secret: '), h('code', { class: 'secret' }, made.secret),
          h('p', {}, 'Copy it now: it is not shown again. Each request carries Tessera-Webhook-Signature: v1=HMAC-SHA256(secret, "<id>.<timestamp>.<body>"); the README shows a receiver that checks it.'),
          h('p', {}, h('a', { href: `#/webhooks/${made.id}` }, 'See its deliveries'))));
      } catch (err) { fill(out, errorBox(err)); }
    },
  },
  field('Receiver URL', url, 'HTTPS on a public address; redirects are not followed.'),
  field('Notices from', scope),
  h('fieldset', {}, h('legend', {}, 'Notice types'), boxes),
  h('button', { type: 'submit' }, 'Make webhook'));
  return {
    title: 'Webhooks',
    el: h('section', {},
      h('h1', {}, 'Webhooks'),
      h('p', { class: 'dim' }, 'Tessera POSTs a signed notice to each webhook when a job ends or a photo is published, withheld or fails. A receiver that is down or answers an error is tried again with back-off for about a day.'),
      hooks.length
        ? h('table', { class: 'list' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Receiver'), h('th', {}, 'Notices from'), h('th', {}, 'Types'), h('th', {}, 'Made'))),
          h('tbody', {}, hooks.map((w) => h('tr', {},
            h('td', {}, h('a', { href: `#/webhooks/${w.id}` }, w.url)),
            h('td', {}, w.project_id ? projectName(w.project_id) : 'every project'),
            h('td', { class: 'dim' }, w.events?.length ? w.events.join(', ') : 'all'),
            h('td', { class: 'dim' }, fmt.time(w.created_at))))))
        : h('p', { class: 'dim' }, 'No webhooks yet.'),
      h('h2', {}, 'New webhook'), form, out),
  };
}

function deliveryRow(d) {
  const tries = d.attempts == null ? '–' : `${d.attempts} of ${d.max_attempts}`;
  let next = '';
  if (d.state === 'queued' && d.next_attempt_at) next = `next try ${fmt.time(d.next_attempt_at)}`;
  return h('tr', {},
    h('td', {}, h('code', {}, d.type)),
    h('td', {}, badge(d.state || 'unknown')),
    h('td', {}, tries),
    h('td', { class: 'dim' }, d.last_error && d.state !== 'succeeded' ? d.last_error : (d.result?.status ? `answered ${d.result.status}` : ''), next ? h('div', {}, next) : null),
    h('td', { class: 'dim' }, fmt.time(d.created_at)));
}

export async function detail(id) {
  const hook = await api(`/v1/x-tessera/webhooks/${encodeURIComponent(id)}`);
  const project = hook.project_id
    ? await api(`/v1/projects/${encodeURIComponent(hook.project_id)}`).catch(() => null)
    : null;
  const body = h('tbody');
  const summary = h('p', { class: 'dim' });
  const table = h('table', { class: 'list' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Notice'), h('th', {}, 'State'), h('th', {}, 'Tries'), h('th', {}, 'Last answer'), h('th', {}, 'Raised'))),
    body);
  const state = { loaded: false, deliveries: [] };
  window.__tessera.webhook = state;
  let timer = null;
  let gone = false;
  let open = 1;
  const later = () => {
    if (!gone) timer = setTimeout(refresh, open ? REFRESH_MS : IDLE_REFRESH_MS);
  };
  async function refresh() {
    timer = null;
    if (document.hidden) {
      // Read again when the tab is shown (the listener below).
      return;
    }
    try {
      // The newest page only: a busy webhook has thousands, read again every few seconds.
      const items = (await api(`/v1/x-tessera/webhooks/${encodeURIComponent(id)}/deliveries?page_size=${PAGE}`)).items;
      if (gone) return;
      fill(body, items.map(deliveryRow));
      open = items.filter((d) => !SETTLED.includes(d.state)).length;
      fill(summary, items.length
        ? `${items.length === PAGE ? `The newest ${PAGE}` : items.length} deliveries, ${open} still being tried. This list updates itself.`
        : 'Nothing delivered yet: notices appear here as they are raised. This list updates itself.');
      state.deliveries = items.map((d) => ({ type: d.type, state: d.state, attempts: d.attempts }));
      state.loaded = true;
    } catch (err) {
      if (gone) return;
      fill(summary, errorBox(err));
    }
    later();
  }
  const shown = () => {
    if (!document.hidden && !timer && !gone) refresh();
  };
  document.addEventListener('visibilitychange', shown);
  await refresh();
  const out = h('div');
  const remove = h('button', {
    class: 'danger',
    onclick: async () => {
      if (!window.confirm(`Delete the webhook to ${hook.url}? Notices stop at once; deliveries not yet made are dropped.`)) return;
      try {
        await api(`/v1/x-tessera/webhooks/${encodeURIComponent(id)}`, { method: 'DELETE' });
        toast('Webhook deleted');
        location.hash = '#/webhooks';
      } catch (err) { fill(out, errorBox(err)); }
    },
  }, 'Delete webhook');
  return {
    title: `Webhook ${hook.url}`,
    el: h('section', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/webhooks' }, 'Webhooks'), ' / '),
      h('h1', {}, hook.url),
      h('p', { class: 'dim' }, hook.events?.length ? `Types: ${hook.events.join(', ')}` : 'Every notice type', hook.project_id ? ` · project ${project?.name || hook.project_id}` : ' · every project'),
      h('h2', {}, 'Deliveries'), summary, table,
      h('h2', {}, 'Delete'), remove, out),
    cleanup: () => {
      gone = true;
      if (timer) clearTimeout(timer);
      document.removeEventListener('visibilitychange', shown);
    },
  };
}
