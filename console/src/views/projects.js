// Projects and their datasets and reconstructions.

import { api, all } from '../api.js';
import { TERMINAL } from '../sse.js';
import { h, fill, errorBox, field, fmt, toast, badge, RECON_RECIPES, describeSpec, confirmDelete, cameraModelSays } from '../dom.js';

export async function list() {
  const items = await all('/v1/projects');
  const rows = h('tbody', {}, items.map((p) => h('tr', {},
    h('td', {}, h('a', { href: `#/projects/${p.project_id}` }, p.name)),
    h('td', { class: 'dim' }, p.description || ''),
    h('td', { class: 'dim' }, fmt.time(p.created_at)))));
  const name = h('input', { name: 'name', required: true, maxlength: 200 });
  const description = h('input', { name: 'description', maxlength: 2000 });
  const out = h('div');
  const form = h('form', {
    class: 'inline',
    onsubmit: async (e) => {
      e.preventDefault();
      try {
        const p = await api('/v1/projects', { method: 'POST', body: { name: name.value.trim(), description: description.value.trim() || undefined } });
        location.hash = `#/projects/${p.project_id}`;
      } catch (err) { fill(out, errorBox(err)); }
    },
  }, field('Name', name), field('Description', description), h('button', { type: 'submit' }, 'Create project'));
  return {
    title: 'Projects',
    el: h('section', {},
      h('h1', {}, 'Projects'),
      items.length
        ? h('table', { class: 'list' }, h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Description'), h('th', {}, 'Created'))), rows)
        : h('p', { class: 'dim' }, 'No projects yet.'),
      h('h2', {}, 'New project'), form, out),
  };
}

export async function detail(pid) {
  const [project, datasets, models, jobs] = await Promise.all([
    api(`/v1/projects/${pid}`),
    all(`/v1/projects/${pid}/datasets`),
    api('/v1/camera-models').then((m) => m.items).catch(() => []),
    all(`/v1/jobs?project_id=${pid}`).catch(() => []),
  ]);
  const name = h('input', { required: true, maxlength: 200 });
  const cameraHint = h('small', { class: 'dim' });
  const camera = h('select', { onchange: () => { cameraHint.textContent = cameraModelSays(camera.value); } },
    models.map((m) => h('option', { value: m.name, selected: m.name === 'SIMPLE_RADIAL' }, m.name)));
  cameraHint.textContent = cameraModelSays(camera.value || 'SIMPLE_RADIAL');
  const intrinsics = h('select', {},
    h('option', { value: 'single_camera' }, 'shared by photos of one size'),
    h('option', { value: 'per_image' }, 'one per photo'));
  const out = h('div');
  const form = h('form', {
    class: 'inline',
    onsubmit: async (e) => {
      e.preventDefault();
      try {
        const d = await api(`/v1/projects/${pid}/datasets`, {
          method: 'POST',
          body: { name: name.value.trim(), camera_model: camera.value, intrinsics_mode: intrinsics.value },
        });
        toast(`Dataset ${d.name} created`);
        location.hash = `#/projects/${pid}/datasets/${d.dataset_id}`;
      } catch (err) { fill(out, errorBox(err)); }
    },
  }, field('Name', name), h('div', { class: 'field' }, field('Camera model', camera), cameraHint),
  field('Lens settings (intrinsics)', intrinsics, 'Zoom or several cameras: one per photo.'), h('button', { type: 'submit' }, 'Create dataset'));
  const names = new Map(datasets.map((d) => [`datasets/${d.dataset_id}/images`, d.name]));
  // A run's photo count and how long it took come from its report, asked for once it
  // has ended (the newest few only); a list of jobs carries neither.
  const reports = new Map();
  const fromReport = (j, what) => {
    const cell = h('td', { class: 'dim' }, '–');
    if (!TERMINAL.has(j.status)) {
      if (what === 'took') cell.textContent = `${fmt.duration(j.created_at)} so far`;
      return cell;
    }
    if (!reports.has(j.job_id)) reports.set(j.job_id, api(`/v1/reconstructions/${j.job_id}/report`).catch(() => null));
    cell.textContent = '…';
    reports.get(j.job_id).then((r) => {
      const p = r?.photos || {};
      if (what === 'photos') cell.textContent = p.total != null ? `${p.registered ?? '–'} of ${p.total}` : '–';
      else cell.textContent = r?.started_at ? fmt.duration(r.started_at, r.finished_at) : '–';
    });
    return cell;
  };
  const progressOf = (j) => {
    const x = j['x-tessera'] || {};
    if (j.status !== 'running' && j.status !== 'pending') return null;
    return h('progress', { max: x.tasks_total || 1, value: x.tasks_done || 0, 'aria-label': `${j.label} progress` });
  };
  const runs = h('div');
  let recons = [];
  function renderRuns() {
    fill(runs, recons.length
      ? h('table', { class: 'list' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Run'), h('th', {}, 'Options'), h('th', {}, 'Photos in model'), h('th', {}, 'Status'), h('th', {}, 'Took'), h('th', {}, 'Started'))),
        h('tbody', {}, recons.map((j, i) => h('tr', { dataset: { job: j.job_id } },
          h('td', {}, h('a', { href: `#/jobs/${j.job_id}` }, j.label || 'Reconstruction')),
          h('td', { class: 'options' }, describeSpec(j, names)),
          i < 20 ? fromReport(j, 'photos') : h('td', { class: 'dim' }, '–'),
          h('td', {}, badge(j.status), progressOf(j)),
          i < 20 ? fromReport(j, 'took') : h('td', { class: 'dim' }, '–'),
          h('td', { class: 'dim' }, fmt.time(j.started_at || j.created_at))))))
      : h('p', { class: 'dim' }, 'None yet: open a dataset and start a reconstruction.'));
    window.__tessera.runs = recons.map((j) => ({ id: j.job_id, status: j.status }));
  }
  const setRuns = (list) => { recons = list.filter((j) => RECON_RECIPES.includes(j.recipe)).reverse(); renderRuns(); };
  setRuns(jobs);
  // The list follows its runs while any is going: status, progress and time, no
  // reload. Only the runs still going are asked for, each by its id.
  let busy = false;
  const follow = setInterval(async () => {
    const live = recons.filter((j) => !TERMINAL.has(j.status));
    if (busy || document.hidden || !live.length) return;
    busy = true;
    try {
      const now = new Map((await Promise.all(live.map((j) => api(`/v1/jobs/${j.job_id}`).catch(() => j)))).map((j) => [j.job_id, j]));
      recons = recons.map((j) => now.get(j.job_id) || j);
      renderRuns();
    } finally { busy = false; }
  }, 3000);
  const out2 = h('div');
  const deleteProject = h('button', {
    class: 'danger',
    onclick: () => confirmDelete(`Delete the project “${project.name}” with its runs, datasets, photos and opted-out subjects?`, async () => {
      await api(`/v1/projects/${pid}?cascade=true`, { method: 'DELETE' });
      toast(`Project ${project.name} deleted`);
      location.hash = '#/';
    }, out2),
  }, 'Delete project');
  return {
    title: project.name,
    cleanup: () => clearInterval(follow),
    el: h('section', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Projects'), ' / '),
      h('h1', {}, project.name),
      project.description ? h('p', { class: 'dim' }, project.description) : null,
      h('p', {}, h('a', { class: 'button', href: `#/projects/${pid}/privacy` }, 'Photo privacy review')),
      h('h2', {}, 'Datasets'),
      datasets.length
        ? h('ul', { class: 'cards' }, datasets.map((d) => h('li', { class: 'card' },
          h('a', { href: `#/projects/${pid}/datasets/${d.dataset_id}` }, h('strong', {}, d.name)),
          h('div', { class: 'dim' }, `${d.camera_model} · ${fmt.phase(d.intrinsics_mode)}`))))
        : h('p', { class: 'dim' }, 'No datasets yet.'),
      h('h3', {}, 'New dataset'), form, out,
      h('h2', {}, 'Reconstructions'), runs,
      h('h2', {}, 'Delete'), h('p', { class: 'dim' }, 'Deleting a project erases its runs (their models and exports), datasets, photos, opted-out subjects and their reference faces. A run still going must be cancelled first. It cannot be undone.'), deleteProject, out2),
  };
}
