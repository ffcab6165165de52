// A dataset: drop photos to upload them (chunked, resumable, a bar per file and one
// overall), its images as a thumbnail grid with EXIF and a GPS map, and the form that
// starts a reconstruction with what the server's capabilities allow.

import { api, all, blobUrl, capabilities } from '../api.js';
import { h, fill, errorBox, field, fmt, toast, RECON_RECIPES, confirmDelete, pipelineRequest, cameraModelSays, dropZone } from '../dom.js';
import { uploadFile } from '../upload.js';
import { gpsMap } from './map.js';

const IMAGE = /\.(jpe?g|png|tiff?|webp|heic|heif)$/i;

/** Run `f` over `items`, `n` at a time. */
async function pool(items, n, f) {
  const queue = [...items.entries()];
  await Promise.all(Array.from({ length: Math.min(n, queue.length) }, async () => {
    for (let next = queue.shift(); next; next = queue.shift()) await f(next[1], next[0]);
  }));
}

function recipeForm(pid, did, caps) {
  const has = (c) => caps.features?.[c] === true;
  const engine = new Set(caps['x-tessera']?.engine_capabilities || []);
  const mappers = RECON_RECIPES.filter((m) => has(`map.${m}`));
  const mapper = h('select', { name: 'mapper' }, mappers.map((m) => h('option', { value: m }, m)));
  const pairs = h('select', { name: 'pairs' },
    h('option', { value: 'auto' }, 'auto (chosen from the photos)'),
    ['exhaustive', 'sequential'].filter((p) => has(`pairs.${p}`)).map((p) => h('option', { value: p }, p)));
  const ba = h('select', { name: 'ba' }, ['standard', 'two_stage'].filter((b) => engine.has(`ba.${b}`)).map((b) => h('option', { value: b }, fmt.phase(b))));
  const georef = h('select', { name: 'georeference', onchange: () => { georef.dataset.chosen = 'yes'; } }, h('option', { value: 'none' }, 'none'),
    engine.has('georegister.sim3') ? h('option', { value: 'gps' }, 'GPS from EXIF') : null);
  const georefWhy = h('small', { class: 'dim' });
  // Where LAS, LAZ and camera GeoJSON coordinates are written; empty is the default
  // (the photos' UTM zone).
  const crs = h('input', { name: 'crs', placeholder: 'auto or EPSG:NNNN', 'aria-label': 'Coordinate system of the LAS, LAZ and camera GeoJSON exports' });
  const exports = ['ply', 'nvm', 'colmap_text', 'colmap_bin', 'las', 'laz', 'cameras_geojson'].filter((e) => engine.has(`export.${e}`))
    // PLY on by default: the point cloud is what most people take away.
    .map((e) => h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'export', value: e, checked: e === 'ply' }), fmt.phase(e)));
  const out = h('div');
  const start = h('button', { type: 'submit', disabled: true }, 'Start reconstruction');
  const why = h('p', { class: 'dim' });
  const form = h('form', {
    class: 'recipe',
    'aria-label': 'Start a reconstruction',
    onsubmit: async (e) => {
      e.preventDefault();
      const body = pipelineRequest({
        dataset: did,
        mapper: mapper.value,
        pairs: pairs.value === 'auto' ? null : { strategy: pairs.value },
        ba: ba.value,
        georeference: georef.value,
        exports: [...form.querySelectorAll('input[name=export]:checked')].map((i) => i.value),
        crs: crs.value.trim(),
      });
      try {
        const r = await api(`/v1/projects/${pid}/pipelines/${mapper.value}`, { method: 'POST', body });
        location.hash = `#/jobs/${r.job_id}`;
      } catch (err) { fill(out, errorBox(err)); }
    },
  },
  field('Mapper', mapper), field('Pairs', pairs), field('Bundle adjustment', ba), h('div', { class: 'field' }, field('Georeference', georef), georefWhy),
  h('fieldset', {}, h('legend', {}, 'Exports (points for the viewer always)'), exports),
  field('Coordinate system (LAS, LAZ, cameras)', crs),
  start, why, out);
  // Whether there is anything to reconstruct: called again after each upload or delete,
  // which also clears an error the form showed before (say "has no images").
  form.images = (n) => {
    start.disabled = !mappers.length || n < 2;
    why.textContent = !mappers.length ? 'This server has no reconstruction engine.'
      : n < 2 ? `Add at least two photos first (${n} so far).` : '';
    fill(out);
  };
  // Photos that carry GPS are placed on the map by it unless the person chose otherwise:
  // a model in metres, where it was taken, is what they expect of a geotagged set.
  form.gps = (withGps, n) => {
    const can = [...georef.options].some((o) => o.value === 'gps');
    if (!can || georef.dataset.chosen) return;
    const most = n >= 3 && withGps >= 0.8 * n;
    georef.value = most ? 'gps' : 'none';
    georefWhy.textContent = most ? `GPS chosen: ${withGps} of ${n} photos carry it.` : '';
  };
  return form;
}

export async function view(pid, did) {
  const [d, caps, project] = await Promise.all([api(`/v1/projects/${pid}/datasets/${did}`), capabilities(), api(`/v1/projects/${pid}`)]);
  const grid = h('ul', { class: 'grid', 'aria-label': 'Images' });
  // Shown once a photo is picked: an empty box beside the grid says nothing.
  const detail = h('aside', { class: 'detail', 'aria-live': 'polite', hidden: true });
  const mapBox = h('div', { class: 'map' });
  const uploads = h('ul', { class: 'uploads' });
  const overall = h('progress', { max: 1, value: 0, hidden: true, 'aria-label': 'All uploads' });
  const count = h('span', { class: 'dim' });

  // Each image's EXIF, asked for once: the map and the details panel share it (an image
  // id's bytes never change).
  const exifs = new Map();
  const exifOf = (img) => {
    if (!exifs.has(img.image_id)) {
      exifs.set(img.image_id, api(`/v1/images/${img.image_id}/exif`).catch((e) => { exifs.delete(img.image_id); throw e; }));
    }
    return exifs.get(img.image_id);
  };

  async function showImage(img) {
    detail.hidden = false;
    fill(detail, h('p', { class: 'dim' }, 'Loading…'));
    if (img.unreadable) {
      // Registered as the API must, but no run can use it: say why, and offer removal.
      fill(detail, h('h3', {}, img.name),
        h('p', { class: 'error', role: 'alert' }, `Not a photo a run can use: ${img.unreadable}. Runs skip it and say so.`),
        removeButton(img));
      return;
    }
    try {
      const [src, exif] = await Promise.all([blobUrl(`/v1/images/${img.image_id}/thumbnail?size=512`), exifOf(img)]);
      const rows = [
        ['Size', `${img.width}×${img.height}, ${fmt.bytes(img.byte_size)}`],
        ['Camera', exif.camera || '–'],
        ['Focal length', exif.focal_length_mm ? `${exif.focal_length_mm.toFixed(1)} mm` : '–'],
        ['GPS', exif.gps ? `${exif.gps.lat.toFixed(6)}, ${exif.gps.lon.toFixed(6)}${exif.gps.alt != null ? `, ${exif.gps.alt.toFixed(1)} m` : ''}` : '–'],
        ['Taken', exif.exif?.DateTimeOriginal || '–'],
      ];
      fill(detail, h('h3', {}, img.name), h('img', { src, alt: img.name, class: 'preview' }),
        h('dl', {}, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])), removeButton(img));
    } catch (e) { fill(detail, errorBox(e)); }
  }

  function removeButton(img) {
    return h('button', {
      class: 'danger',
      onclick: () => confirmDelete(`Remove ${img.name} from this dataset? Runs already made keep it; new runs will not have it.`, async () => {
        await api(`/v1/images/${img.image_id}`, { method: 'DELETE' });
        toast(`${img.name} removed`);
        fill(detail);
        detail.hidden = true;
        await refresh();
      }, detail),
    }, `Remove ${img.name}`);
  }

  async function refresh() {
    const images = await all(`/v1/datasets/${did}/images`);
    // Files registered undecoded are listed, but a run skips them: they are not photos
    // for the recipe or the GPS share.
    const readable = images.filter((img) => !img.unreadable).length;
    const unreadable = images.length - readable;
    count.textContent = `${readable} photo${readable === 1 ? '' : 's'}${unreadable ? `, and ${unreadable} file${unreadable === 1 ? '' : 's'} not readable as a photo` : ''}`;
    window.__tessera.dataset = { id: did, images: images.length, unreadable };
    recipe.images(readable);
    fill(grid, images.map((img) => {
      if (img.unreadable) {
        return h('li', {}, h('button', { class: 'thumb unreadable', onclick: () => showImage(img), title: img.unreadable }, h('span', {}, `${img.name} (not readable)`)));
      }
      const thumb = h('img', { alt: img.name, loading: 'lazy', width: 160, height: 120 });
      blobUrl(`/v1/images/${img.image_id}/thumbnail?size=256`).then((u) => { thumb.src = u; }).catch(() => {});
      return h('li', {}, h('button', { class: 'thumb', onclick: () => showImage(img), title: img.name }, thumb, h('span', {}, img.name)));
    }));
    // EXIF GPS for the map, a few requests at a time, drawn when all have answered
    // (the page does not wait for it).
    const points = [];
    pool(images.filter((img) => !img.unreadable), 6, async (img) => {
      const e = await exifOf(img).catch(() => null);
      if (e?.gps) points.push({ ...e.gps, name: img.name });
    }).then(() => {
      fill(mapBox, points.length ? gpsMap(points) : h('p', { class: 'dim' }, 'No photo here carries GPS.'));
      recipe.gps(points.length, readable);
    });
  }

  async function uploadAll(files) {
    const list = [...files].filter((f) => IMAGE.test(f.name));
    const skipped = [...files].filter((f) => !IMAGE.test(f.name)).map((f) => f.name);
    if (skipped.length) {
      const said = `Not added: ${skipped.slice(0, 5).join(', ')}${skipped.length > 5 ? ` and ${skipped.length - 5} more` : ''}. Only photos are taken (JPEG, PNG, TIFF, WebP, HEIC).`;
      uploads.append(h('li', { class: 'warn skipped' }, said));
      toast(said, 'warn');
    }
    if (!list.length) return;
    const total = list.reduce((s, f) => s + f.size, 0);
    const sent = new Map();
    overall.hidden = false;
    overall.max = total;
    const bump = () => { overall.value = [...sent.values()].reduce((a, b) => a + b, 0); };
    let failed = 0;
    let unusable = 0;
    await pool(list, 3, async (file) => {
      const bar = h('progress', { max: file.size, value: 0, 'aria-label': `Upload of ${file.name}` });
      const state = h('span', { class: 'dim' }, 'waiting');
      uploads.append(h('li', {}, h('span', { class: 'name' }, file.name), bar, state));
      try {
        const sha = await uploadFile(file, (n) => { bar.value = n; sent.set(file.name, n); bump(); state.textContent = `${fmt.bytes(n)} of ${fmt.bytes(file.size)}`; });
        const img = await api(`/v1/datasets/${did}/images`, { method: 'POST', body: { name: file.name, blob_sha: sha } });
        if (img.unreadable) {
          // Kept, as the API keeps it, but a run will skip it: say so where it was added.
          unusable += 1;
          state.replaceWith(h('span', { class: 'warn' }, `added, but not readable as a photo: ${img.unreadable}`));
        } else {
          state.textContent = 'added';
        }
      } catch (e) {
        failed += 1;
        state.replaceWith(errorBox(e));
      }
    });
    const added = list.length - failed - unusable;
    const said = [`${added} photo(s) added`, unusable && `${unusable} not readable as a photo`, failed && `${failed} failed`].filter(Boolean).join(', ');
    toast(said, failed || unusable ? 'warn' : 'info');
    await refresh();
  }

  const drop = dropZone({ id: 'files', label: 'Photos to add', text: 'Drop photos here, or', onFiles: uploadAll });

  const recipe = recipeForm(pid, did, caps);
  const gone = h('div');
  const deleteDataset = h('button', {
    class: 'danger',
    onclick: () => confirmDelete(`Delete the dataset “${d.name}” and its photos? Runs already made keep their results.`, async () => {
      await api(`/v1/projects/${pid}/datasets/${did}`, { method: 'DELETE' });
      toast(`Dataset ${d.name} deleted`);
      location.hash = `#/projects/${pid}`;
    }, gone),
  }, 'Delete dataset');
  await refresh().catch((e) => toast(e.message, 'error'));
  return {
    title: d.name,
    el: h('section', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Projects'), ' / ', h('a', { href: `#/projects/${pid}` }, project.name), ' / '),
      h('h1', {}, d.name, ' ', count),
      h('p', { class: 'dim' }, `Camera model ${d.camera_model} (${cameraModelSays(d.camera_model)}) · ${d.intrinsics_mode === 'per_image' ? 'one camera per photo' : 'photos of one size share a camera'}`),
      drop, overall, uploads,
      h('div', { class: 'split' }, grid, detail),
      h('h2', {}, 'Where they were taken'), mapBox,
      h('h2', {}, 'Reconstruct'), recipe,
      h('h2', {}, 'Delete'), deleteDataset, gone),
  };
}
