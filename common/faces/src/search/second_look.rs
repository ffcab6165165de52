//! Second looks at a face: its crop enlarged to the embedder's size and turned level,
//! searched again, for landmarks that align a tilted or small face for recognition.

use super::{Landmarks, side};
use crate::detect::Detection;
use image::RgbImage;

/// The landmarks of a face's [`SECOND_LOOKS`] (those where the detector found it again),
/// in `img`'s pixels: views that align a tilted or small face far better for
/// recognition. Three detector passes of a crop about 1/20 of a full pass each; none for a
/// face under 4 px.
pub fn second_looks<E>(
    img: &RgbImage,
    d: &Detection,
    mut pass: impl FnMut(&RgbImage) -> Result<Vec<Detection>, E>,
) -> Result<Vec<Landmarks>, E> {
    let px = side(d);
    let mut out = Vec::new();
    if px < 4.0 {
        return Ok(out);
    }
    let roll = roll_deg(d);
    for turn in SECOND_LOOKS {
        if let Some(l) = second_look(img, d, roll + turn, &mut pass)? {
            out.push(l);
        }
    }
    Ok(out)
}

/// The turns (degrees, added to the roll the landmarks show) of the second looks at each
/// face. The detectors' landmarks on a head tilted 20–40° often still look level
/// (measured: 4° for a 35° tilt), so the face is also looked at turned 30° each way.
pub const SECOND_LOOKS: [f32; 3] = [0.0, -30.0, 30.0];
/// Face height the second look scales to (SFace's input is 112 px).
const REDO_FACE_PX: f32 = 112.0;

/// A second look at a face: a crop around it, turned by `roll` degrees and scaled so the
/// face is ~112 px tall (SFace's input), searched again. When the turn levels the eyes,
/// the landmarks found there (mapped back to `img`) align far better than those of a
/// face seen tilted or tiny, so the embedding from them recognises who it is. A crop is
/// ~1/20 of a full pass. `None` when the detector does not find the face again.
fn second_look<E>(
    img: &RgbImage,
    d: &Detection,
    roll: f32,
    pass: &mut impl FnMut(&RgbImage) -> Result<Vec<Detection>, E>,
) -> Result<Option<Landmarks>, E> {
    let fh = side(d);
    let zoom = REDO_FACE_PX / fh;
    let side = (REDO_FACE_PX * 3.0) as u32;
    let centre = ((d.bbox[0] + d.bbox[2]) / 2.0, (d.bbox[1] + d.bbox[3]) / 2.0);
    let (sin, cos) = roll.to_radians().sin_cos();
    // Crop pixel (u, v) → image point: undo the zoom, turn by the roll, add the centre.
    let to_img = |u: f32, v: f32| {
        let (x, y) = (
            (u - side as f32 / 2.0) / zoom,
            (v - side as f32 / 2.0) / zoom,
        );
        [centre.0 + x * cos - y * sin, centre.1 + x * sin + y * cos]
    };
    let crop = RgbImage::from_fn(side, side, |u, v| {
        let [x, y] = to_img(u as f32 + 0.5, v as f32 + 0.5);
        sample(img, x - 0.5, y - 0.5)
    });
    let again = pass(&crop)?;
    let mid = side as f32 / 2.0;
    let best = again.into_iter().min_by(|a, b| {
        let dist = |d: &Detection| {
            ((d.bbox[0] + d.bbox[2]) / 2.0 - mid).abs()
                + ((d.bbox[1] + d.bbox[3]) / 2.0 - mid).abs()
        };
        dist(a).total_cmp(&dist(b))
    });
    Ok(best
        .filter(|b| b.bbox[0] < mid && b.bbox[2] > mid && b.bbox[1] < mid && b.bbox[3] > mid)
        .map(|b| b.landmarks.map(|[u, v]| to_img(u, v))))
}

/// Head roll in degrees, from the eyes.
pub(super) fn roll_deg(d: &Detection) -> f32 {
    let [le, re] = [d.landmarks[0], d.landmarks[1]];
    (re[1] - le[1]).atan2(re[0] - le[0]).to_degrees()
}

/// Bilinear sample of `img` at `(x, y)`, grey outside.
pub fn sample(img: &RgbImage, x: f32, y: f32) -> image::Rgb<u8> {
    let (w, h) = (img.width() as f32, img.height() as f32);
    if x < 0.0 || y < 0.0 || x > w - 1.0 || y > h - 1.0 {
        return image::Rgb([127, 127, 127]);
    }
    let (x0, y0) = (x.floor() as u32, y.floor() as u32);
    let (x1, y1) = (
        (x0 + 1).min(img.width() - 1),
        (y0 + 1).min(img.height() - 1),
    );
    let (fx, fy) = (x - x0 as f32, y - y0 as f32);
    let p = |x, y| img.get_pixel(x, y).0.map(f32::from);
    let (a, b, c, e) = (p(x0, y0), p(x1, y0), p(x0, y1), p(x1, y1));
    image::Rgb(std::array::from_fn(|i| {
        let top = a[i] * (1.0 - fx) + b[i] * fx;
        let bottom = c[i] * (1.0 - fx) + e[i] * fx;
        (top * (1.0 - fy) + bottom * fy).round() as u8
    }))
}
