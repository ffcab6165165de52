// Photo privacy review: a project's photos with their state (and why a failed one
// failed), the photos not yet re-blurred after a subject change, subjects enrolled
// from reference photos; one photo with its faces boxed over the unblurred original
// (admin keys only: the server decides, answering 403 to others), each face's decision
// and similarity, the public and per-subject variants side by side, manual blur
// regions drawn with a mouse, a pen or a finger, and reprocessing. Both pages keep
// themselves current while anything on them is still being processed.

import { api, all, blobUrl, download } from '../api.js';
import { h, fill, errorBox, field, fmt, toast, badge, svg as svgEl, confirmDelete, dropZone } from '../dom.js';
import { uploadFile } from '../upload.js';


/** Subject ids to labels, for the photo being shown. */
let labels = new Map();
const who = (id) => labels.get(id) || `subject …${id.slice(-6)}`;

function decisionText(d) {
  switch (d?.decision) {
    // Whom a face matched is shown to admin keys only; others see the kind.
    case 'subject': return [d.subject ? `opted out (${who(d.subject)}): blurred` : 'opted out: blurred', d.similarity];
    case 'ambiguous': return [d.candidates ? `could be ${d.candidates.length} opted-out people: blurred` : 'could be an opted-out person: blurred', d.candidates?.[0]?.[1]];
    case 'not_opted_out': return ['matches nobody who opted out: shown', d.best];
    case 'fail_closed': return ['no threshold set: blurred', null];
    default: return ['not decided yet: blurred', null];
  }
}

/** A photo's state in words (the badge keeps the API's name as its class). */
const STATE_WORDS = {
  ingesting: 'uploading', ingested: 'waiting for face detection', processing: 'finding and blurring faces',
  published: 'published', failed: 'failed',
};
const stateBadge = (status) => { const b = badge(status); b.textContent = STATE_WORDS[status] || status; return b; };
const settled = (status) => status === 'published' || status === 'failed';

/** What the project's threshold means for its photos, in a sentence. */
function thresholdSays(settings, subjects) {
  if (settings.match_threshold == null) {
    return subjects
      ? 'No match threshold is set, so every face in every photo is blurred. Opting someone out changes nothing until a threshold is set; then only opted-out people are blurred.'
      : 'No match threshold is set, so every face in every photo is blurred.';
  }
  return subjects
    ? `Faces at or above similarity ${settings.match_threshold} to an opted-out person are blurred; everyone else is shown.`
    : 'Nobody has opted out, so photos are published as they are.';
}

/** The people a project's photos show, or `null` where the key may not list them. */
const peopleOf = (pid) => api(`/v1/x-tessera/projects/${pid}/clusters?page_size=100`)
  .then((r) => r.items)
  .catch((e) => { if (e.status === 403) return null; throw e; });

/** A person's standing in words. */
function standingSays(c) {
  if (c.standing === 'opted_out') return `opted out as ${c.subjects.map((s) => s.label).join(', ')}: blurred in every photo`;
  if (c.standing === 'nobody') return `${c.clear_views} clear views match nobody who opted out: shown`;
  return 'shown unless a photo of them matches someone who opted out';
}

/** Call `f` every `ms` while the page is visible and `wanted()` holds; answers a stop. */
function keepCurrent(f, wanted, ms = 2000) {
  let busy = false;
  const timer = setInterval(async () => {
    if (busy || document.hidden || !wanted()) return;
    busy = true;
    try { await f(); } catch { /* the next turn tries again */ } finally { busy = false; }
  }, ms);
  return () => clearInterval(timer);
}

export async function photos(pid) {
  const [project, settings, list, subjects, found] = await Promise.all([
    api(`/v1/projects/${pid}`),
    api(`/v1/x-tessera/projects/${pid}/privacy`),
    all(`/v1/x-tessera/projects/${pid}/photos`).then((items) => ({ items })),
    api(`/v1/x-tessera/projects/${pid}/subjects`).then((s) => s.items).catch(() => []),
    peopleOf(pid),
  ]);
  const out = h('div');
  const counts = h('p', { id: 'not-current' });
  // A re-blurring sweep that ended before it reached every photo (cancelled, or out of
  // attempts): the photos it left stay withheld until someone resumes it, so the page
  // says so and offers that, instead of polling for a change that will not come.
  const stalled = h('div', { id: 'sweep-stalled', class: 'warn', hidden: true });
  async function resume(job) {
    try {
      await api(`/v1/jobs/${job}:resume`, { method: 'POST' });
      toast('Re-blurring resumed: the photos it had not reached are decided again');
      poke();
      await refresh();
    } catch (err) { fill(out, errorBox(err)); }
  }
  const tbody = h('tbody');
  const table = h('table', { class: 'list' }, h('thead', {}, h('tr', {}, h('th', {}, 'Photo'), h('th', {}, 'State'), h('th', {}, 'Faces'), h('th', {}, 'Copies'))), tbody);
  const empty = h('p', { class: 'dim' }, 'No photos yet.');
  let current = { settings, items: list.items, people: found };
  const peopleList = h('div');
  // Typed labels survive the list being drawn again while photos are processed.
  const typed = new Map();
  function renderPeople() {
    const { people } = current;
    if (people === null) {
      fill(peopleList, h('p', { class: 'dim' }, 'Only an admin key lists who appears in which photos.'));
      return;
    }
    if (!people.length) {
      fill(peopleList, h('p', { class: 'dim' }, 'Nobody found yet. People are told apart once a match threshold is set and someone has opted out; a project without a threshold blurs every face and recognises nobody.'));
      return;
    }
    fill(peopleList, h('ul', { class: 'subjects people' }, people.map((c, i) => {
      const n = i + 1;
      const input = h('input', { maxlength: 200, 'aria-label': `Label for person ${n}`, placeholder: 'name or description', value: typed.get(c.cluster_id) || '', oninput: (e) => typed.set(c.cluster_id, e.target.value) });
      const optOut = h('form', {
        class: 'inline',
        onsubmit: async (e) => {
          e.preventDefault();
          const label = input.value.trim();
          if (!label) { fill(out, h('p', { class: 'error' }, `Give person ${n} a label first: the name you were given, or a description.`)); return; }
          try {
            const r = await api(`/v1/x-tessera/projects/${pid}/clusters/${c.cluster_id}/opt-out`, { method: 'POST', body: { label } });
            typed.delete(c.cluster_id);
            toast(`${r.label} opted out: every photo is re-decided`);
            window.dispatchEvent(new HashChangeEvent('hashchange'));
          } catch (err) { fill(out, errorBox(err)); }
        },
      }, input, h('button', { type: 'submit', class: 'ghost' }, `Opt person ${n} out`));
      return h('li', {},
        h('strong', {}, `Person ${n}`), h('span', {}, ` ${c.summary} (${c.faces} face${c.faces === 1 ? '' : 's'})`),
        h('span', { class: c.standing === 'opted_out' ? 'dim' : '' }, ` · ${standingSays(c)}`),
        c.standing === 'opted_out' ? null : optOut);
    })));
  }
  function render() {
    const { settings: st, items } = current;
    window.__tessera.privacy = { photos: items.map((p) => ({ id: p.photo_id, status: p.status })), people: (current.people || []).map((c) => ({ faces: c.faces, photos: c.photos, standing: c.standing })), notCurrent: st.photos_not_current, processing: st.photos_processing, stalled: Boolean(st.sweep_stalled), refreshes: (window.__tessera.privacy?.refreshes || 0) };
    renderPeople();
    const parts = [`${st.photos_published} of ${st.photos} photos published`];
    if (st.photos_processing) parts.push(`${st.photos_processing} being processed`);
    if (st.photos_failed) parts.push(`${st.photos_failed} failed`);
    if (st.photos_not_current) parts.push(`${st.photos_not_current} withheld until re-blurred after the last change to who opted out or to the threshold`);
    counts.textContent = `${parts.join('; ')}.`;
    counts.className = st.photos_not_current || st.photos_failed ? 'warn' : 'dim';
    const stall = st.sweep_stalled;
    stalled.hidden = !stall;
    fill(stalled, stall ? [
      h('p', {}, `Re-blurring stopped before it reached every photo (${stall.reason}). The photos it did not reach stay withheld until it is resumed.`),
      h('button', { type: 'button', onclick: () => resume(stall.job_id) }, 'Resume re-blurring'),
    ] : []);
    fill(tbody, items.map((p) => h('tr', {},
      h('td', {}, h('a', { href: `#/photos/${p.photo_id}` }, p.name || 'photo')),
      h('td', {}, stateBadge(p.status), p.reason ? h('div', { class: 'reason' }, p.reason) : null),
      h('td', {}, p.faces ? String(p.faces.length) : '–'),
      h('td', { class: 'dim' }, p.variants?.length ? `${p.variants.length}` : '–'))));
    table.hidden = !items.length;
    empty.hidden = Boolean(items.length);
  }
  async function refresh() {
    const [st, items, people] = await Promise.all([api(`/v1/x-tessera/projects/${pid}/privacy`), all(`/v1/x-tessera/projects/${pid}/photos`), peopleOf(pid)]);
    current = { settings: st, items, people };
    render();
    window.__tessera.privacy.refreshes += 1;
  }
  // Photos a stalled sweep left wait for a person, not for time.
  const waiting = (p) => !settled(p.status) && !(current.settings.sweep_stalled && p.reason);
  const busy = () => current.items.some(waiting) || (current.settings.photos_not_current > 0 && !current.settings.sweep_stalled) || current.settings.photos_processing > 0;
  // Kept current while anything is in flight, and for a while after this page changed
  // something (a photo added is not listed until its ingest has run).
  let until = 0;
  const poke = (ms = 15000) => { until = Date.now() + ms; };
  const stop = keepCurrent(refresh, () => busy() || Date.now() < until);
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

  const threshold = h('input', { type: 'number', min: 0, max: 1, step: 0.001, value: settings.match_threshold ?? '', placeholder: `empty: blur every face; recommended ${settings.recommended_threshold}` });
  const useRecommended = h('button', { type: 'button', class: 'ghost', onclick: () => { threshold.value = String(settings.recommended_threshold); threshold.focus(); } }, `Use the recommended ${settings.recommended_threshold}`);
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
        current.settings.match_threshold = v === '' ? null : Number(v);
        fill(says, thresholdSays(current.settings, subjects.length));
        poke();
        await refresh();
      } catch (err) { fill(out, errorBox(err)); }
    },
  }, field('Match threshold', threshold,
    `How sure a match must be: the cosine similarity (0 to 1) of a face to an opted-out person's reference photos. ${settings.recommended_threshold} is recommended: on held-out test photos it left no opted-out face recognisable and blurred at most 5 % of bystanders. Lower blurs more people; empty blurs every face.`),
  useRecommended, h('button', { type: 'submit' }, 'Save threshold'));

  // Photos are added as soon as they are dropped or chosen, as on a dataset's page.
  const addPhotos = dropZone({
    id: 'photo-files',
    label: 'Photos to publish',
    text: 'Drop photos to publish here, or',
    onFiles: async (files) => {
      if (!files.length) return;
      try {
        await addFiles(files, true);
        toast('Photos added: ingest and face processing follow');
        poke();
        await refresh();
      } catch (err) { fill(out, errorBox(err)); }
    },
  });

  const label = h('input', { required: true, maxlength: 200 });
  // Reference photos are kept until the form is sent with a name.
  let refFiles = [];
  const refsChosen = h('small', { class: 'dim' }, 'None chosen yet.');
  const refs = dropZone({
    id: 'ref-files',
    label: 'Reference photos (1–20, one face each)',
    text: 'Reference photos (1–20, one face each): drop them here, or',
    onFiles: (files) => {
      refFiles = files;
      refsChosen.textContent = files.length ? `Chosen: ${files.map((f) => f.name).join(', ')}` : 'None chosen yet.';
    },
  });
  const enrol = h('form', {
    class: 'inline',
    onsubmit: async (e) => {
      e.preventDefault();
      if (!refFiles.length) { fill(out, h('p', { class: 'error' }, 'Add at least one reference photo of the person first.')); return; }
      try {
        const shas = await addFiles(refFiles, false);
        const r = await api(`/v1/x-tessera/projects/${pid}/subjects`, { method: 'POST', body: { label: label.value.trim(), blob_shas: shas } });
        toast(`${r.label} enrolled: every photo is re-decided${r.warnings?.length ? `. ${r.warnings.join(' ')}` : ''}`, r.warnings?.length ? 'warn' : 'info');
        window.dispatchEvent(new HashChangeEvent('hashchange'));
      } catch (err) { fill(out, errorBox(err)); }
    },
  }, field('Name or label', label), h('div', { class: 'field' }, refs, refsChosen), h('button', { type: 'submit' }, 'Enrol opted-out subject'));

  render();
  const says = h('p', { class: settings.match_threshold == null && subjects.length ? 'warn' : 'dim' }, thresholdSays(settings, subjects.length));
  const people = subjects.length
    ? h('ul', { class: 'subjects' }, subjects.map((sub) => h('li', {},
      h('strong', {}, sub.label), h('span', { class: 'dim' }, ` · ${sub.usable_views} usable reference view(s)`),
      sub.warnings?.length ? h('div', { class: 'warn' }, sub.warnings.join(' ')) : null,
      h('button', {
        class: 'ghost danger',
        onclick: () => confirmDelete(`Remove ${sub.label}'s opt-out? Their face will be shown again in every photo once it is re-decided, and their reference faces are erased.`, async () => {
          await api(`/v1/x-tessera/projects/${pid}/subjects/${sub.subject_id}`, { method: 'DELETE' });
          toast(`${sub.label}'s opt-out removed: every photo is re-decided`);
          window.dispatchEvent(new HashChangeEvent('hashchange'));
        }, out),
      }, `Remove ${sub.label}'s opt-out`))))
    : h('p', { class: 'dim' }, 'Nobody has opted out in this project.');
  return {
    title: `${project.name}: privacy`,
    cleanup: stop,
    el: h('section', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Projects'), ' / ', h('a', { href: `#/projects/${pid}` }, project.name), ' / '),
      h('h1', {}, 'Photo privacy review'),
      counts, stalled, says,
      table, empty,
      h('h2', {}, 'People who opted out'), people,
      h('h2', {}, 'People in these photos'),
      h('p', { class: 'dim' }, 'The same face across the photos, most photos first. Opting a person out here blurs them in every photo, without a reference photo: how an organiser acts on a request from someone they can point at.'),
      peopleList,
      h('h2', {}, 'Matching'), settingsForm,
      h('h2', {}, 'Add photos'), addPhotos,
      h('h2', {}, 'Enrol a person who asked not to be shown'), enrol, progress, out),
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
  const look = (f) => (f.decision?.decision === 'not_opted_out' ? 'shown' : 'blurred');
  faces.forEach((f, i) => rect(f.bbox, `face ${look(f)} ${f.decision?.decision || ''}`, `face ${i + 1}: ${decisionText(f.decision)[0]}`));
  regions.forEach((r) => rect(r, 'region'));
  // Numbers in HTML over the image, matching the table's rows (SVG text would be
  // stretched with the non-uniform viewBox).
  const numbers = faces.map((f, i) => {
    const n = h('span', { class: `face-number ${look(f)}`, 'aria-hidden': 'true' }, String(i + 1));
    // Placed through the CSSOM: the page's Content-Security-Policy refuses style attributes.
    n.style.left = `${(f.bbox.x * 100).toFixed(3)}%`;
    n.style.top = `${(f.bbox.y * 100).toFixed(3)}%`;
    return n;
  });
  if (onDraw) {
    // One pointer draws; a touch screen's finger included: the layer takes the gesture
    // (`touch-action: none` in the style sheet), and a gesture the browser cancels after
    // all (a second finger, a system gesture) leaves nothing behind.
    let start = null;
    let live = null;
    let pointer = null;
    const at = (e) => {
      const b = svg.getBoundingClientRect();
      return [Math.min(1, Math.max(0, (e.clientX - b.left) / b.width)), Math.min(1, Math.max(0, (e.clientY - b.top) / b.height))];
    };
    const abandon = () => { live?.remove(); start = null; live = null; pointer = null; };
    svg.addEventListener('pointerdown', (e) => {
      if (pointer !== null) { abandon(); return; }
      e.preventDefault();
      pointer = e.pointerId;
      start = at(e);
      live = rect({ x: start[0], y: start[1], w: 0, h: 0 }, 'region drawing');
      svg.setPointerCapture(e.pointerId);
    });
    svg.addEventListener('pointermove', (e) => {
      if (!start || e.pointerId !== pointer) return;
      const [x, y] = at(e);
      live.setAttribute('x', Math.min(x, start[0])); live.setAttribute('y', Math.min(y, start[1]));
      live.setAttribute('width', Math.abs(x - start[0])); live.setAttribute('height', Math.abs(y - start[1]));
    });
    svg.addEventListener('pointerup', (e) => {
      if (!start || e.pointerId !== pointer) return;
      const [x, y] = at(e);
      const r = { x: Math.min(x, start[0]), y: Math.min(y, start[1]), w: Math.abs(x - start[0]), h: Math.abs(y - start[1]) };
      const drawn = live;
      start = null; live = null; pointer = null;
      drawn.setAttribute('class', 'region');
      if (r.w > 0.005 && r.h > 0.005) onDraw(r); else drawn.remove();
    });
    svg.addEventListener('pointercancel', abandon);
    svg.addEventListener('lostpointercapture', (e) => { if (e.pointerId === pointer) abandon(); });
  }
  return h('div', { class: 'boxed' }, img, svg, numbers);
}

/** What the red, blue and yellow boxes mean. */
const legend = () => h('ul', { class: 'legend', 'aria-label': 'Box colours' },
  h('li', {}, h('span', { class: 'swatch blurred' }), 'blurred in the public copy (opted out, unsure, or no threshold)'),
  h('li', {}, h('span', { class: 'swatch shown' }), 'shown: matches nobody who opted out'),
  h('li', {}, h('span', { class: 'swatch region' }), 'blur region drawn by hand'));

export async function photo(id) {
  const p = await api(`/v1/x-tessera/photos/${id}`);
  const [subjects, settings, project] = await Promise.all([
    api(`/v1/x-tessera/projects/${p.project_id}/subjects`).then((s) => s.items).catch(() => []),
    api(`/v1/x-tessera/projects/${p.project_id}/privacy`).catch(() => null),
    api(`/v1/projects/${p.project_id}`).catch(() => null),
  ]);
  labels = new Map(subjects.map((s) => [s.subject_id, s.label]));
  window.__tessera.photo = { id, status: p.status, faces: p.faces?.length ?? null, variants: [], version: p.variant_version, regions: (p.blur_regions || []).length };
  const out = h('div');
  const regions = [...(p.blur_regions || [])];
  const regionList = h('span', { class: 'dim' }, `${regions.length} manual region(s)`);

  // The unblurred original, only if the server lets this key see it.
  // A refused upload (no size: ingest never read it) has nothing to show.
  let original = null;
  if (p.width) {
    try {
      const src = await blobUrl(`/v1/x-tessera/photos/${id}/original`, p.variant_version);
      original = h('img', { src, alt: `${p.name}, unblurred original` });
    } catch (e) {
      original = e.status === 403 ? null : h('p', { class: 'dim' }, e.message);
    }
  }
  const variants = h('div', { class: 'variants' });
  // A copy saved under the photo's name and whom it is for, its size on the button.
  const saveVariant = (v, whom, text) => h('button', {
    class: 'ghost download',
    onclick: () => download(v.url, `${p.name.replace(/\.[^.]+$/, '')}-${whom.replace(/[^\w.-]+/g, '_')}.jpg`).catch((e) => toast(e.message, 'error')),
  }, text, v.byte_size ? h('span', { class: 'dim' }, ` ${fmt.bytes(v.byte_size)}`) : null);
  const loaded = [];
  const show = (v, img) => blobUrl(v.url, p.variant_version)
    .then((u) => new Promise((res) => { img.onload = () => res(img.naturalWidth); img.onerror = () => res(0); img.src = u; }))
    .then((w) => { window.__tessera.photo.variants.push({ variant: v.variant, width: w }); });
  const faceList = p.faces || [];
  const blurredInPublic = faceList.filter((f) => f.decision?.decision !== 'not_opted_out').length;
  const publicCaption = settings && settings.match_threshold == null
    ? `Public copy: every face blurred (${faceList.length}), because no match threshold is set`
    : `Public copy: ${blurredInPublic} of ${faceList.length} face(s) blurred (opted out or unsure); the others shown`;
  for (const v of p.variants || []) {
    if (!v.url) continue;
    const img = h('img', { alt: `${v.variant} variant of ${p.name}` });
    if (v.variant === 'public') {
      loaded.push(show(v, img));
      variants.append(h('figure', {}, img, h('figcaption', {}, publicCaption, ' ', saveVariant(v, 'public', 'Download the public copy'))));
    } else {
      // A subject's own copy shows their face: fetched (and audited) only when asked for.
      const ask = h('button', {
        class: 'ghost',
        onclick: () => { ask.replaceWith(img, saveVariant(v, who(v.variant), `Download ${who(v.variant)}'s copy`)); show(v, img); },
      }, `Show ${who(v.variant)}'s own copy (audited)`);
      variants.append(h('figure', {}, ask, h('figcaption', {}, `${who(v.variant)}'s own copy: ${who(v.variant)} shown; other opted-out or unsure faces blurred, the rest shown as in the public copy`)));
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

  // After a change, the page follows the photo until its new version is published (or
  // fails), then shows it: the re-blurred copy replaces the old one without a reload.
  let waitingFor = settled(p.status) ? null : Date.now();
  const stop = keepCurrent(async () => {
    const now = await api(`/v1/x-tessera/photos/${id}`);
    window.__tessera.photo.polls = (window.__tessera.photo.polls || 0) + 1;
    if (!settled(now.status)) return;
    if (now.variant_version !== p.variant_version || now.status !== p.status) {
      waitingFor = null;
      window.dispatchEvent(new HashChangeEvent('hashchange'));
    } else if (Date.now() - waitingFor > 30_000) {
      // Asked, but nothing came of it (an edit that changed nothing): stop asking.
      waitingFor = null;
    }
  }, () => waitingFor !== null);
  const save = h('button', {
    onclick: async () => {
      try {
        await api(`/v1/x-tessera/photos/${id}/blur-regions`, { method: 'PUT', body: { regions } });
        toast('Regions saved: re-blurring');
        regionList.textContent = `${regions.length} manual region(s), saved; re-blurring…`;
        waitingFor = Date.now();
      } catch (e) { fill(out, errorBox(e)); }
    },
  }, 'Save regions and re-blur');
  const clear = h('button', { class: 'ghost', onclick: () => window.dispatchEvent(new HashChangeEvent('hashchange')) }, 'Discard unsaved');
  const reprocess = h('button', {
    onclick: async () => {
      try {
        await api(`/v1/x-tessera/photos/${id}:reprocess`, { method: 'POST' });
        toast('Reprocessing');
        waitingFor = Date.now();
      } catch (e) { fill(out, errorBox(e)); }
    },
  }, 'Reprocess');
  const remove = h('button', {
    class: 'danger',
    onclick: () => confirmDelete(`Delete ${p.name}? Its upload and every copy made of it are erased.`, async () => {
      await api(`/v1/x-tessera/photos/${id}`, { method: 'DELETE' });
      toast(`${p.name} deleted`);
      location.hash = `#/projects/${p.project_id}/privacy`;
    }, out),
  }, 'Delete photo');

  const table = h('table', { class: 'list' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Face'), h('th', {}, 'Detector score'), h('th', {}, 'Decision'), h('th', {}, 'Best similarity'), h('th', {}, 'Threshold it was held to'))),
    h('tbody', {}, faces.map((f, i) => {
      const [text, sim] = decisionText(f.decision);
      // The threshold this face was held to, and why (smaller or tilted faces are held to what
      // the same person was measured to reach at their size and roll).
      const rule = f.rule ? h('span', { title: f.rule.why }, `${f.rule.threshold.toFixed(3)}${f.rule.lowered_by > 0 ? ` (${f.rule.basis.replaceAll('_', ' ')})` : ''}`) : '–';
      return h('tr', {}, h('td', {}, String(i + 1)), h('td', {}, f.score.toFixed(2)), h('td', {}, text), h('td', {}, sim == null ? '–' : sim.toFixed(3)), h('td', {}, rule));
    })));
  return {
    title: p.name,
    cleanup: stop,
    el: h('section', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Projects'), ' / ', project ? [h('a', { href: `#/projects/${p.project_id}` }, project.name), ' / '] : null, h('a', { href: `#/projects/${p.project_id}/privacy` }, 'Privacy review'), ' / '),
      h('h1', {}, p.name, ' ', stateBadge(p.status)),
      p.reason ? h('p', { class: 'error' }, p.reason) : null,
      p.width ? h('p', { class: 'dim' }, `${p.width}×${p.height} · version ${p.variant_version} · `, regionList) : null,
      h('div', { class: 'split' },
        h('div', {}, h('h2', {}, original ? 'Original, faces boxed (admin)' : 'Public variant'),
          original ? null : h('p', { class: 'dim' }, 'The unblurred original needs an admin key.'),
          canvas, original ? legend() : null, h('p', { class: 'dim' }, 'Drag on the image (with a mouse, a pen or a finger) to add a blur region.'), h('div', { class: 'actions' }, save, clear, reprocess, remove), out),
        h('div', {}, h('h2', {}, 'Faces'), faces.length ? table : h('p', { class: 'dim' }, p.faces ? 'No faces found.' : 'Faces not detected: nobody in this project opted out, so photos are published as they are.'))),
      h('h2', {}, 'Variants'), variants),
  };
}
