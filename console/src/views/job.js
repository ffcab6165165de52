// A reconstruction job, live: one list of its stages, each with the state the server
// gives its task and the progress its events report (SSE, resumed after a dropped
// connection or a reload), metrics, warnings and errors, cancel / force cancel / resume,
// and the 3D viewer following the newest sealed snapshot.

import { api, all, blobUrl, download, saveJson } from '../api.js';
import { h, fill, errorBox, field, fmt, toast, badge as statusBadge, RECON_RECIPES, describeSpec, confirmDelete, pipelineRequest } from '../dom.js';
import { follow, TERMINAL } from '../sse.js';
import { Viewer } from './viewer.js';

export async function view(jobId) {
  let job = await api(`/v1/jobs/${jobId}`);
  const project = job.project_id ? await api(`/v1/projects/${job.project_id}`).catch(() => null) : null;
  const isRecon = RECON_RECIPES.includes(job.recipe);
  const state = { id: jobId, status: job.status, seqs: [], duplicates: 0, gaps: 0, reconnects: 0, connected: false, stages: {} };
  window.__tessera.job = state;

  const badge = statusBadge(job.status, { 'aria-live': 'polite' });
  const conn = h('span', { class: 'dim conn' });
  const timeline = h('ol', { class: 'timeline', 'aria-label': 'Stages' });
  const metrics = h('dl', { class: 'metrics' });
  const problems = h('ul', { class: 'problems', 'aria-label': 'Warnings and errors' });
  const log = h('pre', { class: 'log', tabindex: 0, 'aria-label': 'Log' });
  const photo = h('aside', { class: 'detail', 'aria-live': 'polite' }, h('p', { class: 'dim' }, 'Click a camera to see its photo.'));
  // One row per stage task, by task id: its state comes from the job (the server's
  // word), its progress from the events that task emits.
  const rows = new Map();
  const progressOf = new Map();
  const metricValues = new Map();
  const logLines = [];

  const buttons = {
    cancel: h('button', { onclick: () => act(':cancel', 'Cancel') }, 'Cancel'),
    force: h('button', { class: 'danger', onclick: () => act(':cancel?force=true', 'Force cancel') }, 'Force cancel'),
    resume: h('button', { onclick: () => act(':resume', 'Resume') }, 'Resume'),
    remove: h('button', {
      class: 'danger',
      onclick: () => confirmDelete(`Delete the run “${job.label}” with its models, exports and events? The dataset's photos stay.`, async () => {
        // Nothing on this page may ask for the run while it goes, or once it is gone:
        // what is already on its way (the report, the latest snapshot) lands first, and
        // the event stream stops before the delete (between two connections it asks
        // for the run, and a 404 for a run being deleted is an error in the console).
        gone = true;
        clearTimeout(soon);
        soon = null;
        const following = stream;
        stream = null;
        await Promise.allSettled([...inFlight, following?.stop()]);
        try {
          await api(`/v1/jobs/${jobId}`, { method: 'DELETE' });
        } catch (err) {
          gone = false;
          if (following) startStream();
          throw err;
        }
        toast('Run deleted');
        location.hash = job.project_id ? `#/projects/${job.project_id}` : '#/';
      }),
    }, 'Delete this run'),
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
    renderStages();
    const live = !TERMINAL.has(job.status);
    buttons.cancel.disabled = !live || job.cancel_requested;
    buttons.force.disabled = !live;
    buttons.resume.disabled = !['failed', 'cancelled', 'cancelled_dirty'].includes(job.status);
    // A run is deleted once it has ended (cancel it first).
    buttons.remove.disabled = live;
    badge.textContent = job.status;
    badge.className = `badge ${job.status}`;
    state.status = job.status;
  }

  let gone = false;
  // Requests about this run still on their way: a delete waits for them, so none
  // reaches the server after the run is gone.
  const inFlight = new Set();
  function track(p) {
    inFlight.add(p);
    p.finally(() => inFlight.delete(p)).catch(() => {});
    return p;
  }
  async function refreshJob() {
    if (gone) return;
    job = await track(api(`/v1/jobs/${jobId}`));
    renderTasks();
    if (isRecon && TERMINAL.has(job.status)) await showReport();
  }

  // What to take away, from the run's report: every file of its exports (the point
  // cloud, the COLMAP model, NVM) and the report itself; and which photos it left out.
  const downloads = h('div', { class: 'downloads', 'aria-label': 'Downloads' });
  const leftOut = h('div');
  let reportShown = null;
  async function showReport() {
    if (reportShown === job.status) return;
    reportShown = job.status;
    try {
      if (gone) return;
      const report = await track(api(`/v1/reconstructions/${jobId}/report`));
      state.report = { files: report.files.length, leftOut: report.photos?.left_out || [] };
      const exports = report.files.filter((f) => f.stage === 'export' && !f.name.startsWith('submodels/'));
      const save = (f) => h('button', {
        class: 'ghost download',
        onclick: async () => {
          try { await download(f.url); } catch (err) { toast(err.message, 'error'); }
        },
      }, fileLabel(f.name), h('span', { class: 'dim' }, ` ${fmt.bytes(f.byte_size)}`));
      const name = (job.label || 'reconstruction').replace(/[^\w.-]+/g, '_');
      fill(downloads,
        exports.length ? h('ul', { class: 'files' }, exports.map((f) => h('li', {}, save(f)))) : h('p', { class: 'dim' }, 'No exports: the run did not reach its export stage.'),
        h('button', { class: 'ghost download', onclick: () => saveJson(report, `${name}-report.json`) }, 'Report (JSON): options, stages, timings, photos left out'));
      const out = report.photos?.left_out || [];
      fill(leftOut, out.length
        ? h('p', { class: 'warn' }, `${report.photos.registered} of ${report.photos.total} photos are in the model. Left out: ${out.join(', ')}`)
        : report.photos?.total ? h('p', { class: 'dim' }, `All ${report.photos.total} photos are in the model.`) : null);
      // An error an attempt raised is over once the job got past it.
      if (job.status === 'succeeded') problems.querySelectorAll('li.error').forEach((li) => li.classList.add('resolved'));
    } catch (err) { fill(downloads, errorBox(err)); }
  }

  /** The job's stage tasks in order: a reconstruction's inside its sfmapi nodes. */
  const stageTasks = () => (job.tasks || []).flatMap((t) => t['x-tessera']?.stages || [t]);

  /**
   * The stage list, made again from the job: a ✓ only on a task the server says has
   * succeeded, and between two stages the next one shown waiting, so a running job
   * always shows what it is doing or waiting for.
   */
  function renderStages() {
    const list = stageTasks();
    const live = !TERMINAL.has(job.status);
    list.forEach((t) => {
      let row = rows.get(t.task_id);
      if (!row) {
        const bar = h('progress', { max: 1, value: 0, 'aria-label': `${stageName(t.name)} progress` });
        const info = h('span', { class: 'dim' });
        const word = h('span', { class: 'state' });
        const li = h('li', { dataset: { task: t.task_id } }, h('strong', {}, stageName(t.name)), bar, h('span', {}, word, ' ', info));
        row = { li, bar, info, word, task: t };
        rows.set(t.task_id, row);
      }
      row.task = t;
      timeline.append(row.li);
    });
    // A resumed job may plan its stages again: rows of tasks it no longer has go.
    const ids = new Set(list.map((t) => t.task_id));
    for (const [id, row] of rows) if (!ids.has(id)) { row.li.remove(); rows.delete(id); }
    // The first stage not yet ended is the one the job waits for.
    const next = list.find((t) => t.status === 'pending' || t.status === 'running');
    for (const t of list) {
      const row = rows.get(t.task_id);
      const p = progressOf.get(t.task_id);
      let cls = STAGE_CLASS[t.status] || 'waiting';
      // Its events say it has begun before the next poll does.
      if (cls === 'waiting' && p?.started && live) cls = 'running';
      row.li.className = cls;
      const retries = t.attempts > 1 ? ` · attempt ${t.attempts}` : '';
      if (cls === 'waiting') {
        row.word.textContent = !live ? 'not run' : t === next ? 'next: waiting for a worker' : 'waiting';
      } else if (cls === 'running') {
        row.word.textContent = `running${retries}`;
      } else {
        row.word.textContent = `${STAGE_WORDS[t.status] || t.status}${retries}`;
      }
      if (cls === 'done') { row.bar.max = 1; row.bar.value = 1; }
      else if (p?.total) { row.bar.max = p.total; row.bar.value = p.current; }
      else if (cls === 'running') row.bar.removeAttribute('value');
      else row.bar.value = 0;
      row.info.textContent = cls === 'done' && p?.elapsed != null ? `in ${fmt.ms(p.elapsed)}` : cls === 'running' && p ? p.text : '';
      state.stages[t.name] = cls;
    }
  }

  // A phase event changes its stage's row now; the job itself is asked again soon, so
  // the next stage's state follows without waiting for the poll.
  let soon = null;
  const refreshSoon = () => {
    if (soon) return;
    soon = setTimeout(() => { soon = null; refreshJob().catch(() => {}); }, 400);
  };
  function onPhase(e) {
    const id = e.task_id || stageTasks().find((t) => t.status === 'running')?.task_id;
    if (!id) return;
    const p = progressOf.get(id) || {};
    const name = fmt.phase(e.phase);
    // A stage's first phase spans it; the phases inside it (a bundle adjustment after
    // each photo the mapper adds) say what it is doing, but neither reset its bar nor
    // add to its time.
    const main = !p.main || p.main === e.phase;
    if (e.type === 'phase_started') {
      p.main ||= e.phase;
      if (main) Object.assign(p, { started: true, current: 0, total: 0, text: `${name} since ${new Date(e.ts || e.at).toLocaleTimeString()}` });
      else p.text = `${name}…`;
    } else if (e.type === 'phase_progress') {
      Object.assign(p, { started: true, current: e.current, total: e.total || 0, text: `${name} ${e.current}${e.total ? ` / ${e.total}` : ''}${e.rate ? ` · ${e.rate.toFixed(1)}/s` : ''}` });
    } else if (main) {
      // Its last run's time (a retry starts it again).
      p.elapsed = e.elapsed_ms || 0;
      p.text = `${name} done`;
    }
    progressOf.set(id, p);
    // Its start and end change which stage is next; asked again soon, not per event.
    if (!rows.has(id) || (main && e.type !== 'phase_progress')) refreshSoon();
    renderStages();
  }

  // Figures a person reads, first; what each process cost (memory, CPU) folded away.
  const resources = h('dl', { class: 'metrics' });
  function renderFigures() {
    const main = [];
    const cost = [];
    for (const [name, e] of metricValues) (name.includes('.') ? cost : main).push(e);
    fill(metrics, main.map((e) => [h('dt', {}, FIGURES[e.name] || fmt.phase(e.name)), h('dd', {}, figure(e))]));
    fill(resources, cost.map((e) => [h('dt', {}, fmt.phase(e.name.replace('.', ': '))), h('dd', {}, figure(e))]));
  }
  let lastError = 0;
  function connText() {
    const n = state.seqs.length ? state.seqs[state.seqs.length - 1] : 0;
    if (state.ended) return `finished · ${n} events`;
    if (state.streamError) return `events stopped: ${state.streamError}`;
    return state.connected ? `live · ${n} events` : `reconnecting · after event ${n}`;
  }

  function onEvent(e) {
    if (state.seqs.length && e.seq !== state.seqs[state.seqs.length - 1] + 1) {
      if (e.seq <= state.seqs[state.seqs.length - 1]) state.duplicates += 1; else state.gaps += 1;
    }
    state.seqs.push(e.seq);
    conn.textContent = connText();
    switch (e.type) {
      case 'phase_started':
      case 'phase_progress':
      case 'phase_completed':
        onPhase(e);
        break;
      case 'metric':
        metricValues.set(e.name, e);
        renderFigures();
        break;
      case 'warning':
        problems.append(h('li', { class: 'warn', dataset: { seq: e.seq } }, e.message));
        break;
      case 'error':
        // Kept with its sequence number: a resume that gets past it marks it resolved.
        problems.append(h('li', { class: 'error', dataset: { seq: e.seq } }, e.message));
        lastError = e.seq;
        break;
      case 'log_line':
        logLines.push(e.line);
        if (logLines.length > 200) logLines.shift();
        log.textContent = logLines.join('\n');
        break;
      case 'snapshot_available':
        // The event names its snapshot: show the newest, once (a reload replays many).
        if (isRecon && e.snapshot > newest && !gone) {
          newest = e.snapshot;
          track(viewer.load(jobId, newest));
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
    if (gone) return;
    const s = await track(api(`/v1/reconstructions/${jobId}/snapshots`)).catch(() => null);
    const seq = s?.seqs?.[s.seqs.length - 1];
    if (seq != null && !gone) await track(viewer.load(jobId, seq));
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
        state.streamError = s.error || null;
        conn.textContent = connText();
      },
      onEnd: async () => {
        state.ended = true;
        conn.textContent = connText();
        stream = null;
        await refreshJob();
        if (isRecon) await showLatest();
      },
    });
    state.stream = stream;
  }

  // Rename the run, or run its options again over the dataset's photos as they are now.
  const title = h('span', {}, job.label || 'Reconstruction');
  const newLabel = h('input', { value: job.label || '', maxlength: 200, required: true });
  const manage = h('div');
  const rename = h('form', {
    class: 'inline',
    onsubmit: async (e) => {
      e.preventDefault();
      try {
        job = await api(`/v1/jobs/${jobId}`, { method: 'PATCH', body: { label: newLabel.value.trim() } });
        title.textContent = job.label;
        document.title = `${job.label} · Tessera console`;
        toast('Renamed');
      } catch (err) { fill(manage, errorBox(err)); }
    },
  }, field('Name of this run', newLabel), h('button', { type: 'submit' }, 'Rename'));
  const again = isRecon && job['x-tessera']?.options ? h('button', {
    onclick: async () => {
      try {
        const r = await api(`/v1/projects/${job.project_id}/pipelines/${job.recipe}`, { method: 'POST', body: rerunRequest(job) });
        if (r.job_id === jobId) toast('Nothing changed since this run (same photos, same options): this is that run', 'warn');
        else location.hash = `#/jobs/${r.job_id}`;
      } catch (err) { fill(manage, errorBox(err)); }
    },
  }, 'Run again with these options') : null;

  renderTasks();
  startStream();
  if (isRecon) showLatest();
  if (isRecon && TERMINAL.has(job.status)) showReport();
  const poll = setInterval(() => { if (!TERMINAL.has(job.status)) refreshJob().catch(() => {}); }, 3000);

  return {
    title: job.label || jobId,
    cleanup: () => { stream?.stop(); clearInterval(poll); clearTimeout(soon); viewer?.destroy(); },
    el: h('section', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Projects'), ' / ', job.project_id ? h('a', { href: `#/projects/${job.project_id}` }, project?.name || 'Project') : null, ' / '),
      h('h1', {}, title, ' ', badge),
      h('p', { class: 'dim' }, describeSpec(job), ` · started ${fmt.time(job.started_at || job.created_at)}`, job.finished_at ? ` · took ${fmt.duration(job.started_at || job.created_at, job.finished_at)}` : '', ' · ', conn),
      leftOut,
      h('div', { class: 'actions' }, buttons.cancel, buttons.force, buttons.resume, again, buttons.remove),
      h('details', {}, h('summary', {}, 'Rename'), rename), manage,
      h('div', { class: 'split' },
        h('div', {}, h('h2', {}, 'Stages'), timeline,
          isRecon ? [h('h3', {}, 'Downloads'), downloads] : null,
          h('h3', {}, 'Figures'), metrics, h('details', {}, h('summary', {}, 'What each step cost (memory, time)'), resources),
          h('h3', {}, 'Warnings and errors'), problems),
        viewer ? h('div', { class: 'view3d' }, h('h2', {}, '3D'), viewer.el, photo) : null),
      h('details', {}, h('summary', {}, 'Log'), log)),
  };
}

/** A stage task's state as the row shows it (its class) and says it. */
const STAGE_CLASS = { succeeded: 'done', running: 'running', pending: 'waiting', failed: 'failed', cancelled: 'cancelled' };
const STAGE_WORDS = { succeeded: 'done', failed: 'failed', cancelled: 'cancelled' };

/** A stage's name as a person reads it. */
const STAGES = {
  ingest: 'Reading the photos', extract: 'Finding features', match: 'Matching photos',
  verify: 'Checking matches', map: 'Building the model', bundle_adjust: 'Refining (bundle adjustment)',
  georeference: 'Placing on the map (GPS)', export: 'Writing the exports',
};
const stageName = (name) => STAGES[name] || fmt.phase(name);

/** What the figures a run reports mean to a person. */
const FIGURES = {
  images: 'Photos in the run',
  image_bytes: 'Photo bytes',
  images_accepted: 'Photos accepted',
  keypoints: 'Keypoints found',
  matched_pairs: 'Photo pairs matched',
  verified_pairs: 'Pairs geometrically verified',
  inlier_matches: 'Verified matches',
  registered_new_images: 'Photos registered',
  registered_images: 'Photos in the model',
  points: '3D points',
  submodels: 'Separate models',
  alignment_residual_m: 'GPS alignment error',
};

function figure(e) {
  if (/bytes$/.test(e.name) || e.unit === 'bytes') return fmt.bytes(e.value);
  const v = Number.isInteger(e.value) ? e.value.toLocaleString() : e.value.toFixed(e.value < 10 ? 2 : 1);
  return `${v}${e.unit ? ` ${e.unit}` : ''}`;
}

/** A checkpoint file's name as a person reads it. */
function fileLabel(name) {
  const base = name.split('/').pop();
  if (name === 'model.ply') return 'Point cloud (PLY)';
  if (name === 'model.nvm') return 'Cameras and points (NVM)';
  if (name === 'points.bin') return 'Points (sfmapi binary)';
  if (name === 'model.las') return 'Point cloud for survey tools (LAS 1.4)';
  if (name === 'model.laz') return 'Point cloud for survey tools (LAZ)';
  if (name === 'cameras.geojson') return 'Camera positions (GeoJSON)';
  if (name === 'colmap-model.zip') return 'COLMAP model, every file (zip)';
  // `sparse/0` is the model; `sparse/1`, `sparse/2`, … are the parts the mapper could not
  // join to it, each a model of its own with its own `cameras.bin`.
  const part = /^sparse(_text)?\/(\d+)\//.exec(name);
  if (part) {
    const kind = part[1] ? 'text' : 'binary';
    return part[2] === '0' ? `COLMAP model, ${kind}: ${base}` : `COLMAP sub-model ${part[2]} (not joined), ${kind}: ${base}`;
  }
  return name;
}

/**
 * The pipeline request that asks for `job`'s options again: its dataset, mapper, pairs,
 * bundle adjustment, georeferencing and exports. Sent again over unchanged photos it is
 * the same job (the server recognises its fingerprint).
 */
function rerunRequest(job) {
  const o = job['x-tessera'].options;
  return pipelineRequest({
    dataset: /datasets\/([\w-]+)/.exec(o.image_set || '')?.[1],
    mapper: o.mapper || job.recipe,
    pairs: o.pairs?.strategy ? { ...o.pairs } : null,
    ba: o.ba,
    // Chosen from the photos (`auto`) or asked for, in the frame it was asked in.
    georeference: o.georef_if_possible
      ? 'auto'
      : o.georef?.mode === 'gps'
        ? (o.georef.target_epsg === 4978 ? 'gps_ecef' : 'gps')
        : 'none',
    exports: (o.exports || []).map((e) => e.replaceAll('-', '_')).filter((e) => e !== 'points_bin'),
    crs: o.crs,
  });
}
