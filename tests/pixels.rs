//! Looking at pictures in the photo tests: load one, and compare two inside a box.

use image::RgbImage;
use std::path::Path;
use tessera_core::geometry::FracRect;

/// A picture file as 8-bit RGB.
pub fn load(p: &Path) -> RgbImage {
    image::open(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .to_rgb8()
}

/// Mean absolute difference of two images inside a box (fractions), its 2 px border left
/// out.
pub fn diff_in(a: &RgbImage, b: &RgbImage, r: &FracRect) -> f64 {
    let [x1, y1, x2, y2] = r.to_pixels(a.width(), a.height());
    let (mut sum, mut n) = (0f64, 0f64);
    for y in (y1 as u32 + 2)..(y2 as u32).saturating_sub(2) {
        for x in (x1 as u32 + 2)..(x2 as u32).saturating_sub(2) {
            for c in 0..3 {
                sum += (a.get_pixel(x, y)[c] as f64 - b.get_pixel(x, y)[c] as f64).abs();
            }
            n += 3.0;
        }
    }
    sum / n.max(1.0)
}
