//! Phone-shaped test photos with known faces, for the privacy benchmark and tests.
//!
//! Public-domain portraits are cut around their face and placed on a background at a
//! chosen face size and head tilt; the scene is then stored the way phones store photos:
//! upright, sideways pixels with an EXIF orientation tag (all eight values), or turned
//! with no tag at all (a viewer then shows it turned, and so must Tessera). Each scene
//! knows where every face is *as displayed*, and whose it is.

use image::RgbImage;
use tessera_core::geometry::FracRect;
use tessera_imaging::Orientation;

/// A portrait to place: its pixels and its face box (`[x1, y1, x2, y2]`).
#[derive(Debug, Clone)]
pub struct Portrait {
    /// Pixels.
    pub pixels: RgbImage,
    /// The face box in `pixels`.
    pub face: [f32; 4],
}

/// How a scene is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Upright, no tag.
    Upright,
    /// Pixels stored so that applying this EXIF orientation shows the scene upright,
    /// with the tag written.
    Tagged(u8),
    /// Turned by this orientation's transform and not tagged: viewers show it turned.
    Untagged(u8),
}

/// What to make.
#[derive(Debug, Clone)]
pub struct SceneSpec {
    /// Width of the upright scene.
    pub width: u32,
    /// Height of the upright scene.
    pub height: u32,
    /// Face height in pixels.
    pub face_px: u32,
    /// When above `face_px`, each face's height is drawn between `face_px` and this (a
    /// crowd, near and far).
    pub face_px_max: u32,
    /// Head tilt in degrees (clockwise), the same for every face.
    pub tilt_deg: f32,
    /// Which portrait goes in each slot, row by row.
    pub people: Vec<usize>,
    /// How it is stored.
    pub stored: Stored,
    /// Seed for placement jitter.
    pub seed: u64,
}

/// A made photo.
#[derive(Debug, Clone)]
pub struct Scene {
    /// The stored file (JPEG).
    pub jpeg: Vec<u8>,
    /// Each face as displayed: the portrait's index and its box.
    pub faces: Vec<(usize, FracRect)>,
    /// The displayed image's size.
    pub displayed: (u32, u32),
}

/// Make the scene `spec` from `portraits` on `background` (scaled to fill).
pub fn make(portraits: &[Portrait], background: &RgbImage, spec: &SceneSpec) -> Scene {
    let mut canvas = image::imageops::resize(
        background,
        spec.width,
        spec.height,
        image::imageops::FilterType::Triangle,
    );
    let n = spec.people.len().max(1) as u32;
    let cols = ((n as f32 * spec.width as f32 / spec.height as f32)
        .sqrt()
        .ceil() as u32)
        .max(1);
    let rows = n.div_ceil(cols);
    let (cell_w, cell_h) = (spec.width / cols, spec.height / rows);
    let mut rng = fastrand::Rng::with_seed(spec.seed);
    let mut faces = Vec::new();
    for (slot, &who) in spec.people.iter().enumerate() {
        let p = &portraits[who];
        let (c, r) = (slot as u32 % cols, slot as u32 / cols);
        let fh = p.face[3] - p.face[1];
        let face_px = if spec.face_px_max > spec.face_px {
            rng.u32(spec.face_px..=spec.face_px_max)
        } else {
            spec.face_px
        };
        let s = face_px as f32 / fh;
        // Cut the head with some margin, scaled to the face size.
        let (cx, cy) = ((p.face[0] + p.face[2]) / 2.0, (p.face[1] + p.face[3]) / 2.0);
        let half = fh * 0.9;
        let (x0, y0) = ((cx - half).max(0.0), (cy - half).max(0.0));
        let x1 = (cx + half).min(p.pixels.width() as f32);
        let y1 = (cy + half).min(p.pixels.height() as f32);
        let crop = image::imageops::crop_imm(
            &p.pixels,
            x0 as u32,
            y0 as u32,
            (x1 - x0) as u32,
            (y1 - y0) as u32,
        )
        .to_image();
        let cw = ((crop.width() as f32 * s).round() as u32).max(1);
        let ch = ((crop.height() as f32 * s).round() as u32).max(1);
        let head = image::imageops::resize(&crop, cw, ch, image::imageops::FilterType::Triangle);
        // Centre of the face in the cell, jittered.
        let jx = (rng.f32() - 0.5) * cell_w as f32 * 0.2;
        let jy = (rng.f32() - 0.5) * cell_h as f32 * 0.2;
        let centre = (
            (c as f32 + 0.5) * cell_w as f32 + jx,
            (r as f32 + 0.5) * cell_h as f32 + jy,
        );
        // The face box inside the scaled head, relative to the head's centre.
        let face_rel = [
            (p.face[0] - x0) * s - cw as f32 / 2.0,
            (p.face[1] - y0) * s - ch as f32 / 2.0,
            (p.face[2] - x0) * s - cw as f32 / 2.0,
            (p.face[3] - y0) * s - ch as f32 / 2.0,
        ];
        paste_rotated(&mut canvas, &head, centre, spec.tilt_deg);
        let b = rotated_bounds(face_rel, spec.tilt_deg);
        let px = [
            b[0] + centre.0,
            b[1] + centre.1,
            b[2] + centre.0,
            b[3] + centre.1,
        ];
        faces.push((who, FracRect::from_pixels(px, spec.width, spec.height)));
    }
    let (pixels, tag, shown) = match spec.stored {
        Stored::Upright => (canvas, None, Orientation::UPRIGHT),
        Stored::Tagged(o) => {
            let o = Orientation::from_exif(o as u32);
            (
                tessera_imaging::orient::stored_for(&canvas, o),
                Some(o),
                Orientation::UPRIGHT,
            )
        }
        Stored::Untagged(o) => {
            let o = Orientation::from_exif(o as u32);
            (turn(canvas, o), None, o)
        }
    };
    let faces = faces
        .into_iter()
        .map(|(who, r)| (who, shown.map_rect(r)))
        .collect();
    let displayed = shown.displayed_size(spec.width, spec.height);
    let exif = tag.map(tessera_imaging::metadata::orientation_exif);
    let jpeg = tessera_imaging::encode::jpeg(&pixels, None, exif.as_deref()).expect("encodable");
    Scene {
        jpeg,
        faces,
        displayed,
    }
}

fn turn(img: RgbImage, o: Orientation) -> RgbImage {
    tessera_imaging::orient::apply(image::DynamicImage::ImageRgb8(img), o).to_rgb8()
}

/// Bounding box of `b` (relative to the rotation centre) after turning by `deg`.
fn rotated_bounds(b: [f32; 4], deg: f32) -> [f32; 4] {
    let (s, c) = deg.to_radians().sin_cos();
    let pts = [[b[0], b[1]], [b[2], b[1]], [b[0], b[3]], [b[2], b[3]]];
    let mut out = [f32::MAX, f32::MAX, f32::MIN, f32::MIN];
    for [x, y] in pts {
        let (rx, ry) = (x * c - y * s, x * s + y * c);
        out = [
            out[0].min(rx),
            out[1].min(ry),
            out[2].max(rx),
            out[3].max(ry),
        ];
    }
    out
}

/// Paste `src` turned by `deg` (clockwise) with its centre at `at`, inside the largest
/// circle of `src` (so no square corners show), bilinear.
fn paste_rotated(dst: &mut RgbImage, src: &RgbImage, at: (f32, f32), deg: f32) {
    let (s, c) = deg.to_radians().sin_cos();
    let (sw, sh) = (src.width() as f32, src.height() as f32);
    let radius = sw.min(sh) / 2.0;
    let reach = (sw * sw + sh * sh).sqrt() / 2.0;
    let (x0, x1) = (
        (at.0 - reach).max(0.0) as u32,
        ((at.0 + reach) as u32).min(dst.width()),
    );
    let (y0, y1) = (
        (at.1 - reach).max(0.0) as u32,
        ((at.1 + reach) as u32).min(dst.height()),
    );
    for y in y0..y1 {
        for x in x0..x1 {
            let (dx, dy) = (x as f32 + 0.5 - at.0, y as f32 + 0.5 - at.1);
            // Inverse rotation into the source.
            let (u, v) = (dx * c + dy * s, -dx * s + dy * c);
            if u * u + v * v > radius * radius {
                continue;
            }
            let (sx, sy) = (u + sw / 2.0 - 0.5, v + sh / 2.0 - 0.5);
            if sx < 0.0 || sy < 0.0 || sx > sw - 1.0 || sy > sh - 1.0 {
                continue;
            }
            dst.put_pixel(x, y, tessera_faces::search::sample(src, sx, sy));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    fn portrait() -> Portrait {
        let mut pixels = RgbImage::from_pixel(100, 100, Rgb([0, 0, 0]));
        for y in 40..60 {
            for x in 40..60 {
                pixels.put_pixel(x, y, Rgb([255, 255, 255]));
            }
        }
        Portrait {
            pixels,
            face: [40.0, 40.0, 60.0, 60.0],
        }
    }

    #[test]
    fn every_stored_shape_decodes_to_the_scene_with_faces_where_it_says() {
        let bg = RgbImage::from_pixel(10, 10, Rgb([0, 0, 0]));
        for stored in [
            Stored::Upright,
            Stored::Tagged(6),
            Stored::Tagged(8),
            Stored::Tagged(3),
            Stored::Tagged(5),
            Stored::Tagged(7),
            Stored::Untagged(6),
        ] {
            let spec = SceneSpec {
                width: 400,
                height: 300,
                face_px: 40,
                face_px_max: 0,
                tilt_deg: 0.0,
                people: vec![0, 0],
                stored,
                seed: 1,
            };
            let scene = make(&[portrait()], &bg, &spec);
            let d = tessera_imaging::decode("scene.jpg", &scene.jpeg).unwrap();
            assert_eq!(d.rgb.dimensions(), scene.displayed, "{stored:?}");
            for (_, r) in &scene.faces {
                let [x1, y1, x2, y2] = r.to_pixels(d.rgb.width(), d.rgb.height());
                let centre = d
                    .rgb
                    .get_pixel(((x1 + x2) / 2.0) as u32, ((y1 + y2) / 2.0) as u32);
                assert!(centre.0[0] > 200, "{stored:?}: face centre is {centre:?}");
                assert!((x2 - x1 - 40.0).abs() < 2.0 && (y2 - y1 - 40.0).abs() < 2.0);
            }
        }
    }
}
