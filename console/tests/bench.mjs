// Console bench: bundle size (raw and gzip) and time to first render, against a baseline
// measured in the same run on the same server and browser (loading `/healthz`, the
// smallest thing the server answers), so the figures are ratios, not wall-clock claims.
//
// Usage: node bench.mjs [runs]   (env: TESSERA_BIN, REPO, CHROMIUM)

import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const REPO = resolve(process.env.REPO || new URL('../..', import.meta.url).pathname);
const BIN = process.env.TESSERA_BIN || join(process.env.CARGO_TARGET_DIR || join(REPO, 'target'), 'debug', 'tessera');
const RUNS = Number(process.argv[2] || 7);

function files(dir) {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}
const assets = [join(REPO, 'console/index.html'), join(REPO, 'console/app.css'), ...files(join(REPO, 'console/src'))];
const raw = assets.reduce((s, f) => s + statSync(f).size, 0);
const gz = assets.reduce((s, f) => s + gzipSync(readFileSync(f), { level: 9 }).length, 0);

const state = mkdtempSync(join(tmpdir(), 'tessera-bench-'));
const child = spawn(BIN, ['--state', state, 'serve', '--addr', '127.0.0.1:0', '--no-workers'], { stdio: ['ignore', 'ignore', 'pipe'] });
const base = await new Promise((res, rej) => {
  let buf = '';
  child.stderr.on('data', (d) => {
    buf += d;
    const m = buf.match(/serving the Tessera API on (http:\/\/\S+)\n/);
    if (m) res(m[1]);
  });
  child.on('exit', (c) => rej(new Error(`serve exited ${c}`)));
});
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--headless=new', '--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});

const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

async function measure(path, ready) {
  const out = [];
  for (let i = 0; i < RUNS; i += 1) {
    const context = await browser.newContext({ baseURL: base });
    const page = await context.newPage();
    await page.goto(path);
    await page.waitForFunction(ready, null, { polling: 'raf' });
    out.push(await page.evaluate(() => {
      const fcp = performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null;
      return { ready: performance.now(), fcp };
    }));
    await context.close();
  }
  return { ready: median(out.map((o) => o.ready)), fcp: median(out.map((o) => o.fcp ?? 0)) };
}

try {
  const baseline = await measure('/healthz', () => document.readyState === 'complete');
  const console_ = await measure('/', () => (window.__tessera?.views ?? 0) >= 1);
  const figures = {
    runs: RUNS,
    bundle: { files: assets.length, raw_bytes: raw, gzip_bytes: gz },
    baseline_healthz_ms: Number(baseline.ready.toFixed(1)),
    console_first_render_ms: Number(console_.ready.toFixed(1)),
    console_first_contentful_paint_ms: Number(console_.fcp.toFixed(1)),
    first_render_ratio_to_baseline: Number((console_.ready / baseline.ready).toFixed(2)),
  };
  console.log(JSON.stringify(figures, null, 2));
} finally {
  await browser.close();
  child.kill('SIGTERM');
  rmSync(state, { recursive: true, force: true });
}
