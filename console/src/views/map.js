// Photos on a small map drawn from their coordinates alone (no tile server): an
// equirectangular plot of the points' bounding box, corrected for latitude, with a
// scale bar in metres.

import { svg } from '../dom.js';

/** An SVG map of `{lat, lon, name}` points. */
export function gpsMap(points, { width = 480, height = 300 } = {}) {
  const lat0 = points.reduce((s, p) => s + p.lat, 0) / points.length;
  const k = Math.cos((lat0 * Math.PI) / 180);
  const xs = points.map((p) => p.lon * k);
  const ys = points.map((p) => p.lat);
  const [minX, maxX, minY, maxY] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const span = Math.max(maxX - minX, maxY - minY, 1e-6);
  const pad = 24;
  const scale = Math.min((width - 2 * pad) / span, (height - 2 * pad) / span);
  const cx = (minX + maxX) / 2;
  const cy = (minY + maxY) / 2;
  const px = (x) => width / 2 + (x - cx) * scale;
  const py = (y) => height / 2 - (y - cy) * scale;
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', class: 'gps' });
  const title = svg('title', {}, `${points.length} photos with GPS around ${lat0.toFixed(5)}, ${(points.reduce((s, p) => s + p.lon, 0) / points.length).toFixed(5)}`);
  root.append(title, svg('rect', { x: 0, y: 0, width, height, class: 'bg' }));
  points.forEach((p, i) => {
    const c = svg('circle', { cx: px(xs[i]), cy: py(ys[i]), r: 5, class: 'pt' });
    c.append(svg('title', {}, `${p.name}: ${p.lat.toFixed(6)}, ${p.lon.toFixed(6)}`));
    root.append(c);
  });
  // Scale bar: a round number of metres near a quarter of the width.
  const metresPerUnit = 111_320; // one degree of latitude
  const targetM = ((width / 4) / scale) * metresPerUnit;
  const nice = 10 ** Math.floor(Math.log10(targetM || 1));
  const m = [1, 2, 5, 10].map((f) => f * nice).find((v) => v >= targetM * 0.6) || nice;
  const len = (m / metresPerUnit) * scale;
  root.append(svg('line', { x1: pad, y1: height - 12, x2: pad + len, y2: height - 12, class: 'bar' }));
  const label = svg('text', { x: pad, y: height - 16, class: 'label' }, m >= 1000 ? `${m / 1000} km` : `${m} m`);
  root.append(label);
  return root;
}
