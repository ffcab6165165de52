// The console end to end in a real browser: Debian's Chromium driven by playwright-core
// (no browser download), WebGL through SwiftShader, against a fresh `tessera serve` on
// 127.0.0.1. Everything a person does without a terminal: create a project and a
// dataset, upload the sample photos, start a recipe, watch the stage timeline reach
// "succeeded" through a dropped event stream and a reload (no event missing or
// repeated), see the cloud with the right number of points and click a camera, enrol
// an opted-out subject, add photos, open one and see its variants and face boxes; make
// a webhook, watch its deliveries arrive (one retried) and delete it; then
// the same page asking for an API key. Any console error or page error fails the run.
// Screenshots of each view go to $SCREENSHOTS (default target/console-screenshots).
//
// Usage: node e2e.mjs   (env: TESSERA_BIN, REPO, SCREENSHOTS, CHROMIUM)

import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { createHmac } from 'node:crypto';

const REPO = resolve(process.env.REPO || new URL('../..', import.meta.url).pathname);
const BIN = process.env.TESSERA_BIN || join(process.env.CARGO_TARGET_DIR || join(REPO, 'target'), 'debug', 'tessera');
const SHOTS = resolve(process.env.SCREENSHOTS || join(REPO, 'target', 'console-screenshots'));
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SAMPLE = join(REPO, 'sample', 'images');
const FACES = join(REPO, '..', 'shared', 'testdata', 'faces');
mkdirSync(SHOTS, { recursive: true });

const log = (...a) => console.log(`[e2e ${new Date().toISOString().slice(11, 19)}]`, ...a);

/** Start `tessera serve` on a free port; answers {base, key, stop}. */
async function serve(args = [], env = {}) {
  const state = mkdtempSync(join(tmpdir(), 'tessera-console-'));
  const child = spawn(BIN, ['--state', state, 'serve', '--addr', '127.0.0.1:0', ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  let key = null;
  const base = await new Promise((res, rej) => {
    let buf = '';
    const timer = setTimeout(() => rej(new Error(`serve did not start: ${buf}`)), 60_000);
    child.stderr.on('data', (d) => {
      buf += d;
      // Whole lines only: a chunk may end mid-line.
      for (const line of buf.split('\n').slice(0, -1)) {
        if (line.startsWith('tsk_')) key = line.trim();
        const m = line.match(/^serving the Tessera API on (http:\/\/\S+)/);
        if (m) { clearTimeout(timer); res(m[1]); }
      }
    });
    child.on('exit', (c) => rej(new Error(`serve exited ${c}: ${buf}`)));
  });
  child.stderr.resume();
  return { base, key, stop: () => { child.kill('SIGTERM'); rmSync(state, { recursive: true, force: true }); } };
}

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: [
    '--no-sandbox', '--headless=new', '--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--ignore-gpu-blocklist',
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic',
  ],
});

/** A page that records every console error and page error. */
async function openPage(base, viewport = { width: 1280, height: 800 }) {
  const context = await browser.newContext({ viewport, baseURL: base });
  const page = await context.newPage();
  const errors = [];
  // A failed request's console line does not say which: the URL is kept beside it.
  page.on('response', (r) => { if (r.status() >= 400) errors.push(`response ${r.status()}: ${r.request().method()} ${new URL(r.url()).pathname}`); });
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => errors.push(`page: ${e.message}`));
  page.setDefaultTimeout(60_000);
  return { context, page, errors };
}

const shot = (page, name) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: false });
const state = (page, expr) => page.evaluate(expr);

/** Wait for `predicate(arg)` in the page (a function: the page's CSP forbids eval). */
async function until(page, what, predicate, arg = null, timeout = 300_000) {
  await page.waitForFunction(predicate, arg, { timeout, polling: 250 }).catch(async (e) => {
    const seen = await page.evaluate(() => JSON.stringify({ ...window.__tessera, job: undefined })).catch(() => '?');
    throw new Error(`${what}: ${e.message}\npage state: ${seen.slice(0, 2000)}`);
  });
}

const t0 = Date.now();
// Webhooks to the receiver on 127.0.0.1 below are allowed, as an operator would allow
// them for a receiver on its own network.
const server = await serve(['--concurrency', '2'], { TESSERA_WEBHOOKS_ALLOW_PRIVATE: '1' });
log('serve at', server.base);
try {
  const { page, errors, context } = await openPage(server.base);

  // 1. Projects: create one with the form, by keyboard as far as the button.
  await page.goto('/');
  await page.getByLabel('Name').fill('Castle survey');
  await page.getByLabel('Description').fill('console end to end');
  await page.getByLabel('Description').press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Create project', 'the button is next in tab order');
  await page.keyboard.press('Enter');
  await page.waitForURL(/#\/projects\//);
  const pid = page.url().split('/').pop();
  await page.getByRole('heading', { name: 'Castle survey' }).waitFor();

  // 2. A dataset, and the sample photos uploaded in chunks. The camera models say what
  // they are for.
  assert.match(await page.locator('form').filter({ hasText: 'Camera model' }).textContent(), /phones and most cameras/);
  await page.getByLabel('Name').fill('facade');
  await page.getByRole('button', { name: 'Create dataset' }).click();
  await page.waitForURL(/datasets\//);
  const photos = readdirSync(SAMPLE).filter((f) => /\.jpe?g$/i.test(f)).sort();
  const datasetUrl = page.url();
  await until(page, 'the empty dataset listed', () => window.__tessera.dataset?.images === 0);
  assert.equal(await page.locator('.crumbs').textContent(), 'Projects / Castle survey / ', 'the breadcrumb names the project');
  assert.equal(await page.locator('aside.detail').isHidden(), true, 'no empty box beside the photos before one is picked');
  assert.equal(await page.getByRole('button', { name: 'Start reconstruction' }).isDisabled(), true, 'nothing to reconstruct yet');
  await page.getByText(/Add at least two photos first/).waitFor();
  await page.locator('#files').setInputFiles(photos.map((f) => join(SAMPLE, f)));
  await until(page, 'every photo uploaded and listed', (n) => window.__tessera.dataset?.images === n, photos.length);
  await page.locator('svg.gps circle').first().waitFor();
  const onMap = await page.locator('svg.gps circle').count();
  assert.equal(onMap, photos.length, 'every sample photo carries GPS and is on the map');
  // Photos that carry GPS are georeferenced by it unless the person says otherwise.
  await page.getByText(`GPS chosen: ${photos.length} of ${photos.length} photos carry it.`).waitFor();
  assert.equal(await page.getByLabel('Georeference').inputValue(), 'gps');
  await page.locator('.thumb').first().click();
  await page.locator('aside.detail dd').first().waitFor();
  assert.match(await page.locator('aside.detail').textContent(), /Focal length\s*[\d.]+ mm/);
  await page.waitForFunction(() => [...document.querySelectorAll('.thumb img')].every((i) => i.complete && i.naturalWidth > 0));
  assert.equal(await page.getByRole('button', { name: 'Start reconstruction' }).isEnabled(), true);
  assert.equal(await page.getByLabel('ply').isChecked(), true, 'the point cloud is exported by default');
  assert.doesNotMatch(await page.locator('section').first().textContent(), /manifest [0-9a-f]{12}/, 'no internal hash on the page');
  await shot(page, '1-dataset');
  await page.goto(`/#/projects/${pid}`);
  await page.getByRole('heading', { name: 'Datasets' }).waitFor();
  await shot(page, '0-project');
  await page.goBack();
  await page.getByRole('button', { name: 'Start reconstruction' }).waitFor();
  // The page is drawn again: its GPS choice comes once the photos' EXIF is read.
  await page.getByText(`GPS chosen: ${photos.length} of ${photos.length} photos carry it.`).waitFor();

  // 3. A recipe from the form; the timeline live, through a dropped stream and a reload.
  await page.getByRole('button', { name: 'Start reconstruction' }).click();
  await page.waitForURL(/#\/jobs\//);
  const jobId = page.url().split('/').pop();
  await until(page, 'the first events', () => window.__tessera.job?.seqs.length >= 3);
  await state(page, () => window.__tessera.job.stream.drop());
  await until(page, 'a reconnect after the dropped stream', () => window.__tessera.job.reconnects >= 1 && window.__tessera.job.connected);
  const beforeReload = await state(page, () => window.__tessera.job.seqs.length);
  await page.reload();
  await until(page, 'the stored events replayed after the reload', (n) => window.__tessera.job?.seqs.length >= n, beforeReload);
  // One list of stages, all of them from the start: while the run is live each sample
  // shows a stage running or waiting (no gap between two stages), and a stage once ✓
  // never runs again (no ✓ on a stage still running).
  await page.evaluate(() => {
    const rec = { samples: 0, gaps: 0, undone: [], sizes: new Set(), last: {} };
    window.__stages = rec;
    rec.timer = setInterval(() => {
      const j = window.__tessera.job;
      const rows = [...document.querySelectorAll('.timeline li')];
      if (!j || j.ended || !rows.length) return;
      rec.samples += 1;
      rec.sizes.add(rows.length);
      const live = rows.some((r) => r.className === 'running' || r.className === 'waiting');
      if (!live && !rows.every((r) => r.className === 'done')) rec.gaps += 1;
      for (const r of rows) {
        if (rec.last[r.dataset.task] === 'done' && r.className !== 'done') rec.undone.push(`${r.textContent}`);
        rec.last[r.dataset.task] = r.className;
      }
    }, 100);
  });
  await until(page, 'the job to succeed', () => window.__tessera.job.ended && window.__tessera.job.status === 'succeeded', null, 600_000);
  const job = await state(page, () => window.__tessera.job);
  const progress = await (await fetch(`${server.base}/v1/jobs/${jobId}/progress`)).json();
  assert.equal(job.duplicates, 0, 'no event twice');
  assert.equal(job.gaps, 0, 'no event missing');
  assert.deepEqual(job.seqs, Array.from({ length: progress.latest_event_id }, (_, i) => i + 1), 'every event, once, in order');
  const unfinished = await page.locator('.timeline li.running strong').allTextContents();
  assert.deepEqual(unfinished, [], 'every stage in the timeline completed');
  assert.ok(await page.locator('.timeline li.done').count() >= 4);
  const rec = await page.evaluate(() => { clearInterval(window.__stages.timer); return { ...window.__stages, sizes: [...window.__stages.sizes] }; });
  assert.ok(rec.samples > 5, `the stages were watched while the run was live (${rec.samples} samples)`);
  assert.equal(rec.gaps, 0, 'between two stages the next one shows as waiting');
  assert.deepEqual(rec.undone, [], 'a stage with a ✓ never ran again');
  assert.equal(rec.sizes.length, 1, `every stage listed from the start: ${rec.sizes}`);
  // The stage list says what the server says of each stage task; there is no second list.
  const served = await (await fetch(`${server.base}/v1/jobs/${jobId}`)).json();
  const stageTasks = served.tasks.flatMap((t) => t['x-tessera']?.stages || [t]);
  const rows = await page.locator('.timeline li').evaluateAll((lis) => lis.map((li) => [li.dataset.task, li.className]));
  assert.deepEqual(rows, stageTasks.map((t) => [t.task_id, { succeeded: 'done', pending: 'waiting' }[t.status] || t.status]), 'the rows are the server\'s stage tasks');
  assert.ok(stageTasks.some((t) => t.name === 'georeference'), 'the GPS chosen by default placed the model');
  assert.equal(await page.getByRole('list', { name: 'Tasks' }).count(), 0, 'one list, not two that can disagree');
  await page.getByText('succeeded', { exact: true }).first().waitFor();
  assert.match(await page.locator('.conn').textContent(), new RegExp(`finished · ${progress.latest_event_id} events`), 'the event count is the real one');

  // 3b. Take the results away: the point cloud, the COLMAP model and the report, from
  // the job page's buttons, as files the browser saves.
  await until(page, 'the downloads listed', () => window.__tessera.job.report?.files > 0);
  const [ply] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: /Point cloud \(PLY\)/ }).click()]);
  assert.equal(ply.suggestedFilename(), 'export-model.ply');
  const plyBytes = readFileSync(await ply.path());
  assert.equal(plyBytes.subarray(0, 4).toString(), 'ply\n', 'a PLY file');
  const vertices = Number(/element vertex (\d+)/.exec(plyBytes.subarray(0, 400).toString())[1]);
  // The same file in Range parts of 16 KiB (as a survey's PLY goes in parts of 4 MiB,
  // under what one answer of the API function may hold on AWS): the same bytes.
  const ranged = [];
  const onRequest = (req) => { if (req.url().includes('/files/model.ply')) ranged.push(req.headers().range); };
  page.on('request', onRequest);
  await page.evaluate(() => { window.__tessera.downloadPart = 16384; });
  const [plyParts] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: /Point cloud \(PLY\)/ }).click()]);
  await page.evaluate(() => { delete window.__tessera.downloadPart; });
  page.off('request', onRequest);
  assert.ok(readFileSync(await plyParts.path()).equals(plyBytes), 'the parts make the same file');
  assert.equal(ranged.length, Math.ceil(plyBytes.length / 16384), `a request per part: ${ranged}`);
  assert.equal(ranged[0], 'bytes=0-16383');
  // Every file has a name of its own, even when the mapper left sub-models beside the model.
  const fileNames = await page.locator('ul.files button.download').allTextContents();
  assert.equal(new Set(fileNames).size, fileNames.length, `download names tell files apart: ${fileNames}`);
  const [colmapCams] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: /^COLMAP model, binary: cameras\.bin/ }).click()]);
  assert.equal(colmapCams.suggestedFilename(), 'export-sparse-0-cameras.bin');
  const [modelZip] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: /COLMAP model, every file \(zip\)/ }).click()]);
  assert.equal(modelZip.suggestedFilename(), 'export-colmap-model.zip');
  assert.equal(readFileSync(await modelZip.path()).subarray(0, 4).toString('latin1'), 'PK\x03\x04', 'a zip');
  const [rep] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: /Report \(JSON\)/ }).click()]);
  const report = JSON.parse(readFileSync(await rep.path(), 'utf8'));
  assert.equal(report.photos.total, photos.length, 'the report counts the run\'s photos');
  assert.equal(report.model.points, vertices, 'the PLY holds the final model\'s points');
  assert.ok(report.stages.every((st) => st.status === 'succeeded'), JSON.stringify(report.stages.map((st) => st.status)));
  await page.locator('.downloads').screenshot({ path: join(SHOTS, '2b-downloads.png') });
  // Figures a person reads, not raw counter names; what each process cost is folded away.
  const figures = await page.locator('dl.metrics').first().textContent();
  assert.match(figures, /3D points/);
  assert.doesNotMatch(figures, /peak rss/i, 'memory counters are not among the figures');
  // A run is named from what it was made of until someone names it.
  assert.match(await page.locator('h1').textContent(), new RegExp(`facade · ${photos.length} photos · incremental · georeferenced by GPS`));
  // Rename the run; the project's list then tells it apart by name and options.
  await page.locator('summary', { hasText: 'Rename' }).click();
  await page.getByLabel('Name of this run').fill('Facade, first try');
  await page.getByRole('button', { name: 'Rename' }).click();
  await page.getByRole('heading', { name: /Facade, first try/ }).waitFor();

  // 4. The viewer: the final snapshot's full cloud, read back from the page's state.
  const snaps = await (await fetch(`${server.base}/v1/reconstructions/${jobId}/snapshots`)).json();
  const last = snaps.seqs[snaps.seqs.length - 1];
  assert.ok(snaps.seqs.length >= 2, 'snapshots were sealed while mapping ran, then the final model');
  await until(page, 'the newest snapshot fully loaded', (seq) => window.__tessera.viewer?.seq === seq && window.__tessera.viewer.complete === true, last);
  const viewer = await state(page, () => { const { cameraPositions, load, ...v } = window.__tessera.viewer; return v; });
  assert.equal(viewer.webgl, true, 'a WebGL context was created');
  assert.ok(viewer.requested.some((s) => s < last), `the view followed snapshots sealed while mapping ran: ${viewer.requested}`);
  const summary = await (await fetch(`${server.base}/v1/reconstructions/${jobId}/snapshots/${last}/summary.json`)).json();
  assert.equal(viewer.points, summary.models[0].num_points3D, 'every point of the snapshot is drawn');
  assert.equal(viewer.cameras, summary.models[0].num_reg_images, 'a frustum per registered photo');
  const lit = await page.evaluate(() => {
    const c = document.querySelector('canvas.viewer');
    const probe = document.createElement('canvas');
    probe.width = c.width; probe.height = c.height;
    const g = probe.getContext('2d');
    g.drawImage(c, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - 18) + Math.abs(d[i + 1] - 20) + Math.abs(d[i + 2] - 26) > 40) n += 1;
    return n;
  });
  assert.ok(lit > 500, `the canvas shows the cloud (${lit} lit pixels)`);
  // A cloud larger than the preview (at most 10 000 points) loads in Range parts of
  // 64 Ki points. The sample makes ~4 000, so the test serves snapshot 999 of this job
  // itself: the real snapshot's cameras and a 150 000-point points.bin.
  const N = 150_000;
  const cloud = (n) => {
    const b = Buffer.alloc(44 + n * 26);
    b.write('SFMP3D\0\0', 0, 'latin1');
    b.writeUInt32LE(1, 8);
    b.writeBigUInt64LE(BigInt(n), 12);
    for (let i = 0; i < n; i += 1) {
      const o = 44 + i * 26;
      b.writeFloatLE(Math.cos(i) * 2, o);
      b.writeFloatLE(Math.sin(i) * 2, o + 4);
      b.writeFloatLE((i % 100) / 50, o + 8);
      b.writeUInt8(200, o + 12);
      b.writeBigUInt64LE(BigInt(i + 1), o + 18);
    }
    return b;
  };
  const full = cloud(N);
  const preview = cloud(10_000);
  const ranges = [];
  const real = `${server.base}/v1/reconstructions/${jobId}/snapshots/${last}`;
  await page.route(`**/v1/reconstructions/${jobId}/snapshots/999/*`, async (route) => {
    const name = route.request().url().split('/').pop();
    if (name === 'points_preview.bin') return route.fulfill({ body: preview, contentType: 'application/x-sfm-points-v1' });
    if (name !== 'points.bin') return route.fulfill({ body: Buffer.from(await (await fetch(`${real}/${name}`)).arrayBuffer()), contentType: 'application/json' });
    const [, a, b] = /bytes=(\d+)-(\d+)/.exec(route.request().headers().range);
    ranges.push([Number(a), Number(b)]);
    return route.fulfill({
      status: 206,
      body: full.subarray(Number(a), Number(b) + 1),
      headers: { 'content-range': `bytes ${a}-${b}/${full.length}`, 'content-type': 'application/x-sfm-points-v1' },
    });
  });
  await page.evaluate((rid) => window.__tessera.viewer.load(rid, 999), jobId);
  await until(page, 'the large cloud loaded in parts', () => window.__tessera.viewer.seq === 999 && window.__tessera.viewer.complete === true);
  const big = await state(page, () => ({ points: window.__tessera.viewer.points, total: window.__tessera.viewer.total }));
  assert.deepEqual(big, { points: N, total: N }, 'every point of a cloud larger than its preview');
  assert.equal(ranges.length, 1 + Math.ceil(N / 65536), `the header, then parts: ${JSON.stringify(ranges)}`);
  await page.unroute(`**/v1/reconstructions/${jobId}/snapshots/999/*`);
  await page.evaluate(([rid, seq]) => window.__tessera.viewer.load(rid, seq), [jobId, last]);
  await until(page, 'the real snapshot back', (seq) => window.__tessera.viewer.seq === seq && window.__tessera.viewer.complete === true, last);

  const cams = await state(page, () => window.__tessera.viewer.cameraPositions());
  assert.equal(cams.length, viewer.cameras, 'the first view holds every camera');
  await page.locator('canvas.viewer').scrollIntoViewIfNeeded();
  // Turning and zooming keep the scene in view, and "Reset view" goes back to the first.
  const home = await state(page, () => window.__tessera.viewer.view());
  const cb = await page.locator('canvas.viewer').boundingBox();
  await page.mouse.move(cb.x + cb.width / 2, cb.y + cb.height / 2);
  await page.mouse.down();
  await page.mouse.move(cb.x + cb.width / 2 + 80, cb.y + cb.height / 2 + 30, { steps: 6 });
  await page.mouse.up();
  const turned = await state(page, () => window.__tessera.viewer.view());
  assert.ok(Math.abs(turned.yaw - home.yaw) > 0.05 && Math.abs(turned.yaw - home.yaw) < 0.6, `a short drag turns a little: ${home.yaw} → ${turned.yaw}`);
  assert.equal((await state(page, () => window.__tessera.viewer.cameraPositions())).length, viewer.cameras, 'after a turn every camera is still in view');
  for (let i = 0; i < 3; i += 1) await page.mouse.wheel(0, -300);
  for (let i = 0; i < 3; i += 1) await page.mouse.wheel(0, 300);
  assert.equal((await state(page, () => window.__tessera.viewer.cameraPositions())).length, viewer.cameras, 'zoomed in and out again, the scene is where it was');
  await page.getByRole('button', { name: 'Reset view' }).click();
  assert.deepEqual(await state(page, () => window.__tessera.viewer.view()), home, 'reset is the first view');
  await page.getByText(/Drag to turn .* pinch to zoom/).waitFor();
  const [cam] = await state(page, () => window.__tessera.viewer.cameraPositions());
  await page.mouse.click(cam.x, cam.y);
  await until(page, 'the clicked camera selected', () => Boolean(window.__tessera.viewer.selected));
  const picked = await state(page, () => window.__tessera.viewer.selected);
  await page.locator(`aside.detail img[alt="${picked}"]`).waitFor();
  await shot(page, '2-reconstruction');

  // 4b. Cancel, resume and force cancel from the buttons, on other recipes of the same
  // photos (a PLY export, then two-stage BA: new jobs whose earlier stages are cached).
  const startWith = async (choose) => {
    await page.goto(datasetUrl);
    await page.getByRole('button', { name: 'Start reconstruction' }).waitFor();
    await choose();
    await page.getByRole('button', { name: 'Start reconstruction' }).click();
    await page.waitForURL(/#\/jobs\//);
    await page.getByRole('button', { name: 'Cancel', exact: true }).waitFor();
    return page.url().split('/').pop();
  };
  const cancelled = ['cancelled', 'cancelled_dirty'];
  const second = await startWith(() => page.getByLabel('ply').uncheck());
  assert.notEqual(second, jobId, 'a new job');
  await page.getByRole('button', { name: 'Cancel', exact: true }).click();
  await until(page, 'the cancel to land', (c) => c.includes(window.__tessera.job.status), cancelled, 120_000);
  await page.getByRole('button', { name: 'Resume' }).click();
  await until(page, 'the resumed job to succeed', () => window.__tessera.job.status === 'succeeded' && window.__tessera.job.ended, null, 300_000);
  const resumed = await state(page, () => window.__tessera.job);
  assert.equal(resumed.duplicates + resumed.gaps, 0, 'the resumed job\'s events, once each');
  const third = await startWith(() => page.getByLabel('Bundle adjustment').selectOption('two_stage'));
  await page.getByRole('button', { name: 'Force cancel' }).click();
  await until(page, 'the force cancel to land', (c) => c.includes(window.__tessera.job.status), cancelled, 120_000);
  const forced = await (await fetch(`${server.base}/v1/jobs/${third}`)).json();
  assert.equal(forced.cancel_force, true, JSON.stringify(forced));
  // The force-cancelled run was a mistake: delete it from its page once it has ended.
  await until(page, 'the delete button on once the run ended', () => document.querySelector('button.danger:not([disabled])')?.textContent === 'Delete this run');
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Delete this run' }).click();
  await page.waitForURL(new RegExp(`#/projects/${pid}$`));
  await page.getByRole('heading', { name: 'Reconstructions' }).waitFor();
  assert.equal(await page.locator(`tr[data-job="${third}"]`).count(), 0, 'the deleted run is not listed');
  assert.equal((await fetch(`${server.base}/v1/jobs/${third}`)).status, 404);
  // The project's list of runs: each with its options, photos and time.
  await page.goto(`/#/projects/${pid}`);
  const run = page.locator(`tr[data-job="${jobId}"]`);
  await run.getByRole('link', { name: 'Facade, first try' }).waitFor();
  assert.match(await run.locator('td.options').textContent(), /facade · incremental · .*exports PLY/);
  await until(page, 'the photo counts from the reports', (id) => /\d+ of \d+/.test(document.querySelector(`tr[data-job="${id}"] td:nth-child(3)`)?.textContent || ''), jobId);
  assert.notEqual(await page.locator(`tr[data-job="${second}"] td.options`).textContent(), await run.locator('td.options').textContent(), 'two runs of one dataset read differently');
  // Run the first one again from its page: the same photos and options are that run.
  await page.goto(`/#/jobs/${jobId}`);
  await page.getByRole('button', { name: 'Run again with these options' }).click();
  await page.getByText(/Nothing changed since this run/).waitFor();
  // The project's list follows a run while it goes: started here, watched there to its
  // end without a reload.
  // (Sequential pairs: matching and mapping run again, so the run is seen going.)
  const fourth = await startWith(async () => { await page.getByLabel('Pairs').selectOption('sequential'); await page.getByLabel('nvm').check(); });
  await page.goto(`/#/projects/${pid}`);
  await until(page, 'the project page', (hash) => window.__tessera.page === hash, `#/projects/${pid}`);
  const viewsThen = await state(page, () => window.__tessera.views);
  const seenFirst = await page.evaluate((id) => window.__tessera.runs.find((r) => r.id === id)?.status, fourth);
  assert.ok(['pending', 'running'].includes(seenFirst), `the run was going when the list was drawn: ${seenFirst}`);
  await until(page, 'the new run followed to its end on the project page', (id) => (window.__tessera.runs || []).some((r) => r.id === id && r.status === 'succeeded'), fourth);
  assert.equal(await state(page, () => window.__tessera.views), viewsThen, 'the list kept itself current');
  await until(page, 'its photo count once it ended', (id) => /\d+ of \d+/.test(document.querySelector(`tr[data-job="${id}"] td:nth-child(3)`)?.textContent || ''), fourth);

  // 5. Drag and drop, and an upload that survives a dropped connection: the second chunk's
  // connection is reset once; the uploader asks the server how much it has and goes on.
  await page.goto(`/#/projects/${pid}`);
  await page.getByLabel('Name').fill('dropped');
  await page.getByRole('button', { name: 'Create dataset' }).click();
  await page.waitForURL(/datasets\//);
  await page.locator('.drop').waitFor();
  let reset = 0;
  await page.route('**/v1/uploads/*', (route) => {
    const range = route.request().headers()['content-range'] || '';
    if (route.request().method() === 'PATCH' && reset === 0 && /^bytes 2097152-/.test(range)) {
      reset += 1;
      return route.abort('connectionreset');
    }
    return route.continue();
  });
  const before = errors.length;
  await page.evaluate(async () => {
    // A photo larger than one 2 MiB chunk: 1400×1000 of noise, as PNG.
    const c = document.createElement('canvas');
    c.width = 1400;
    c.height = 1000;
    const g = c.getContext('2d');
    const img = g.createImageData(c.width, c.height);
    for (let i = 0; i < img.data.length; i += 1) img.data[i] = i % 4 === 3 ? 255 : Math.random() * 255;
    g.putImageData(img, 0, 0);
    const blob = await new Promise((r) => c.toBlob(r, 'image/png'));
    const dt = new DataTransfer();
    dt.items.add(new File([blob], 'noise.png', { type: 'image/png' }));
    dt.items.add(new File(['flight notes'], 'notes.txt', { type: 'text/plain' }));
    document.querySelector('.drop').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  });
  await until(page, 'the dropped photo uploaded and listed', () => window.__tessera.dataset?.images === 1);
  await page.unroute('**/v1/uploads/*');
  assert.equal(reset, 1, 'a chunk was cut off');
  const dropped = errors.splice(before);
  assert.ok(dropped.every((e) => /ERR_CONNECTION_RESET/.test(e)), `only the reset connection is logged: ${dropped}`);
  const uploads = await page.locator('.uploads li').allTextContents();
  assert.deepEqual(uploads.map((u) => u.trim()), ['Not added: notes.txt. Only photos are taken (JPEG, PNG, TIFF, WebP, HEIC).', 'noise.pngadded'], 'a file that is not a photo is named, not ignored');
  // Remove the photo added by mistake, then the dataset itself, from their pages.
  await page.locator('.thumb').first().click();
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Remove noise.png' }).click();
  await until(page, 'the photo removed', () => window.__tessera.dataset?.images === 0);
  // A file named like a photo whose bytes are not one: kept (as the API keeps it), and
  // said to be unusable where it was added, in the count and on its own page.
  await page.evaluate(() => {
    const dt = new DataTransfer();
    dt.items.add(new File(['not a photo at all'], 'damaged.jpg', { type: 'image/jpeg' }));
    document.querySelector('.drop').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  });
  await until(page, 'the damaged file listed as unreadable', () => window.__tessera.dataset?.unreadable === 1);
  assert.match((await page.locator('.uploads li').last().textContent()).trim(), /^damaged\.jpgadded, but not readable as a photo: `damaged\.jpg` is not an image/);
  assert.match(await page.locator('h1').textContent(), /0 photos, and 1 file not readable as a photo/);
  await page.locator('.thumb.unreadable').click();
  assert.match(await page.getByRole('alert').textContent(), /Not a photo a run can use: `damaged\.jpg` is not an image/);
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Remove damaged.jpg' }).click();
  await until(page, 'the damaged file removed', () => window.__tessera.dataset?.images === 0);
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Delete dataset' }).click();
  await page.waitForURL(new RegExp(`#/projects/${pid}$`));
  await page.getByRole('heading', { name: 'Datasets' }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'dropped' }).count(), 0, 'the dataset is gone');

  // 6. Webhooks: make one for this project's photo notices from the console. Its
  // receiver answers the first request 500 and the others 200.
  const received = [];
  const receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      received.push({ headers: req.headers, body });
      res.statusCode = received.length === 1 ? 500 : 200;
      res.end();
    });
  });
  await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
  const hookUrl = `http://127.0.0.1:${receiver.address().port}/hook`;
  await page.getByRole('link', { name: 'Webhooks' }).click();
  await page.getByRole('heading', { name: 'Webhooks' }).waitFor();
  await page.getByLabel('Receiver URL').fill(hookUrl);
  await page.getByLabel('Notices from').selectOption({ label: 'Castle survey' });
  for (const t of ['job.succeeded', 'job.failed', 'job.cancelled']) await page.locator(`#ev-${t.replace('.', '\\.')}`).uncheck();
  await page.getByRole('button', { name: 'Make webhook' }).click();
  const secret = (await page.locator('code.secret').textContent()).trim();
  assert.match(secret, /^whsec_/);
  await page.getByRole('link', { name: 'See its deliveries' }).click();
  await until(page, 'the deliveries page', () => window.__tessera.webhook?.loaded === true);
  const hookPage = page.url();

  // 7. Privacy review: enrol a subject, add photos (one broken), open one.
  await page.goto(`/#/projects/${pid}/privacy`);
  await page.getByText(/No match threshold is set, so every face in every photo is blurred/).waitFor();
  await page.getByRole('button', { name: /Use the recommended/ }).click();
  assert.equal(await page.getByLabel(/Match threshold/).inputValue(), '0.363');
  await page.getByRole('button', { name: 'Save threshold' }).click();
  await page.getByText(/Threshold saved/).waitFor();
  await page.getByLabel('Name or label').fill('astronaut');
  await page.getByLabel(/Reference photos/).setInputFiles(join(FACES, 'astronaut.png'));
  await page.getByRole('button', { name: 'Enrol opted-out subject' }).click();
  await page.getByText(/enrolled/).waitFor();
  const group = readFileSync(join(FACES, 'composite_pd_1280x896.jpg'));
  // The privacy page takes photos in a drop zone, as a dataset does: added when chosen.
  // (The page is drawn again after the enrolment: wait for it.)
  await until(page, 'photos and reference photos each in a drop zone', () => document.querySelectorAll('.drop').length === 2 && document.querySelector('#photo-files'));
  await page.getByLabel('Photos to publish').setInputFiles([
    { name: 'group.jpg', mimeType: 'image/jpeg', buffer: group },
    { name: 'truncated.jpg', mimeType: 'image/jpeg', buffer: Buffer.concat([group.subarray(0, 2000), Buffer.alloc(4000)]) },
  ]);
  await page.getByText(/Photos added/).waitFor();
  // The page keeps itself current: no reload, no navigation.
  const views = await state(page, () => window.__tessera.views);
  await until(page, 'both photos settled, shown without a reload', () => {
    const p = window.__tessera.privacy?.photos || [];
    return p.length === 2 && p.some((x) => x.status === 'published') && p.some((x) => x.status === 'failed');
  }, null, 240_000);
  assert.equal(await state(page, () => window.__tessera.views), views, 'the page was not rendered again');
  assert.match(await page.locator('#not-current').textContent(), /1 of 2 photos published; 1 failed\./);
  const listed = await state(page, () => window.__tessera.privacy.photos);
  assert.deepEqual(listed.map((p) => p.status).sort(), ['failed', 'published'], JSON.stringify(listed));
  await page.locator('.reason').first().waitFor();
  assert.match(await page.locator('.reason').first().textContent(), /truncated\.jpg/);
  await shot(page, '3-privacy');
  await page.getByRole('link', { name: 'group.jpg' }).click();
  await until(page, 'the variants shown', () => window.__tessera.photo?.loaded === true);
  const shown = await state(page, () => window.__tessera.photo);
  assert.equal(shown.status, 'published');
  assert.ok(shown.variants.some((v) => v.variant === 'public' && v.width === 1280), JSON.stringify(shown));
  assert.equal(shown.subjectCopies, 1, 'the opted-out subject\'s own copy is offered');
  assert.equal(shown.variants.length, 1, 'and fetched (audited) only when asked for');
  await page.getByRole('button', { name: /Show astronaut's own copy/ }).click();
  await until(page, 'the subject\'s copy beside the public one', () => window.__tessera.photo.variants.length === 2);
  // Each copy downloads under the photo's name and whom it is for, its size on the button.
  for (const [button, name] of [[/Download the public copy/, 'group-public.jpg'], [/Download astronaut's copy/, 'group-astronaut.jpg']]) {
    const b = page.getByRole('button', { name: button });
    const [file] = await Promise.all([page.waitForEvent('download'), b.click()]);
    assert.equal(file.suggestedFilename(), name);
    const bytes = readFileSync(await file.path());
    assert.deepEqual([...bytes.subarray(0, 2)], [0xff, 0xd8], 'a JPEG');
    assert.match(await b.textContent(), / \d+(\.\d)? (KiB|MiB)$/, 'its size on the button');
  }
  assert.equal(await page.locator('svg.boxes rect.face').count(), shown.faces, 'a box per face over the original (admin in none mode)');
  assert.equal(await page.locator('.face-number').count(), shown.faces, 'each box numbered as in the table');
  await page.getByRole('list', { name: 'Box colours' }).waitFor();
  assert.match(await page.locator('figcaption').first().textContent(), /Public copy: \d+ of \d+ face\(s\) blurred/);
  assert.equal(await page.locator('svg.boxes rect.face.blurred').count() > 0, true);
  // Draw a blur region with the mouse and save it (the image scrolled into view first:
  // the mouse draws where the screen shows it).
  await page.locator('.boxed').scrollIntoViewIfNeeded();
  const box = await page.locator('.boxed').boundingBox();
  await page.mouse.move(box.x + 10, box.y + 10);
  await page.mouse.down();
  await page.mouse.move(box.x + 120, box.y + 90, { steps: 5 });
  await page.mouse.up();
  assert.equal(await page.getByText(/manual region\(s\)/).textContent(), '1 manual region(s), unsaved', 'the mouse drew a region');
  await page.getByRole('button', { name: 'Save regions and re-blur' }).click();
  await page.getByText(/Regions saved/).waitFor();
  await shot(page, '4-photo');

  // The same on a touch screen: a finger draws a region (the page does not scroll
  // instead), a gesture the browser cancels leaves nothing, and after saving the page
  // shows the re-blurred version by itself.
  const photoUrl = page.url();
  await until(page, 'the mouse-drawn region re-blurred and shown', () => window.__tessera.photo?.status === 'published' && window.__tessera.photo.regions === 1, null, 120_000);
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, hasTouch: true, isMobile: true, baseURL: server.base });
  const tp = await phone.newPage();
  const touchErrors = [];
  tp.on('console', (m) => { if (m.type() === 'error') touchErrors.push(m.text()); });
  tp.on('pageerror', (e) => touchErrors.push(e.message));
  await tp.goto(photoUrl);
  await until(tp, 'the photo page on the phone', () => window.__tessera.photo?.loaded === true);
  const version = await state(tp, () => window.__tessera.photo.version);
  const cdp = await phone.newCDPSession(tp);
  await tp.locator('.boxed').scrollIntoViewIfNeeded();
  const tb = await tp.locator('.boxed').boundingBox();
  const touch = async (type, x, y) => cdp.send('Input.dispatchTouchEvent', { type, touchPoints: type === 'touchEnd' || type === 'touchCancel' ? [] : [{ x: tb.x + x, y: tb.y + y }] });
  const scrolled = await tp.evaluate(() => window.scrollY);
  await touch('touchStart', 30, 20);
  for (let i = 1; i <= 8; i += 1) await touch('touchMove', 30 + i * 15, 20 + i * 10);
  await touch('touchEnd');
  assert.match(await tp.getByText(/manual region\(s\)/).textContent(), /2 manual region\(s\), unsaved/, 'the finger drew a region');
  assert.equal(await tp.evaluate(() => window.scrollY), scrolled, 'the page did not scroll under the finger');
  await touch('touchStart', 200, 40);
  await touch('touchMove', 230, 80);
  await touch('touchCancel');
  assert.equal(await tp.locator('svg.boxes rect.region.drawing').count(), 0, 'a cancelled gesture leaves no stray box');
  assert.match(await tp.getByText(/manual region\(s\)/).textContent(), /2 manual region\(s\), unsaved/);
  await tp.getByRole('button', { name: 'Save regions and re-blur' }).click();
  await until(tp, 'the re-blurred version shown without a reload', (v) => window.__tessera.photo?.version > v && window.__tessera.photo.regions === 2 && window.__tessera.photo.loaded === true, version, 120_000);
  // Every page at 360 px wide, as a phone shows it: nothing scrolls sideways, and the
  // 3D view comes before the stages. A pinch zooms the view.
  await tp.setViewportSize({ width: 360, height: 740 });
  const tour = [
    ['projects', '/#/'], ['project', `/#/projects/${pid}`], ['dataset', datasetUrl], ['reconstruction', `/#/jobs/${jobId}`],
    ['privacy', `/#/projects/${pid}/privacy`], ['photo', photoUrl], ['webhooks', '/#/webhooks'], ['webhook', hookPage],
  ];
  for (const [name, url] of tour) {
    await tp.goto(url);
    await until(tp, `the ${name} page on the phone`, (hash) => window.__tessera?.page === hash, url.slice(url.indexOf('#')));
    if (name === 'reconstruction') await until(tp, 'the phone\'s 3D view loaded', () => window.__tessera.viewer?.complete === true);
    if (name === 'dataset') await tp.locator('svg.gps circle').first().waitFor();
    const wide = await tp.evaluate(() => [...document.querySelectorAll('body *')]
      .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)
      .map((e) => `${e.tagName.toLowerCase()}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`).slice(0, 8));
    assert.deepEqual(wide, [], `nothing on the ${name} page is wider than 360 px`);
    assert.ok(await tp.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), `the ${name} page does not scroll sideways`);
    // A notice left from an action on an earlier page would cover the screenshot.
    await tp.evaluate(() => { document.getElementById('toast').textContent = ''; });
    await shot(tp, `phone-${name}`);
    if (name === 'privacy') {
      await until(tp, 'each stacked cell named by its column', () => document.querySelectorAll('td[data-label="State"]').length > 0);
      assert.equal(await tp.locator('table.list thead').first().isHidden(), true, 'a phone stacks the rows as cards');
    }
  }
  await tp.goto(`/#/jobs/${jobId}`);
  await until(tp, 'the phone\'s 3D view loaded again', (hash) => window.__tessera.page === hash && window.__tessera.viewer?.complete === true, `#/jobs/${jobId}`);
  const [canvasTop, stagesTop] = await tp.evaluate(() => [document.querySelector('canvas.viewer').getBoundingClientRect().top, document.querySelector('.timeline').getBoundingClientRect().top]);
  assert.ok(canvasTop < stagesTop, 'on a phone the 3D view comes first');
  await tp.locator('canvas.viewer').scrollIntoViewIfNeeded();
  const vb = await tp.locator('canvas.viewer').boundingBox();
  const unpinched = await state(tp, () => window.__tessera.viewer.view());
  const fingers = (spread) => [{ x: vb.x + vb.width / 2 - spread, y: vb.y + vb.height / 2, id: 1 }, { x: vb.x + vb.width / 2 + spread, y: vb.y + vb.height / 2, id: 2 }];
  await cdp.send('Input.dispatchTouchEvent', { type: 'touchStart', touchPoints: fingers(30) });
  for (let sp = 40; sp <= 120; sp += 20) await cdp.send('Input.dispatchTouchEvent', { type: 'touchMove', touchPoints: fingers(sp) });
  await cdp.send('Input.dispatchTouchEvent', { type: 'touchEnd', touchPoints: [] });
  const pinched = await state(tp, () => window.__tessera.viewer.view());
  assert.ok(pinched.dist < unpinched.dist * 0.5, `spreading two fingers zooms in: ${unpinched.dist} → ${pinched.dist}`);
  assert.deepEqual(touchErrors, [], 'no console errors on the phone');
  await phone.close();

  // The webhook's page lists each delivery and keeps itself current (no reload here):
  // the photo notices arrive, the one answered 500 is tried again under its id.
  await page.goto(hookPage);
  await until(page, 'the photo notices delivered', () => {
    const d = window.__tessera.webhook?.deliveries || [];
    const done = (t) => d.some((x) => x.type === t && x.state === 'succeeded');
    return done('photo.published') && done('photo.failed') && d.every((x) => x.state === 'succeeded');
  });
  const delivered = await state(page, () => window.__tessera.webhook.deliveries);
  assert.ok(delivered.some((d) => d.attempts >= 2), `the delivery answered 500 was tried again: ${JSON.stringify(delivered)}`);
  assert.ok(await page.locator('tbody .badge.succeeded').count() >= 2);
  await shot(page, '4-webhook');
  receiver.close();
  const firstId = received[0].headers['tessera-webhook-id'];
  assert.ok(received.slice(1).some((r) => r.headers['tessera-webhook-id'] === firstId), 'the refused notice came again under its id');
  for (const r of received) {
    const h = r.headers;
    const mac = createHmac('sha256', secret).update(`${h['tessera-webhook-id']}.${h['tessera-webhook-timestamp']}.${r.body}`).digest('hex');
    assert.equal(h['tessera-webhook-signature'], `v1=${mac}`, 'the signature verifies with the secret the console showed');
    assert.ok(!JSON.parse(r.body).type.startsWith('job.'), `only the types asked for: ${r.body}`);
  }
  // Delete the broken upload from its page; the list then holds only the good photo.
  await page.goto(`/#/projects/${pid}/privacy`);
  await page.getByRole('link', { name: 'truncated.jpg' }).click();
  await page.getByRole('button', { name: 'Delete photo' }).waitFor();
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Delete photo' }).click();
  await page.waitForURL(/\/privacy$/);
  await until(page, 'the broken upload gone', () => (window.__tessera.privacy?.photos || []).length === 1);
  // The people in its photo: Grace Hopper appears three times in the group photo. Opt her
  // out from here, with no reference photo; her faces are blurred once it is re-decided.
  await until(page, 'the people in the photos listed', () => (window.__tessera.privacy?.people || []).some((p) => p.faces === 3 && p.standing !== 'opted_out'));
  assert.ok((await state(page, () => window.__tessera.privacy.people)).some((p) => p.standing === 'opted_out'), 'the astronaut\'s person is listed as opted out');
  const hopperAt = await state(page, () => window.__tessera.privacy.people.findIndex((p) => p.faces === 3)) + 1;
  await page.getByText(/this person appears in 1 photo \(3 faces\)/).waitFor();
  await page.getByLabel(`Label for person ${hopperAt}`).fill('the woman in uniform');
  await page.getByRole('button', { name: `Opt person ${hopperAt} out` }).click();
  await page.getByText(/the woman in uniform opted out: every photo is re-decided/).waitFor();
  await until(page, 'her faces blurred and the photo published again', () => {
    const t = window.__tessera.privacy;
    return t?.people?.some((p) => p.faces === 3 && p.standing === 'opted_out') && t.notCurrent === 0 && t.photos.every((p) => p.status === 'published');
  }, null, 120_000);
  await page.getByText(/opted out as the woman in uniform/).waitFor();
  await page.goto(hookPage);
  await until(page, 'the deliveries page again', () => window.__tessera.webhook?.loaded === true);
  // Deleting it from its page.
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Delete webhook' }).click();
  await page.waitForURL(/#\/webhooks$/);
  await until(page, 'the webhook gone from the list', () => window.__tessera.webhooks?.count === 0);
  // Last, the project itself from its page: its runs go with it.
  await page.goto(`/#/projects/${pid}`);
  await page.getByRole('heading', { name: 'Reconstructions' }).waitFor();
  page.once('dialog', (d) => { assert.match(d.message(), /with its runs/); d.accept(); });
  await page.getByRole('button', { name: 'Delete project' }).click();
  await page.waitForURL(/#\/$/);
  await page.getByText('No projects yet.').waitFor();
  for (const run of [jobId, second]) assert.equal((await fetch(`${server.base}/v1/jobs/${run}`)).status, 404, `run ${run} went with its project`);
  assert.deepEqual(errors, [], 'no console errors');
  await context.close();

  // 8. With API keys: the page asks for one and keeps it in session storage only.
  const keyed = await serve(['--auth', 'api_key', '--no-workers']);
  try {
    const k = await openPage(keyed.base);
    await k.page.goto('/');
    await k.page.getByRole('heading', { name: 'API key' }).waitFor();
    await shot(k.page, '5-api-key');
    await k.page.getByLabel('Key').fill(keyed.key);
    await k.page.getByRole('button', { name: 'Use this key' }).click();
    await k.page.getByRole('heading', { name: 'Projects' }).waitFor();
    const stored = await k.page.evaluate(() => ({ session: sessionStorage.getItem('tessera.apiKey'), local: localStorage.length, cookies: document.cookie }));
    assert.equal(stored.session, keyed.key);
    assert.equal(stored.local, 0);
    assert.equal(stored.cookies, '');
    // 9. A re-blurring sweep cancelled before it ran (this server runs no workers, so
    // nothing runs it first): the privacy page says so and resumes it.
    const H = { authorization: `Bearer ${keyed.key}` };
    const call = async (method, path, body, headers = {}) => {
      const r = await fetch(`${keyed.base}${path}`, { method, headers: { ...H, ...headers }, body });
      return { status: r.status, json: await r.json().catch(() => null) };
    };
    const json = (v) => [JSON.stringify(v), { 'content-type': 'application/json' }];
    const proj = await call('POST', '/v1/projects', ...json({ name: 'stalled', match_threshold: 0.363 }));
    assert.equal(proj.status, 201, JSON.stringify(proj.json));
    const pid = proj.json.project_id;
    const ref = readFileSync(join(FACES, 'astronaut.png'));
    const up = await call('POST', '/v1/uploads', ...json({ expected_size: ref.length }));
    await call('PATCH', `/v1/uploads/${up.json.upload_id}`, ref, { 'content-range': `bytes 0-${ref.length - 1}/${ref.length}` });
    const sha = (await call('POST', `/v1/uploads/${up.json.upload_id}:finalize`)).json.blob_sha;
    const enrolled = await call('POST', `/v1/x-tessera/projects/${pid}/subjects`, ...json({ label: 'astronaut', blob_shas: [sha] }));
    assert.equal(enrolled.status, 201, JSON.stringify(enrolled.json));
    const sweep = enrolled.json.reblur_job_id;
    assert.equal((await call('POST', `/v1/jobs/${sweep}:cancel`)).status, 200);
    await k.page.goto(`/#/projects/${pid}/privacy`);
    await k.page.locator('#sweep-stalled').getByText(/Re-blurring stopped/).waitFor();
    await shot(k.page, '6-sweep-stalled');
    await k.page.getByRole('button', { name: 'Resume re-blurring' }).click();
    await k.page.getByText(/Re-blurring resumed/).waitFor();
    const job = (await call('GET', `/v1/jobs/${sweep}`)).json;
    assert.equal(job.cancel_requested, false, `the sweep was resumed: ${JSON.stringify(job)}`);
    assert.notEqual(job.status, 'cancelled', JSON.stringify(job));
    // 401s are expected here (the probe before the key): only they may be logged.
    const unexpected = k.errors.filter((e) => !/401/.test(e));
    assert.deepEqual(unexpected, [], 'no console errors but the expected 401');
    await k.context.close();
  } finally { keyed.stop(); }
  log(`passed in ${((Date.now() - t0) / 1000).toFixed(1)} s; screenshots in ${SHOTS}`);
} finally {
  await browser.close();
  server.stop();
}
