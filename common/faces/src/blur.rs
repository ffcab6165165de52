//! Blur that cannot be undone.
//!
//! A light Gaussian is partly invertible and a tight detector box leaves hair, ears and
//! jaw visible, so a face is blurred over its box grown by [`DEFAULT_EXPAND`] (35 %) in
//! each dimension, inside an ellipse, by *discarding* information: the region is scaled
//! down to a handful of cells, scaled back up, and box-blurred on top. Manual regions
//! get the same treatment over exactly the rectangle drawn.

use image::imageops::FilterType;
use image::{Rgb, RgbImage};
use tessera_core::geometry::FracRect;

/// How much a face box grows in width and height before blurring.
pub const DEFAULT_EXPAND: f32 = 0.35;
/// Cells across the long side of a region after downsampling: the most detail of the
/// original that survives.
pub const CELLS: u32 = 3;

/// What to blur in one file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BlurPlan {
    /// Face boxes (grown by `expand`, elliptical mask).
    pub faces: Vec<FracRect>,
    /// Manual regions (exactly as drawn, rectangular).
    pub regions: Vec<FracRect>,
    /// Growth of face boxes; 0.30..0.40.
    pub expand: f32,
}

impl BlurPlan {
    /// Nothing to blur.
    pub fn is_empty(&self) -> bool {
        self.faces.is_empty() && self.regions.is_empty()
    }
}

/// Apply `plan` to `img` in place.
pub fn apply(img: &mut RgbImage, plan: &BlurPlan) {
    let (w, h) = img.dimensions();
    for f in &plan.faces {
        let [x1, y1, x2, y2] = f.to_pixels(w, h);
        let (cx, cy) = ((x1 + x2) / 2.0, (y1 + y2) / 2.0);
        let (hw, hh) = (
            (x2 - x1) * (1.0 + plan.expand) / 2.0,
            (y2 - y1) * (1.0 + plan.expand) / 2.0,
        );
        blur_region(img, [cx - hw, cy - hh, cx + hw, cy + hh], true);
    }
    for r in &plan.regions {
        blur_region(img, r.to_pixels(w, h), false);
    }
}

fn blur_region(img: &mut RgbImage, b: [f32; 4], ellipse: bool) {
    let (w, h) = img.dimensions();
    let x0 = b[0].floor().max(0.0) as u32;
    let y0 = b[1].floor().max(0.0) as u32;
    let x1 = (b[2].ceil().max(0.0) as u32).min(w);
    let y1 = (b[3].ceil().max(0.0) as u32).min(h);
    if x1 <= x0 || y1 <= y0 {
        return;
    }
    let (rw, rh) = (x1 - x0, y1 - y0);
    let crop = image::imageops::crop_imm(img, x0, y0, rw, rh).to_image();
    let long = rw.max(rh);
    let cw = ((rw * CELLS).div_ceil(long)).max(1);
    let ch = ((rh * CELLS).div_ceil(long)).max(1);
    let small = image::imageops::resize(&crop, cw, ch, FilterType::Triangle);
    let mut big = image::imageops::resize(&small, rw, rh, FilterType::Triangle);
    box_blur(&mut big, (long / 4).max(1));
    // Ellipse in the full (unclipped) box, so a face at an edge keeps its shape.
    let (ecx, ecy) = ((b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0);
    let (erx, ery) = (
        ((b[2] - b[0]) / 2.0).max(0.5),
        ((b[3] - b[1]) / 2.0).max(0.5),
    );
    for y in 0..rh {
        for x in 0..rw {
            let (px, py) = (x0 + x, y0 + y);
            if ellipse {
                let dx = (px as f32 + 0.5 - ecx) / erx;
                let dy = (py as f32 + 0.5 - ecy) / ery;
                if dx * dx + dy * dy > 1.0 {
                    continue;
                }
            }
            img.put_pixel(px, py, *big.get_pixel(x, y));
        }
    }
}

/// Separable box blur of radius `r` (edges clamped).
fn box_blur(img: &mut RgbImage, r: u32) {
    let (w, h) = img.dimensions();
    let r = r as i64;
    let pass = |src: &RgbImage, horizontal: bool| -> RgbImage {
        let mut out = RgbImage::new(w, h);
        let (len, lines) = if horizontal { (w, h) } else { (h, w) };
        for line in 0..lines {
            let at = |i: i64| -> [u32; 3] {
                let i = i.clamp(0, len as i64 - 1) as u32;
                let p = if horizontal {
                    src.get_pixel(i, line)
                } else {
                    src.get_pixel(line, i)
                };
                [p[0] as u32, p[1] as u32, p[2] as u32]
            };
            let mut sum = [0u32; 3];
            for i in -r..=r {
                let p = at(i);
                for c in 0..3 {
                    sum[c] += p[c];
                }
            }
            let n = (2 * r + 1) as u32;
            for i in 0..len as i64 {
                let px = Rgb([(sum[0] / n) as u8, (sum[1] / n) as u8, (sum[2] / n) as u8]);
                if horizontal {
                    out.put_pixel(i as u32, line, px);
                } else {
                    out.put_pixel(line, i as u32, px);
                }
                let (add, sub) = (at(i + r + 1), at(i - r));
                for c in 0..3 {
                    sum[c] = sum[c] + add[c] - sub[c];
                }
            }
        }
        out
    };
    let horizontal = pass(img, true);
    *img = pass(&horizontal, false);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checker(w: u32, h: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| {
            if (x / 2 + y / 2) % 2 == 0 {
                Rgb([255, 255, 255])
            } else {
                Rgb([0, 0, 0])
            }
        })
    }

    fn contrast(img: &RgbImage, x0: u32, y0: u32, x1: u32, y1: u32) -> u8 {
        let mut lo = 255u8;
        let mut hi = 0u8;
        for y in y0..y1 {
            for x in x0..x1 {
                let v = img.get_pixel(x, y)[0];
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
        hi - lo
    }

    #[test]
    fn detail_is_gone_inside_and_untouched_outside() {
        let mut img = checker(200, 200);
        let plan = BlurPlan {
            faces: vec![FracRect {
                x: 0.25,
                y: 0.25,
                w: 0.2,
                h: 0.2,
            }],
            regions: vec![FracRect {
                x: 0.7,
                y: 0.7,
                w: 0.2,
                h: 0.1,
            }],
            expand: DEFAULT_EXPAND,
        };
        apply(&mut img, &plan);
        // The checkerboard's full contrast is gone at the face's centre and in the region.
        assert!(
            contrast(&img, 65, 65, 75, 75) < 40,
            "face centre keeps detail"
        );
        assert!(
            contrast(&img, 142, 142, 178, 158) < 40,
            "region keeps detail"
        );
        // Far away, and just outside the drawn region, pixels are untouched.
        assert_eq!(contrast(&img, 0, 0, 20, 20), 255);
        assert_eq!(contrast(&img, 136, 150, 140, 154), 255);
        // The grown ellipse covers beyond the tight box (35 % wider: 40 → 54 px).
        assert!(contrast(&img, 46, 68, 49, 72) < 255, "expansion missing");
        // Its corners (outside the ellipse) are untouched.
        assert_eq!(contrast(&img, 43, 43, 46, 46), 255);
    }

    #[test]
    fn regions_at_and_past_the_edge_are_safe() {
        let mut img = checker(50, 40);
        apply(
            &mut img,
            &BlurPlan {
                faces: vec![FracRect {
                    x: 0.9,
                    y: 0.9,
                    w: 0.3,
                    h: 0.3,
                }],
                regions: vec![FracRect {
                    x: 0.0,
                    y: 0.0,
                    w: 1.0,
                    h: 1.0,
                }],
                expand: 0.4,
            },
        );
        assert!(contrast(&img, 0, 0, 50, 40) < 255);
    }
}
