// A reconstruction job, live: the stage timeline from its events (SSE, resumed after a
// dropped connection or a reload), per-stage progress and rates, metrics, warnings and
// errors, cancel / force cancel / resume, and the 3D viewer following the newest sealed
// snapshot.

import { api, all, blobUrl } from '../api.js';
import { h, fill, errorBox, fmt, toast, badge as statusBadge, RECON_RECIPES } from '../dom.js';
import { follow, TERMINAL } from '../sse.js';
import { Viewer } from './viewer.js';

export async function view(jobId) {
  let job = await api(`/v1/jobs/${jobId}`);
  const isRecon = RECON_RECIPES.includes(job.recipe);
  const state = { id: jobId, status: job.status, seqs: [], duplicates: 0, gaps: 0, reconnects: 0, connected: false, phases: {} };
  window.__tessera.job = state;

  const badge = statusBadge(job.status, { 'aria-live': 'polite' });
  const conn = h('span', { class: 'dim conn' });
  const timeline = h('ol', { class: 'timeline', 'aria-label': 'Stages' });
  const tasks = h('ol', { class: 'tasks', 'aria-label': 'Tasks' });
  const metrics = h('dl', { class: 'metrics' });
  const problems = h('ul', { class: 'problems', 'aria-label': 'Warnings and errors' });
  const log = h('pre', { class: 'log', tabindex: 0, 'aria-label': 'Log' });
  const photo = h('aside', { class: 'detail', 'aria-live': 'polite' }, h('p', { class: 'dim' }, 'Click a camera to see its photo.'));
  const phases = new Map();
  const metricValues = new Map();
  const logLines = [];

  const buttons = {
    cancel: h('button', { onclick: () => act(':cancel', 'Cancel') }, 'Cancel'),
    force: h('button', { class: 'danger', onclick: () => act(':cancel?force=true', 'Force cancel') }, 'Force cancel'),
    resume: h('button', { onclick: () => act(':resume', 'Resume') }, 'Resume'),
  };
  async function act(action, label) {
    try {
      await api(`/v1/jobs/${jobId}${action}`, { method: 'POST' });
      toast(`${label} requested`);
      if (action === ':resume' && !stream) startStream();
      await refreshJob();
    } catch (e) { toast(e.message, 'error'); }
  }

  function renderTasks() {
    fill(tasks, (job.tasks || []).map((t) => h('li', { class: t.status },
      h('strong', {}, t.kind), ' ', statusBadge(t.status),
      (t['x-tessera']?.stages || []).length ? h('span', { class: 'dim' }, ` (${t['x-tessera'].stages.map((s) => s.name || s).join(', ')})`) : null)));
    const live = !TERMINAL.has(job.status);
    buttons.cancel.disabled = !live || job.cancel_requested;
    buttons.force.disabled = !live;
    buttons.resume.disabled = !['failed', 'cancelled', 'cancelled_dirty'].includes(job.status);
    badge.textContent = job.status;
    badge.className = `badge ${job.status}`;
    state.status = job.status;
  }

  async function refreshJob() {
    job = await api(`/v1/jobs/${jobId}`);
    renderTasks();
  }

  function phaseRow(name) {
    if (!phases.has(name)) {
      const bar = h('progress', { max: 1, value: 0, 'aria-label': `${fmt.phase(name)} progress` });
      const info = h('span', { class: 'dim' });
      const li = h('li', { class: 'running' }, h('strong', {}, fmt.phase(name)), bar, info);
      timeline.append(li);
      phases.set(name, { li, bar, info });
      state.phases[name] = 'running';
    }
    return phases.get(name);
  }

  function onEvent(e) {
    if (state.seqs.length && e.seq !== state.seqs[state.seqs.length - 1] + 1) {
      if (e.seq <= state.seqs[state.seqs.length - 1]) state.duplicates += 1; else state.gaps += 1;
    }
    state.seqs.push(e.seq);
    switch (e.type) {
      case 'phase_started': {
        const p = phaseRow(e.phase);
        p.info.textContent = `started ${new Date(e.ts || e.at).toLocaleTimeString()}`;
        break;
      }
      case 'phase_progress': {
        const p = phaseRow(e.phase);
        if (e.total) { p.bar.max = e.total; p.bar.value = e.current; } else { p.bar.removeAttribute('value'); }
        p.info.textContent = `${e.current}${e.total ? ` / ${e.total}` : ''}${e.rate ? ` · ${e.rate.toFixed(1)}/s` : ''}`;
        break;
      }
      case 'phase_completed': {
        const p = phaseRow(e.phase);
        p.li.className = 'done';
        p.bar.max = 1;
        p.bar.value = 1;
        p.info.textContent = `done in ${fmt.ms(e.elapsed_ms)}`;
        state.phases[e.phase] = 'done';
        break;
      }
      case 'metric':
        metricValues.set(e.name, `${Number.isInteger(e.value) ? e.value : e.value.toFixed(3)}${e.unit ? ` ${e.unit}` : ''}`);
        fill(metrics, [...metricValues].map(([k, v]) => [h('dt', {}, fmt.phase(k)), h('dd', {}, v)]));
        break;
      case 'warning':
        problems.append(h('li', { class: 'warn' }, e.message));
        break;
      case 'error':
        problems.append(h('li', { class: 'error' }, `${e.class}: ${e.message}`));
        break;
      case 'log_line':
        logLines.push(e.line);
        if (logLines.length > 200) logLines.shift();
        log.textContent = logLines.join('\n');
        break;
      case 'snapshot_available':
        // The event names its snapshot: show the newest, once (a reload replays many).
        if (isRecon && e.snapshot > newest) {
          newest = e.snapshot;
          viewer.load(jobId, newest);
        }
        break;
      default:
        break;
    }
  }

  // The viewer, and photos by name for the camera it picks.
  let viewer = null;
  let names = null;
  let newest = 0;
  if (isRecon) {
    viewer = new Viewer({
      onCamera: async (cam) => {
        try {
          if (!names) {
            const recon = await api(`/v1/reconstructions/${jobId}`);
            names = new Map((await all(`/v1/datasets/${recon.dataset_id}/images`)).map((i) => [i.name, i]));
          }
          const img = names.get(cam.name);
          const src = img ? await blobUrl(`/v1/images/${img.image_id}/thumbnail?size=512`) : null;
          fill(photo, h('h3', {}, cam.name), src ? h('img', { src, alt: cam.name, class: 'preview' }) : h('p', { class: 'dim' }, 'Not in the dataset any more.'));
        } catch (e) { fill(photo, errorBox(e)); }
      },
    });
  }
  async function showLatest() {
    const s = await api(`/v1/reconstructions/${jobId}/snapshots`).catch(() => null);
    const seq = s?.seqs?.[s.seqs.length - 1];
    if (seq != null) await viewer.load(jobId, seq);
  }

  let stream = null;
  function startStream() {
    stream = follow(jobId, {
      onEvent,
      // Following again after a resume: this view already has what it was given.
      after: state.seqs.length ? state.seqs[state.seqs.length - 1] : 0,
      onState: (s) => {
        state.connected = s.connected;
        state.reconnects = s.reconnects;
        conn.textContent = s.error
          ? `events stopped: ${s.error}`
          : s.connected ? `live · event ${s.last}` : `reconnecting · after event ${s.last}`;
      },
      onEnd: async () => {
        conn.textContent = `ended · ${state.seqs.length} events`;
        state.ended = true;
        stream = null;
        await refreshJob();
        if (isRecon) await showLatest();
      },
    });
    state.stream = stream;
  }

  renderTasks();
  startStream();
  if (isRecon) showLatest();
  const poll = setInterval(() => { if (!TERMINAL.has(job.status)) refreshJob().catch(() => {}); }, 3000);

  return {
    title: job.label || jobId,
    cleanup: () => { stream?.stop(); clearInterval(poll); viewer?.destroy(); },
    el: h('section', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Projects'), ' / ', job.project_id ? h('a', { href: `#/projects/${job.project_id}` }, 'Project') : null, ' / '),
      h('h1', {}, job.label || jobId, ' ', badge),
      h('p', { class: 'dim' }, `${job.recipe} · created ${fmt.time(job.created_at)} · `, conn),
      h('div', { class: 'actions' }, buttons.cancel, buttons.force, buttons.resume),
      h('div', { class: 'split' },
        h('div', {}, h('h2', {}, 'Stages'), timeline, h('h3', {}, 'Tasks'), tasks, h('h3', {}, 'Figures'), metrics, h('h3', {}, 'Warnings and errors'), problems),
        viewer ? h('div', {}, h('h2', {}, '3D'), viewer.el, photo) : null),
      h('details', {}, h('summary', {}, 'Log'), log)),
  };
}
