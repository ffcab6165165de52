// Photo privacy review: a project's photos with their state (and why a failed one
// failed), the photos not yet re-blurred after a subject change, subjects enrolled
// from reference photos; one photo with its faces boxed over the unblurred original
// (admin keys only: the server decides, answering 403 to others), each face's decision
// and similarity, the public and per-subject variants side by side, manual blur
// regions drawn with the mouse, and reprocessing.

import { api, all, blobUrl } from '../api.js';
import { h, fill, errorBox, field, toast, badge, svg as svgEl } from '../dom.js';
import { uploadFile } from '../upload.js';


/** Subject ids to labels, for the photo being shown. */
let labels = new Map();
const who = (id) => labels.get(id) || `subject …${id.slice(-6)}`;

function decisionText(d) {
  switch (d?.decision) {
    case 'subject': return [`opted out: ${who(d.subject)}`, d.similarity];
    case 'ambiguous': return [`ambiguous between ${d.candidates.length} subjects`, d.candidates[0]?.[1]];
    case 'not_opted_out': return ['not opted out: shown', d.best];
    case 'fail_closed': return ['no threshold: blurred everywhere', null];
    default: return ['undecided', null];
  }
}

export async function photos(pid) {
  const [project, settings, list, subjects] = await Promise.all([
    api(`/v1/projects/${pid}`),
    api(`/v1/x-tessera/projects/${pid}/privacy`),
    all(`/v1/x-tessera/projects/${pid}/photos`).then((items) => ({ items })),
    api(`/v1/x-tessera/projects/${pid}/subjects`).then((s) => s.items).catch(() => []),
  ]);
  window.__tessera.privacy = { photos: list.items.map((p) => ({ id: p.photo_id, status: p.status })), notCurrent: settings.photos_not_current };
  const out = h('div');
  const progress = h('ul', { class: 'uploads' });

  async function addFiles(files, asPhotos) {
    const shas = [];
    for (const file of files) {
      const bar = h('progress', { max: file.size, value: 0, 'aria-label': `Upload of ${file.name}` });
      progress.append(h('li', {}, h('span', { class: 'name' }, file.name), bar));
      const sha = await uploadFile(file, (n) => { bar.value = n; });
      shas.push(sha);
      if (asPhotos) await api(`/v1/x-tessera/projects/${pid}/photos`, { method: 'POST', body: { blob_sha: sha, name: file.name } });
    }
    return shas;
  }

  const threshold = h('input', { type: 'number', min: 0, max: 1, step: 0.001, value: settings.match_threshold ?? '', placeholder: String(settings.recommended_threshold ?? '') });
  const settingsForm = h('form', {
    class: 'inline',
    onsubmit: async (e) => {
      e.preventDefault();
      const v = threshold.value.trim();
      try {
        await api(`/v1/x-tessera/projects/${pid}/privacy`, { method: 'PUT', body: {
          // PUT replaces every setting: the others go back as they are.
          match_threshold: v === '' ? null : Number(v),
          blur_expand: settings.blur_expand,
          keep_metadata: settings.keep_metadata,
        } });
        toast('Threshold saved: every photo is re-decided');
        window.dispatchEvent(new HashChangeEvent('hashchange'));
      } catch (err) { fill(out, errorBox(err)); }
    },
  }, field(`Match threshold (cosine similarity of a face to an opted-out person's reference; recommended ${settings.recommended_threshold}, measured; lower blurs more; empty: blur every face)`, threshold), h('button', { type: 'submit' }, 'Save threshold'));

  const photoInput = h('input', { type: 'file', multiple: true, accept: 'image/*,.heic,.heif', id: 'photo-files' });
  const addPhotos = h('form', {
    class: 'inline',
    onsubmit: async (e) => {
      e.preventDefault();
      try {
        await addFiles([...photoInput.files], true);
        toast('Photos added: ingest and face processing follow');
        setTimeout(() => window.dispatchEvent(new HashChangeEvent('hashchange')), 800);
      } catch (err) { fill(out, errorBox(err)); }
    },
  }, field('Photos to publish', photoInput), h('button', { type: 'submit' }, 'Add photos'));

  const label = h('input', { required: true, maxlength: 200 });
  const refs = h('input', { type: 'file', multiple: true, accept: 'image/*', required: true });
  const enrol = h('form', {
    class: 'inline',
    onsubmit: async (e) => {
      e.preventDefault();
      try {
        const shas = await addFiles([...refs.files], false);
        const r = await api(`/v1/x-tessera/projects/${pid}/subjects`, { method: 'POST', body: { label: label.value.trim(), blob_shas: shas } });
        toast(`${r.label} enrolled: every photo is re-decided`);
        window.dispatchEvent(new HashChangeEvent('hashchange'));
      } catch (err) { fill(out, errorBox(err)); }
    },
  }, field('Name or label', label), field('Reference photos (1–20, one face each)', refs), h('button', { type: 'submit' }, 'Enrol opted-out subject'));

  const rows = list.items.map((p) => h('tr', {},
    h('td', {}, h('a', { href: `#/photos/${p.photo_id}` }, p.name || p.photo_id)),
    h('td', {}, badge(p.status), p.reason ? h('div', { class: 'reason' }, p.reason) : null),
    h('td', {}, p.faces ? String(p.faces.length) : '–'),
    h('td', { class: 'dim' }, p.variants?.length ? `${p.variants.length}` : '–')));
  return {
    title: `${project.name}: privacy`,
    el: h('section', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Projects'), ' / ', h('a', { href: `#/projects/${pid}` }, project.name), ' / '),
      h('h1', {}, 'Photo privacy review'),
      h('p', { class: settings.photos_not_current ? 'warn' : 'dim', id: 'not-current' },
        `${settings.photos_published} of ${settings.photos} photos published; ${settings.photos_not_current} not yet re-blurred since the last subject change.`),
      h('p', { class: 'dim' }, `Match threshold ${settings.match_threshold ?? 'none (every face blurred)'} · ${subjects.length} opted-out subject(s): ${subjects.map((s) => s.label).join(', ') || 'none'}`),
      list.items.length
        ? h('table', { class: 'list' }, h('thead', {}, h('tr', {}, h('th', {}, 'Photo'), h('th', {}, 'State'), h('th', {}, 'Faces'), h('th', {}, 'Variants'))), h('tbody', {}, rows))
        : h('p', { class: 'dim' }, 'No photos yet.'),
      h('h2', {}, 'Matching'), settingsForm,
      h('h2', {}, 'Add photos'), addPhotos,
      h('h2', {}, 'Enrol a subject who asked not to be shown'), enrol, progress, out),
  };
}

/** Boxes (fractions of the image) over an image, in an SVG the size of the image. */
function overlay(img, faces, regions, onDraw) {
  const svg = svgEl('svg', { viewBox: '0 0 1 1', preserveAspectRatio: 'none', class: 'boxes' });
  const rect = (r, cls, title) => {
    const el = svgEl('rect', { x: r.x, y: r.y, width: r.w, height: r.h, class: cls });
    if (title) el.append(svgEl('title', {}, title));
    svg.append(el);
    return el;
  };
  faces.forEach((f, i) => rect(f.bbox, `face ${f.decision?.decision || ''}`, `face ${i + 1}: ${decisionText(f.decision)[0]}`));
  regions.forEach((r) => rect(r, 'region'));
  if (onDraw) {
    let start = null;
    let live = null;
    const at = (e) => {
      const b = svg.getBoundingClientRect();
      return [Math.min(1, Math.max(0, (e.clientX - b.left) / b.width)), Math.min(1, Math.max(0, (e.clientY - b.top) / b.height))];
    };
    svg.addEventListener('pointerdown', (e) => { start = at(e); live = rect({ x: start[0], y: start[1], w: 0, h: 0 }, 'region drawing'); svg.setPointerCapture(e.pointerId); });
    svg.addEventListener('pointermove', (e) => {
      if (!start) return;
      const [x, y] = at(e);
      live.setAttribute('x', Math.min(x, start[0])); live.setAttribute('y', Math.min(y, start[1]));
      live.setAttribute('width', Math.abs(x - start[0])); live.setAttribute('height', Math.abs(y - start[1]));
    });
    svg.addEventListener('pointerup', (e) => {
      if (!start) return;
      const [x, y] = at(e);
      const r = { x: Math.min(x, start[0]), y: Math.min(y, start[1]), w: Math.abs(x - start[0]), h: Math.abs(y - start[1]) };
      start = null;
      live.setAttribute('class', 'region');
      if (r.w > 0.005 && r.h > 0.005) onDraw(r); else live.remove();
    });
  }
  return h('div', { class: 'boxed' }, img, svg);
}

export async function photo(id) {
  const p = await api(`/v1/x-tessera/photos/${id}`);
  const subjects = await api(`/v1/x-tessera/projects/${p.project_id}/subjects`).then((s) => s.items).catch(() => []);
  labels = new Map(subjects.map((s) => [s.subject_id, s.label]));
  window.__tessera.photo = { id, status: p.status, faces: p.faces?.length ?? null, variants: [] };
  const out = h('div');
  const regions = [...(p.blur_regions || [])];
  const regionList = h('span', { class: 'dim' }, `${regions.length} manual region(s)`);

  // The unblurred original, only if the server lets this key see it.
  let original = null;
  try {
    const src = await blobUrl(`/v1/x-tessera/photos/${id}/original`, p.variant_version);
    original = h('img', { src, alt: `${p.name}, unblurred original` });
  } catch (e) {
    original = e.status === 403 ? null : h('p', { class: 'dim' }, e.message);
  }
  const variants = h('div', { class: 'variants' });
  const loaded = [];
  const show = (v, img) => blobUrl(v.url, p.variant_version)
    .then((u) => new Promise((res) => { img.onload = () => res(img.naturalWidth); img.onerror = () => res(0); img.src = u; }))
    .then((w) => { window.__tessera.photo.variants.push({ variant: v.variant, width: w }); });
  for (const v of p.variants || []) {
    if (!v.url) continue;
    const img = h('img', { alt: `${v.variant} variant of ${p.name}` });
    if (v.variant === 'public') {
      loaded.push(show(v, img));
      variants.append(h('figure', {}, img, h('figcaption', {}, 'public (opted-out faces blurred)')));
    } else {
      // A subject's own copy shows their face: fetched (and audited) only when asked for.
      const ask = h('button', {
        class: 'ghost',
        onclick: () => { ask.replaceWith(img); show(v, img); },
      }, `Show ${who(v.variant)}'s own copy (audited)`);
      variants.append(h('figure', {}, ask, h('figcaption', {}, `${who(v.variant)}'s own copy: their face shown, others blurred`)));
      window.__tessera.photo.subjectCopies = (window.__tessera.photo.subjectCopies || 0) + 1;
    }
  }
  Promise.all(loaded).then(() => { window.__tessera.photo.loaded = true; });

  const draw = (r) => { regions.push(r); regionList.textContent = `${regions.length} manual region(s), unsaved`; };
  const faces = p.faces || [];
  let base = original;
  const pub = (p.variants || []).find((v) => v.variant === 'public' && v.url);
  if (!base && pub) {
    base = h('img', { alt: `${p.name}, public variant` });
    blobUrl(pub.url, p.variant_version).then((u) => { base.src = u; }).catch(() => {});
  }
  const canvas = base ? overlay(base, original ? faces : [], regions, draw) : h('p', { class: 'dim' }, 'Nothing to show yet.');

  const save = h('button', {
    onclick: async () => {
      try {
        await api(`/v1/x-tessera/photos/${id}/blur-regions`, { method: 'PUT', body: { regions } });
        toast('Regions saved: re-blurring');
        regionList.textContent = `${regions.length} manual region(s), saved`;
      } catch (e) { fill(out, errorBox(e)); }
    },
  }, 'Save regions and re-blur');
  const clear = h('button', { class: 'ghost', onclick: () => window.dispatchEvent(new HashChangeEvent('hashchange')) }, 'Discard unsaved');
  const reprocess = h('button', {
    onclick: async () => {
      try { await api(`/v1/x-tessera/photos/${id}:reprocess`, { method: 'POST' }); toast('Reprocessing'); } catch (e) { fill(out, errorBox(e)); }
    },
  }, 'Reprocess');

  const table = h('table', { class: 'list' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Face'), h('th', {}, 'Detector score'), h('th', {}, 'Decision'), h('th', {}, 'Similarity'), h('th', {}, 'Decided at'))),
    h('tbody', {}, faces.map((f, i) => {
      const [text, sim] = decisionText(f.decision);
      // The threshold this face was held to, and why (smaller or tilted faces are held to what
      // the same person was measured to reach at their size and roll).
      const rule = f.rule ? h('span', { title: f.rule.why }, `${f.rule.threshold.toFixed(3)}${f.rule.lowered_by > 0 ? ` (${f.rule.basis.replaceAll('_', ' ')})` : ''}`) : '–';
      return h('tr', {}, h('td', {}, String(i + 1)), h('td', {}, f.score.toFixed(2)), h('td', {}, text), h('td', {}, sim == null ? '–' : sim.toFixed(3)), h('td', {}, rule));
    })));
  return {
    title: p.name,
    el: h('section', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Projects'), ' / ', h('a', { href: `#/projects/${p.project_id}/privacy` }, 'Privacy review'), ' / '),
      h('h1', {}, p.name, ' ', badge(p.status)),
      p.reason ? h('p', { class: 'error' }, p.reason) : null,
      h('p', { class: 'dim' }, `${p.width}×${p.height} · version ${p.variant_version} · `, regionList),
      h('div', { class: 'split' },
        h('div', {}, h('h2', {}, original ? 'Original, faces boxed (admin)' : 'Public variant'),
          original ? null : h('p', { class: 'dim' }, 'The unblurred original needs an admin key.'),
          canvas, h('p', { class: 'dim' }, 'Drag on the image to add a blur region.'), h('div', { class: 'actions' }, save, clear, reprocess), out),
        h('div', {}, h('h2', {}, 'Faces'), faces.length ? table : h('p', { class: 'dim' }, p.faces ? 'No faces found.' : 'Faces not detected: nobody in this project opted out, so photos are published as they are.'))),
      h('h2', {}, 'Variants'), variants),
  };
}
