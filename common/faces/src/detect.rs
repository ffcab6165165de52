//! Face detection: YuNet (the default) and CenterFace, decoded into boxes, landmarks and
//! scores in the input image's pixels.
//!
//! Both models take the whole image at any size that is a multiple of 32, so the image
//! is scaled down only when its long side exceeds [`MAX_SIDE`] and padded on the bottom
//! and right. Small faces survive because nothing is cropped or squashed.

use crate::error::{FaceError, inference};
use image::RgbImage;
use ort::session::Session;
use ort::value::TensorRef;
use serde::{Deserialize, Serialize};
use tessera_core::geometry::iou_px;

/// Longest side the detector sees; larger photos are scaled down to it.
pub const MAX_SIDE: u32 = 1920;
/// Overlap above which the weaker of two boxes is dropped.
pub const NMS_IOU: f32 = 0.3;

/// Which detector model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DetectorKind {
    /// OpenCV Zoo YuNet 2023mar (BGR input, strides 8/16/32).
    Yunet,
    /// CenterFace (RGB input, one stride-4 heatmap).
    Centerface,
}

impl DetectorKind {
    /// Score at or above which a detection counts as a face. Lower than OpenCV's 0.9
    /// for YuNet on purpose: a missed face is the expensive failure.
    pub fn threshold(self) -> f32 {
        match self {
            DetectorKind::Yunet => 0.6,
            DetectorKind::Centerface => 0.5,
        }
    }

    /// The name used in records and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            DetectorKind::Yunet => "yunet",
            DetectorKind::Centerface => "centerface",
        }
    }
}

impl std::str::FromStr for DetectorKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "yunet" => Ok(DetectorKind::Yunet),
            "centerface" => Ok(DetectorKind::Centerface),
            other => Err(format!(
                "unknown detector `{other}`; use `yunet` or `centerface`"
            )),
        }
    }
}

/// One face found in an image, in that image's pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct Detection {
    /// `[x1, y1, x2, y2]`.
    pub bbox: [f32; 4],
    /// Eye, eye, nose, mouth corner, mouth corner; image-left first.
    pub landmarks: [[f32; 2]; 5],
    /// Detector confidence, 0..1.
    pub score: f32,
}

/// A detector's session with the buffer its input is written into, kept from pass to
/// pass: a full pass's input is about 23 MB (1600 × 1216 × 3 numbers), and allocating it
/// afresh for every pass cost more in zeroing and page faults than filling it (measured
/// with `perf` on `tessera blur`). It holds at most [`MAX_SIDE`]² × 3 numbers (44 MB).
pub(crate) struct Detector {
    session: Session,
    input: Vec<f32>,
}

impl Detector {
    pub(crate) fn new(session: Session) -> Detector {
        Detector {
            session,
            input: Vec::new(),
        }
    }
}

/// How the padded model input (in the detector's buffer) maps back to the image.
struct Prepared {
    width: usize,
    height: usize,
    scale: f32,
}

/// Write `img` (scaled to [`MAX_SIDE`] if larger) into `data` as the model's planar
/// input, padded with zeros on the bottom and right to multiples of 32. Every number of
/// the input is written, so nothing of an earlier pass is left in the buffer.
fn prepare(img: &RgbImage, bgr: bool, data: &mut Vec<f32>) -> Prepared {
    let (w, h) = img.dimensions();
    let long = w.max(h);
    let (scaled, scale) = if long > MAX_SIDE {
        let s = MAX_SIDE as f32 / long as f32;
        let nw = ((w as f32 * s).round() as u32).max(1);
        let nh = ((h as f32 * s).round() as u32).max(1);
        (
            std::borrow::Cow::Owned(tessera_imaging::resize::rgb(img, nw, nh)),
            s,
        )
    } else {
        (std::borrow::Cow::Borrowed(img), 1.0)
    };
    let (sw, sh) = (scaled.width() as usize, scaled.height() as usize);
    let pw = sw.div_ceil(32) * 32;
    let ph = sh.div_ceil(32) * 32;
    let plane = pw * ph;
    data.resize(3 * plane, 0.0);
    data.truncate(3 * plane);
    let (c0, c2) = if bgr { (2, 0) } else { (0, 2) };
    let src = scaled.as_raw();
    for (c, channel) in [c0, 1, c2].into_iter().enumerate() {
        let out = &mut data[c * plane..(c + 1) * plane];
        for (y, row) in out.chunks_exact_mut(pw).enumerate() {
            if y >= sh {
                row.fill(0.0);
                continue;
            }
            let line = &src[y * sw * 3..(y + 1) * sw * 3];
            for (o, px) in row[..sw].iter_mut().zip(line.chunks_exact(3)) {
                *o = px[channel] as f32;
            }
            row[sw..].fill(0.0);
        }
    }
    Prepared {
        width: pw,
        height: ph,
        scale,
    }
}

/// Run `kind` on `img`: decoded, thresholded, de-duplicated, best first.
pub(crate) fn run(
    detector: &mut Detector,
    kind: DetectorKind,
    img: &RgbImage,
) -> Result<Vec<Detection>, FaceError> {
    let model = kind.as_str();
    let p = prepare(img, kind == DetectorKind::Yunet, &mut detector.input);
    let (pw, ph) = (p.width, p.height);
    let input = TensorRef::from_array_view(([1usize, 3, ph, pw], detector.input.as_slice()))
        .map_err(|e| inference(model, e))?;
    let outputs = detector
        .session
        .run(ort::inputs![input])
        .map_err(|e| inference(model, e))?;
    let get = |name: &str| -> Result<&[f32], FaceError> {
        let v = outputs
            .get(name)
            .ok_or_else(|| inference(model, format!("the model has no output `{name}`")))?;
        let (_, data) = v
            .try_extract_tensor::<f32>()
            .map_err(|e| inference(model, e))?;
        Ok(data)
    };
    let threshold = kind.threshold();
    let mut found = match kind {
        DetectorKind::Yunet => {
            let mut all = Vec::new();
            for stride in [8usize, 16, 32] {
                let cls = get(&format!("cls_{stride}"))?;
                let obj = get(&format!("obj_{stride}"))?;
                let bbox = get(&format!("bbox_{stride}"))?;
                let kps = get(&format!("kps_{stride}"))?;
                decode_yunet(
                    stride,
                    pw / stride,
                    ph / stride,
                    cls,
                    obj,
                    bbox,
                    kps,
                    threshold,
                    &mut all,
                )
                .map_err(|e| inference(model, e))?;
            }
            all
        }
        DetectorKind::Centerface => {
            let heat = get("537")?;
            let scale = get("538")?;
            let offset = get("539")?;
            let lms = get("540")?;
            decode_centerface(pw / 4, ph / 4, heat, scale, offset, lms, threshold)
                .map_err(|e| inference(model, e))?
        }
    };
    let (w, h) = (img.width() as f32, img.height() as f32);
    for d in &mut found {
        for (i, v) in d.bbox.iter_mut().enumerate() {
            *v = (*v / p.scale).clamp(0.0, if i % 2 == 0 { w } else { h });
        }
        for l in &mut d.landmarks {
            l[0] /= p.scale;
            l[1] /= p.scale;
        }
    }
    found.retain(|d| d.bbox[2] - d.bbox[0] >= 1.0 && d.bbox[3] - d.bbox[1] >= 1.0);
    Ok(nms(found, NMS_IOU))
}

#[allow(clippy::too_many_arguments)]
fn decode_yunet(
    stride: usize,
    cols: usize,
    rows: usize,
    cls: &[f32],
    obj: &[f32],
    bbox: &[f32],
    kps: &[f32],
    threshold: f32,
    out: &mut Vec<Detection>,
) -> Result<(), String> {
    let n = cols * rows;
    if cls.len() != n || obj.len() != n || bbox.len() != 4 * n || kps.len() != 10 * n {
        return Err(format!(
            "stride {stride}: outputs have {} / {} / {} / {} values for {n} cells",
            cls.len(),
            obj.len(),
            bbox.len(),
            kps.len()
        ));
    }
    let s = stride as f32;
    for i in 0..n {
        let score = (cls[i].clamp(0.0, 1.0) * obj[i].clamp(0.0, 1.0)).sqrt();
        if score < threshold {
            continue;
        }
        let (r, c) = ((i / cols) as f32, (i % cols) as f32);
        let b = &bbox[4 * i..4 * i + 4];
        let cx = (c + b[0]) * s;
        let cy = (r + b[1]) * s;
        let w = b[2].exp() * s;
        let h = b[3].exp() * s;
        let k = &kps[10 * i..10 * i + 10];
        let mut landmarks = [[0f32; 2]; 5];
        for (j, l) in landmarks.iter_mut().enumerate() {
            *l = [(k[2 * j] + c) * s, (k[2 * j + 1] + r) * s];
        }
        out.push(Detection {
            bbox: [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0],
            landmarks,
            score,
        });
    }
    Ok(())
}

fn decode_centerface(
    cols: usize,
    rows: usize,
    heat: &[f32],
    scale: &[f32],
    offset: &[f32],
    lms: &[f32],
    threshold: f32,
) -> Result<Vec<Detection>, String> {
    let n = cols * rows;
    if heat.len() != n || scale.len() != 2 * n || offset.len() != 2 * n || lms.len() != 10 * n {
        return Err(format!(
            "outputs have {} / {} / {} / {} values for {n} cells",
            heat.len(),
            scale.len(),
            offset.len(),
            lms.len()
        ));
    }
    let mut out = Vec::new();
    for i in 0..n {
        let score = heat[i];
        if score < threshold {
            continue;
        }
        let (y, x) = ((i / cols) as f32, (i % cols) as f32);
        let s0 = scale[i].exp() * 4.0;
        let s1 = scale[n + i].exp() * 4.0;
        let x1 = (x + offset[n + i] + 0.5) * 4.0 - s1 / 2.0;
        let y1 = (y + offset[i] + 0.5) * 4.0 - s0 / 2.0;
        let mut landmarks = [[0f32; 2]; 5];
        for (j, l) in landmarks.iter_mut().enumerate() {
            *l = [
                lms[(2 * j + 1) * n + i] * s1 + x1,
                lms[2 * j * n + i] * s0 + y1,
            ];
        }
        out.push(Detection {
            bbox: [x1, y1, x1 + s1, y1 + s0],
            landmarks,
            score,
        });
    }
    Ok(out)
}

/// Greedy non-maximum suppression: best first, dropping boxes that overlap a kept one
/// by more than `iou`.
pub fn nms(mut dets: Vec<Detection>, iou: f32) -> Vec<Detection> {
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut kept: Vec<Detection> = Vec::new();
    for d in dets {
        if kept.iter().all(|k| iou_px(k.bbox, d.bbox) <= iou) {
            kept.push(d);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The detector's input buffer is reused from pass to pass: whatever an earlier,
    /// larger pass left in it, the next input is exactly what a fresh buffer gets (pixels
    /// in the model's channel order, zeros in the padding), for odd sizes, a photo scaled
    /// down to [`MAX_SIDE`], and both channel orders.
    #[test]
    fn a_reused_input_buffer_holds_nothing_of_an_earlier_pass() {
        let img = |w: u32, h: u32| {
            RgbImage::from_fn(w, h, |x, y| {
                image::Rgb([
                    (x % 251) as u8,
                    (y % 241) as u8,
                    ((x * 7 + y * 3) % 256) as u8,
                ])
            })
        };
        for bgr in [true, false] {
            let mut reused = vec![f32::NAN; 3 * 2048 * 2048];
            for (w, h) in [(37, 5), (641, 479), (2000, 1500), (33, 64), (1, 1)] {
                let photo = img(w, h);
                let mut fresh = Vec::new();
                let a = prepare(&photo, bgr, &mut fresh);
                let b = prepare(&photo, bgr, &mut reused);
                assert_eq!((a.width, a.height, a.scale), (b.width, b.height, b.scale));
                assert_eq!(reused.len(), 3 * b.width * b.height, "{w}×{h}");
                assert!(
                    fresh
                        .iter()
                        .zip(&reused)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{w}×{h}, bgr {bgr}: the reused buffer differs from a fresh one"
                );
            }
        }
        // The channel order and the padding, on one pixel.
        let mut data = Vec::new();
        let p = prepare(
            &RgbImage::from_pixel(1, 1, image::Rgb([10, 20, 30])),
            true,
            &mut data,
        );
        let plane = p.width * p.height;
        assert_eq!((p.width, p.height), (32, 32));
        assert_eq!([data[0], data[plane], data[2 * plane]], [30.0, 20.0, 10.0]);
        assert!(data.iter().filter(|v| **v != 0.0).count() == 3);
    }

    fn det(b: [f32; 4], score: f32) -> Detection {
        Detection {
            bbox: b,
            landmarks: [[0.0; 2]; 5],
            score,
        }
    }

    #[test]
    fn nms_keeps_the_best_of_overlapping_boxes() {
        let kept = nms(
            vec![
                det([0., 0., 10., 10.], 0.7),
                det([1., 1., 11., 11.], 0.9),
                det([50., 50., 60., 60.], 0.8),
            ],
            0.3,
        );
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].score, 0.9);
        assert_eq!(kept[1].score, 0.8);
    }

    #[test]
    fn yunet_decoding_follows_the_cell_layout() {
        // 2x2 cells at stride 8; only cell (row 1, col 0) is a face.
        let cls = [0.0, 0.0, 0.81, 0.0];
        let obj = [0.0, 0.0, 1.0, 0.0];
        let mut bbox = [0f32; 16];
        bbox[8..12].copy_from_slice(&[0.5, 0.5, 0f32.ln_1p(), 0.0]);
        let kps = [0f32; 40];
        let mut out = Vec::new();
        decode_yunet(8, 2, 2, &cls, &obj, &bbox, &kps, 0.6, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        let d = &out[0];
        assert!((d.score - 0.9).abs() < 1e-6);
        // centre (0 + 0.5) * 8 = 4, (1 + 0.5) * 8 = 12; size exp(0) * 8 = 8.
        assert_eq!(d.bbox, [0.0, 8.0, 8.0, 16.0]);
        assert_eq!(d.landmarks[0], [0.0, 8.0]);
        assert!(decode_yunet(8, 2, 2, &cls[..3], &obj, &bbox, &kps, 0.6, &mut out).is_err());
    }
}
