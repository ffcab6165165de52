// sfmapi's `application/x-sfm-points-v1` (points.bin): a 44-byte header (magic
// `SFMP3D\0\0`, version u32, count u64, bbox min f32×3, bbox max f32×3) and 26-byte
// little-endian records (xyz f32×3, rgb u8×3, pad, track length u16, point id u64).

export const HEADER = 44;
export const RECORD = 26;

/** The header, or an error naming what is wrong. */
export function header(buf) {
  const v = new DataView(buf);
  if (buf.byteLength < HEADER) throw new Error(`points.bin: ${buf.byteLength} bytes, shorter than its header`);
  const magic = new TextDecoder().decode(new Uint8Array(buf, 0, 6));
  if (magic !== 'SFMP3D') throw new Error('points.bin: not an sfm points file');
  const version = v.getUint32(8, true);
  if (version !== 1) throw new Error(`points.bin: version ${version}, this console reads 1`);
  const count = Number(v.getBigUint64(12, true));
  const f = (o) => v.getFloat32(o, true);
  return { count, min: [f(20), f(24), f(28)], max: [f(32), f(36), f(40)] };
}

/** Records `bytes` (whole records only) into positions and colours. */
export function records(bytes) {
  const n = Math.floor(bytes.byteLength / RECORD);
  const v = new DataView(bytes.buffer, bytes.byteOffset, n * RECORD);
  const positions = new Float32Array(n * 3);
  const colors = new Uint8Array(n * 3);
  for (let i = 0; i < n; i += 1) {
    const o = i * RECORD;
    positions[i * 3] = v.getFloat32(o, true);
    positions[i * 3 + 1] = v.getFloat32(o + 4, true);
    positions[i * 3 + 2] = v.getFloat32(o + 8, true);
    colors[i * 3] = v.getUint8(o + 12);
    colors[i * 3 + 1] = v.getUint8(o + 13);
    colors[i * 3 + 2] = v.getUint8(o + 14);
  }
  return { n, positions, colors };
}
