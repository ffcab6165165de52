// The 3D viewer: a sealed snapshot's coloured points and a frustum per registered
// photo, drawn with plain WebGL. The preview (≤ 10 000 points) comes first; the full
// cloud follows in Range requests of 64 Ki points, drawn as they arrive. Turn by
// dragging (or the arrow keys), move with shift, the right button or two fingers, zoom
// with the wheel, a pinch or +/−, and go back to the first view with "Reset view" (or
// R); click a camera to see its photo. The view turns about the scene's own up (from
// how the photos were held), so a drone survey or a georeferenced model is not seen
// edge-on, and the first view holds every camera.

import { api } from '../api.js';
import { h } from '../dom.js';
import { header, records, HEADER, RECORD } from '../gl/points.js';
import * as m from '../gl/math.js';

const CHUNK = 65536;
/** Vertical field of view, radians. */
const FOV = 0.9;

const POINT_VS = `attribute vec3 p; attribute vec3 c; uniform mat4 mvp; uniform float size; varying vec3 vc;
void main() { gl_Position = mvp * vec4(p, 1.0); gl_PointSize = size; vc = c; }`;
const POINT_FS = `precision mediump float; varying vec3 vc; void main() { gl_FragColor = vec4(vc, 1.0); }`;
const LINE_VS = `attribute vec3 p; uniform mat4 mvp; void main() { gl_Position = mvp * vec4(p, 1.0); }`;
const LINE_FS = `precision mediump float; uniform vec3 color; void main() { gl_FragColor = vec4(color, 1.0); }`;

function program(gl, vs, fs) {
  const compile = (type, src) => {
    const s = gl.createShader(type);
    gl.shaderSource(s, src);
    gl.compileShader(s);
    if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(s));
    return s;
  };
  const p = gl.createProgram();
  gl.attachShader(p, compile(gl.VERTEX_SHADER, vs));
  gl.attachShader(p, compile(gl.FRAGMENT_SHADER, fs));
  gl.linkProgram(p);
  if (!gl.getProgramParameter(p, gl.LINK_STATUS)) throw new Error(gl.getProgramInfoLog(p));
  return p;
}

/** Percentile bounds of positions, so a few far outliers do not shrink the scene. */
function robustBounds(pos, n) {
  const lo = [];
  const hi = [];
  for (let a = 0; a < 3; a += 1) {
    const v = [];
    const step = Math.max(1, Math.floor(n / 5000));
    for (let i = 0; i < n; i += step) v.push(pos[i * 3 + a]);
    v.sort((x, y) => x - y);
    lo.push(v[Math.floor(v.length * 0.02)] ?? 0);
    hi.push(v[Math.floor(v.length * 0.98)] ?? 0);
  }
  return { lo, hi };
}

/**
 * Which way is up in a model, from its cameras: the mean of their "up" (−y) axes when
 * they agree (photos held upright), else the mean of their backward axes when those
 * agree (nadir photos, whose strips alternate direction), else COLMAP's −y.
 */
function sceneUp(cams) {
  const n = cams.length;
  if (!n) return [0, -1, 0];
  let up = [0, 0, 0];
  let back = [0, 0, 0];
  for (const c of cams) {
    const R = m.rotation(c.pose.rotation);
    // Rows of cam_from_world's rotation are the camera's axes in the world.
    up = m.sub(up, R[1]);
    back = m.sub(back, R[2]);
  }
  if (Math.hypot(...up) / n > 0.5) return m.norm(up);
  if (Math.hypot(...back) / n > 0.5) return m.norm(back);
  return [0, -1, 0];
}

/** Bytes `start..=end` of `url` (a server that ignores Range sends all: cut to them). */
async function range(url, start, end) {
  const r = await api(url, { raw: true, headers: { Range: `bytes=${start}-${end}` } });
  const bytes = new Uint8Array(await r.arrayBuffer());
  return r.status === 200 ? bytes.subarray(start, end + 1) : bytes;
}

export class Viewer {
  constructor({ onCamera = () => {} } = {}) {
    this.onCamera = onCamera;
    this.canvas = h('canvas', { class: 'viewer', tabindex: 0, role: 'img', 'aria-label': '3D view of the reconstruction: arrow keys turn, + and − zoom, R resets the view' });
    this.status = h('p', { class: 'dim viewer-status', 'aria-live': 'polite' }, 'No snapshot yet.');
    const reset = h('button', { type: 'button', class: 'ghost', onclick: () => this.reset() }, 'Reset view');
    this.el = h('div', { class: 'viewer-box' }, this.canvas,
      h('div', { class: 'viewer-bar' }, reset,
        h('small', { class: 'dim' }, 'Drag to turn · shift-drag, right-drag or two fingers to move · wheel or pinch to zoom · click a camera to see its photo')),
      this.status);
    this.state = {
      webgl: false, points: 0, total: 0, cameras: 0, seq: null, frames: 0, error: null,
      // Show a snapshot (what a `snapshot_available` event does).
      load: (rid, seq) => this.load(rid, seq),
      // Where each camera is on the page now, so a test can click one as a person would.
      cameraPositions: () => {
        const r = this.canvas.getBoundingClientRect();
        const mvp = this.mvp();
        return this.cams.map((c) => {
          const s = m.toScreen(mvp, c.center, r.width, r.height);
          return s && { name: c.name, x: r.left + s[0], y: r.top + s[1] };
        }).filter((p) => p && p.x > r.left && p.x < r.right && p.y > r.top && p.y < r.bottom);
      },
      view: () => ({ yaw: this.yaw, pitch: this.pitch, dist: this.dist, target: this.target, up: this.up }),
      reset: () => this.reset(),
    };
    window.__tessera.viewer = this.state;
    this.yaw = 0.6;
    this.pitch = 0.35;
    this.dist = 10;
    this.target = [0, 0, 0];
    this.up = [0, -1, 0];
    this.scene = 10;
    this.cams = [];
    this.loading = null;
    this.gl = this.canvas.getContext('webgl', { antialias: true, preserveDrawingBuffer: true });
    if (!this.gl) {
      this.state.error = 'no WebGL context';
      this.status.textContent = 'This browser gave no WebGL context; the 3D view cannot be drawn.';
      return;
    }
    const gl = this.gl;
    this.state.webgl = true;
    this.pointProg = program(gl, POINT_VS, POINT_FS);
    this.lineProg = program(gl, LINE_VS, LINE_FS);
    // Looked up once, not per frame.
    this.at = {
      point: {
        mvp: gl.getUniformLocation(this.pointProg, 'mvp'), size: gl.getUniformLocation(this.pointProg, 'size'),
        p: gl.getAttribLocation(this.pointProg, 'p'), c: gl.getAttribLocation(this.pointProg, 'c'),
      },
      line: {
        mvp: gl.getUniformLocation(this.lineProg, 'mvp'), color: gl.getUniformLocation(this.lineProg, 'color'),
        p: gl.getAttribLocation(this.lineProg, 'p'),
      },
    };
    this.buffers = { pos: gl.createBuffer(), col: gl.createBuffer(), lines: gl.createBuffer(), sel: gl.createBuffer() };
    this.count = 0;
    this.lineCount = 0;
    this.selCount = 0;
    this.bindInput();
    this.resize = new ResizeObserver(() => this.draw());
    this.resize.observe(this.canvas);
  }

  bindInput() {
    const c = this.canvas;
    // Pointers down on the canvas: one turns (or moves), two pinch and move.
    const down = new Map();
    let drag = null;
    let pinch = null;
    const spread = () => { const [a, b] = [...down.values()]; return { d: Math.hypot(a.x - b.x, a.y - b.y), x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 }; };
    c.addEventListener('contextmenu', (e) => e.preventDefault());
    c.addEventListener('pointerdown', (e) => {
      c.setPointerCapture(e.pointerId);
      down.set(e.pointerId, { x: e.clientX, y: e.clientY });
      if (down.size === 2) { pinch = spread(); drag = null; } else if (down.size === 1) {
        drag = { x: e.clientX, y: e.clientY, pan: e.shiftKey || e.button === 2, moved: 0 };
      }
    });
    c.addEventListener('pointermove', (e) => {
      if (!down.has(e.pointerId)) return;
      down.set(e.pointerId, { x: e.clientX, y: e.clientY });
      if (pinch && down.size >= 2) {
        const now = spread();
        if (now.d > 0 && pinch.d > 0) this.zoom(pinch.d / now.d);
        this.pan(now.x - pinch.x, now.y - pinch.y);
        pinch = now;
        return;
      }
      if (!drag) return;
      const dx = e.clientX - drag.x;
      const dy = e.clientY - drag.y;
      drag.moved += Math.abs(dx) + Math.abs(dy);
      drag.x = e.clientX;
      drag.y = e.clientY;
      // A drag across the whole canvas turns the view half round: a short drag turns a
      // little, whatever the screen's size.
      const turn = Math.PI / Math.max(200, c.clientWidth);
      if (drag.pan) this.pan(dx, dy); else this.orbit(-dx * turn, dy * turn);
    });
    const up = (e) => {
      if (e.type === 'pointerup' && drag && drag.moved < 4 && down.size === 1) this.pick(e);
      down.delete(e.pointerId);
      // Lifting one finger of two ends the pinch; the other does not start a turn.
      if (down.size < 2) pinch = null;
      drag = null;
    };
    c.addEventListener('pointerup', up);
    c.addEventListener('pointercancel', up);
    c.addEventListener('wheel', (e) => { e.preventDefault(); this.zoom(Math.exp(e.deltaY * 0.001)); }, { passive: false });
    c.addEventListener('keydown', (e) => {
      const k = { ArrowLeft: () => this.orbit(0.1, 0), ArrowRight: () => this.orbit(-0.1, 0), ArrowUp: () => this.orbit(0, -0.1), ArrowDown: () => this.orbit(0, 0.1), '+': () => this.zoom(0.9), '=': () => this.zoom(0.9), '-': () => this.zoom(1.1), r: () => this.reset(), R: () => this.reset() }[e.key];
      if (k) { e.preventDefault(); k(); }
    });
  }

  orbit(dYaw, dPitch) {
    this.touched = true;
    this.yaw += dYaw;
    this.pitch = Math.max(-1.5, Math.min(1.5, this.pitch + dPitch));
    this.draw();
  }

  /** Closer or further, never so far the scene is a dot or so close it is lost. */
  zoom(f) { this.touched = true; this.dist = Math.max(this.scene * 0.01, Math.min(this.scene * 50, this.dist * f)); this.draw(); }

  pan(dx, dy) {
    this.touched = true;
    const { right, up } = this.basis();
    // A pixel moves the target by what a pixel spans at its distance.
    const s = (2 * this.dist * Math.tan(FOV / 2)) / Math.max(1, this.canvas.clientHeight);
    this.target = m.add(this.target, m.add(m.scale(right, -dx * s), m.scale(up, dy * s)));
    this.draw();
  }

  /** Two directions across `up`: yaw turns between them. */
  across() {
    const a = m.norm(m.cross(this.up, Math.abs(this.up[0]) < 0.9 ? [1, 0, 0] : [0, 0, 1]));
    return [a, m.cross(a, this.up)];
  }

  eye() {
    const [a, b] = this.across();
    const cp = Math.cos(this.pitch);
    const dir = m.add(m.add(m.scale(a, Math.sin(this.yaw) * cp), m.scale(b, Math.cos(this.yaw) * cp)), m.scale(this.up, Math.sin(this.pitch)));
    return m.add(this.target, m.scale(dir, this.dist));
  }

  basis() {
    const f = m.norm(m.sub(this.target, this.eye()));
    const right = m.norm(m.cross(f, this.up));
    return { right, up: m.cross(right, f) };
  }

  mvp() {
    const w = this.canvas.clientWidth || 640;
    const hgt = this.canvas.clientHeight || 400;
    const proj = m.perspective(FOV, w / hgt, this.dist * 0.01, this.dist * 100);
    return m.multiply(proj, m.lookAt(this.eye(), this.target, this.up));
  }

  /** Back to the view the newest snapshot was framed with. */
  reset() {
    if (!this.home) return;
    Object.assign(this, { ...this.home, target: [...this.home.target] });
    // Back at the first view: a larger snapshot may frame itself again.
    this.touched = false;
    this.draw();
  }

  draw() {
    const gl = this.gl;
    if (!gl) return;
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.floor(this.canvas.clientWidth * dpr));
    const hgt = Math.max(1, Math.floor(this.canvas.clientHeight * dpr));
    if (this.canvas.width !== w || this.canvas.height !== hgt) { this.canvas.width = w; this.canvas.height = hgt; }
    gl.viewport(0, 0, w, hgt);
    gl.clearColor(0.07, 0.08, 0.1, 1);
    gl.clear(gl.COLOR_BUFFER_BIT | gl.DEPTH_BUFFER_BIT);
    gl.enable(gl.DEPTH_TEST);
    const mvp = this.mvp();
    if (this.count) {
      gl.useProgram(this.pointProg);
      const { p, c } = this.at.point;
      gl.uniformMatrix4fv(this.at.point.mvp, false, mvp);
      gl.uniform1f(this.at.point.size, 2.0 * dpr);
      gl.bindBuffer(gl.ARRAY_BUFFER, this.buffers.pos);
      gl.enableVertexAttribArray(p);
      gl.vertexAttribPointer(p, 3, gl.FLOAT, false, 0, 0);
      gl.bindBuffer(gl.ARRAY_BUFFER, this.buffers.col);
      gl.enableVertexAttribArray(c);
      gl.vertexAttribPointer(c, 3, gl.UNSIGNED_BYTE, true, 0, 0);
      gl.drawArrays(gl.POINTS, 0, this.count);
      gl.disableVertexAttribArray(c);
    }
    const lines = (buf, n, color) => {
      if (!n) return;
      gl.useProgram(this.lineProg);
      const { p } = this.at.line;
      gl.uniformMatrix4fv(this.at.line.mvp, false, mvp);
      gl.uniform3fv(this.at.line.color, color);
      gl.bindBuffer(gl.ARRAY_BUFFER, buf);
      gl.enableVertexAttribArray(p);
      gl.vertexAttribPointer(p, 3, gl.FLOAT, false, 0, 0);
      gl.drawArrays(gl.LINES, 0, n);
    };
    lines(this.buffers.lines, this.lineCount, [0.95, 0.6, 0.2]);
    lines(this.buffers.sel, this.selCount, [0.3, 0.9, 1.0]);
    this.state.frames += 1;
  }

  setPoints(positions, colors, n) {
    this.reserve(n);
    this.addPoints(positions, colors, 0);
  }

  /** Room on the GPU for `n` points (none drawn until added). */
  reserve(n) {
    const gl = this.gl;
    gl.bindBuffer(gl.ARRAY_BUFFER, this.buffers.pos);
    gl.bufferData(gl.ARRAY_BUFFER, n * 12, gl.STATIC_DRAW);
    gl.bindBuffer(gl.ARRAY_BUFFER, this.buffers.col);
    gl.bufferData(gl.ARRAY_BUFFER, n * 3, gl.STATIC_DRAW);
    this.count = 0;
  }

  /** Points at index `at` onwards: only they are sent, so a cloud loaded in parts costs
   * each byte once. */
  addPoints(positions, colors, at) {
    const gl = this.gl;
    gl.bindBuffer(gl.ARRAY_BUFFER, this.buffers.pos);
    gl.bufferSubData(gl.ARRAY_BUFFER, at * 12, positions);
    gl.bindBuffer(gl.ARRAY_BUFFER, this.buffers.col);
    gl.bufferSubData(gl.ARRAY_BUFFER, at * 3, colors);
    this.count = at + positions.length / 3;
    this.state.points = this.count;
  }

  frustum(cam, size) {
    const R = m.rotation(cam.pose.rotation);
    const t = cam.pose.translation;
    const { w, hgt, f, cx, cy } = cam.intr;
    const corners = [[0, 0], [w, 0], [w, hgt], [0, hgt]].map(([u, v]) => m.cameraToWorld(R, t, [((u - cx) / f) * size, ((v - cy) / f) * size, size]));
    const c = cam.center;
    const out = [];
    for (let i = 0; i < 4; i += 1) out.push(c, corners[i], corners[i], corners[(i + 1) % 4]);
    return out.flat();
  }

  setCameras(images, cameras, size) {
    const byId = new Map(cameras.map((c) => [c.camera_id, c]));
    this.cams = images.map((img) => {
      const cam = byId.get(img.camera_id) || { width: 1, height: 1, params: [1] };
      // Models with fx and fy keep the principal point at 2 and 3; the others at 1, 2.
      const twoFocal = /^(PINHOLE|OPENCV|OPENCV_FISHEYE|FULL_OPENCV|FOV|THIN_PRISM_FISHEYE|RAD_TAN_THIN_PRISM_FISHEYE)$/.test(cam.model);
      const at = twoFocal ? 2 : 1;
      const intr = {
        w: cam.width, hgt: cam.height, f: cam.params[0] || 1,
        cx: cam.params[at] ?? cam.width / 2, cy: cam.params[at + 1] ?? cam.height / 2,
      };
      const R = m.rotation(img.cam_from_world.rotation);
      const center = m.cameraToWorld(R, img.cam_from_world.translation, [0, 0, 0]);
      return { name: img.name, image_id: img.image_id, center, intr, pose: img.cam_from_world };
    });
    const verts = new Float32Array(this.cams.flatMap((c) => this.frustum(c, size)));
    const gl = this.gl;
    gl.bindBuffer(gl.ARRAY_BUFFER, this.buffers.lines);
    gl.bufferData(gl.ARRAY_BUFFER, verts, gl.STATIC_DRAW);
    this.lineCount = verts.length / 3;
    this.frustumSize = size;
    this.state.cameras = this.cams.length;
  }

  /**
   * Look at `center` from where the photos were taken (their mean position), far enough
   * back that the scene and every camera fit the canvas whichever way it is turned.
   */
  frame(center, diag) {
    this.up = sceneUp(this.cams);
    this.target = center;
    let r = diag / 2;
    for (const c of this.cams) r = Math.max(r, Math.hypot(...m.sub(c.center, center)) + (this.frustumSize || 0));
    const w = this.canvas.clientWidth || 640;
    const hgt = this.canvas.clientHeight || 400;
    const half = Math.min(FOV / 2, Math.atan(Math.tan(FOV / 2) * (w / hgt)));
    this.scene = Math.max(r, 1e-6);
    this.dist = (r / Math.sin(half)) * 1.05;
    if (this.cams.length) {
      const mean = m.scale(this.cams.reduce((s, c) => m.add(s, c.center), [0, 0, 0]), 1 / this.cams.length);
      const v = m.sub(mean, center);
      const len = Math.hypot(...v);
      if (len > 1e-9) {
        const [a, b] = this.across();
        this.pitch = Math.max(-1.4, Math.min(1.4, Math.asin(Math.max(-1, Math.min(1, m.dot(v, this.up) / len)))));
        this.yaw = Math.atan2(m.dot(v, a), m.dot(v, b));
      }
    }
    this.home = { yaw: this.yaw, pitch: this.pitch, dist: this.dist, target: [...this.target], up: this.up };
  }

  pick(e) {
    const r = this.canvas.getBoundingClientRect();
    const x = e.clientX - r.left;
    const y = e.clientY - r.top;
    const mvp = this.mvp();
    let best = null;
    for (const c of this.cams) {
      const s = m.toScreen(mvp, c.center, r.width, r.height);
      if (!s) continue;
      const d = Math.hypot(s[0] - x, s[1] - y);
      if (d < 14 && (!best || d < best.d)) best = { d, c };
    }
    if (best) this.select(best.c);
  }

  /** Highlight a camera and report it. */
  select(cam) {
    const verts = new Float32Array(this.frustum(cam, this.frustumSize * 1.5));
    const gl = this.gl;
    gl.bindBuffer(gl.ARRAY_BUFFER, this.buffers.sel);
    gl.bufferData(gl.ARRAY_BUFFER, verts, gl.STATIC_DRAW);
    this.selCount = verts.length / 3;
    this.state.selected = cam.name;
    this.draw();
    this.onCamera(cam);
  }

  /** Show sealed snapshot `seq` of reconstruction `rid` (newer calls win). */
  async load(rid, seq) {
    // Shown, or being loaded now: nothing to do.
    if (!this.gl || this.state.seq === seq || this.loadingSeq === seq) return;
    this.loadingSeq = seq;
    const token = {};
    this.loading = token;
    this.state.complete = false;
    (this.state.requested ||= []).push(seq);
    const base = `/v1/reconstructions/${rid}/snapshots/${seq}`;
    try {
      const [cameras, images, preview, head] = await Promise.all([
        api(`${base}/cameras.json`), api(`${base}/images.json`),
        api(`${base}/points_preview.bin`, { raw: true }).then((r) => r.arrayBuffer()),
        // The whole cloud's own header: the preview's counts only the preview.
        range(`${base}/points.bin`, 0, HEADER - 1),
      ]);
      if (this.loading !== token) return;
      const hd = header(head.buffer.slice(head.byteOffset, head.byteOffset + HEADER));
      const pv = records(new Uint8Array(preview, HEADER));
      const { lo, hi } = robustBounds(pv.positions, pv.n);
      const diag = Math.hypot(...m.sub(hi, lo)) || 1;
      this.state.seq = seq;
      this.state.total = hd.count;
      this.setPoints(pv.positions, pv.colors, pv.n);
      this.setCameras(images.images, cameras.cameras, diag * 0.04);
      // Each new snapshot is framed (a growing model leaves the first frame) until the
      // person turns, moves or zooms the view themselves.
      if (!this.touched) this.frame(m.scale(m.add(lo, hi), 0.5), diag);
      this.draw();
      this.status.textContent = `Snapshot ${seq}: ${this.state.cameras} cameras, ${pv.n} of ${hd.count} points`;
      await this.loadAll(`${base}/points.bin`, hd.count, token);
    } catch (e) {
      this.state.error = String(e.message || e);
      this.status.textContent = `Could not load snapshot ${seq}: ${e.message || e}`;
    } finally {
      if (this.loading === token) this.loadingSeq = null;
    }
  }

  /** The full cloud in Range requests, drawn as each part arrives. */
  async loadAll(url, count, token) {
    let have = 0;
    while (have < count) {
      const start = HEADER + have * RECORD;
      const end = HEADER + Math.min(count, have + CHUNK) * RECORD - 1;
      const bytes = await range(url, start, end);
      const part = records(bytes.subarray(0, Math.min(bytes.byteLength, (count - have) * RECORD)));
      if (this.loading !== token) return;
      if (!part.n) break;
      if (have === 0) this.reserve(count);
      this.addPoints(part.positions, part.colors, have);
      have += part.n;
      this.draw();
      this.status.textContent = `Snapshot ${this.state.seq}: ${this.state.cameras} cameras, ${have} of ${count} points`;
    }
    this.state.complete = have === count;
  }

  destroy() { this.loading = null; this.resize?.disconnect(); }
}
