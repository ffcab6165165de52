//! EXIF orientation: how the stored pixels must be turned to show what a viewer shows.
//!
//! Phones store a portrait shot with its pixels sideways and an `Orientation` tag (6 or
//! 8) that every viewer applies. Everything Tessera decides about a photo (faces, blur
//! regions, the published file) is about the *displayed* image, so the tag is applied at
//! decode and never again; published files are written upright with no tag.

use image::metadata::Orientation as PixelTurn;
use serde::{Deserialize, Serialize};
use tessera_core::geometry::FracRect;

/// One of the eight EXIF orientations (the value of tag 0x0112).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Orientation(u8);

impl Default for Orientation {
    fn default() -> Self {
        Orientation::UPRIGHT
    }
}

impl Orientation {
    /// Stored as displayed (1).
    pub const UPRIGHT: Orientation = Orientation(1);

    /// The orientation of tag value `v`; values outside 1..=8 are treated as upright,
    /// as viewers do.
    pub fn from_exif(v: u32) -> Orientation {
        if (1..=8).contains(&v) {
            Orientation(v as u8)
        } else {
            Orientation::UPRIGHT
        }
    }

    /// The EXIF value, 1..=8.
    pub fn exif(self) -> u8 {
        self.0
    }

    /// The orientation that undoes this one (quarter turns swap; flips, the half turn,
    /// transpose and transverse undo themselves).
    pub fn inverse(self) -> Orientation {
        match self.0 {
            6 => Orientation(8),
            8 => Orientation(6),
            v => Orientation(v),
        }
    }

    /// Whether the stored pixels must be changed to show the photo.
    pub fn is_upright(self) -> bool {
        self.0 == 1
    }

    /// Whether width and height swap between the stored and the displayed image.
    pub fn swaps_axes(self) -> bool {
        self.0 >= 5
    }

    /// The displayed size of a stored `w × h` image.
    pub fn displayed_size(self, w: u32, h: u32) -> (u32, u32) {
        if self.swaps_axes() { (h, w) } else { (w, h) }
    }

    /// The `image` crate's transform for these pixels.
    pub fn pixel_turn(self) -> PixelTurn {
        PixelTurn::from_exif(self.0).unwrap_or(PixelTurn::NoTransforms)
    }

    /// Where the stored-image point `(u, v)` (fractions of the stored width and height)
    /// lands in the displayed image, in fractions of the displayed width and height.
    pub fn map_point(self, u: f32, v: f32) -> (f32, f32) {
        match self.0 {
            2 => (1.0 - u, v),
            3 => (1.0 - u, 1.0 - v),
            4 => (u, 1.0 - v),
            5 => (v, u),
            6 => (1.0 - v, u),
            7 => (1.0 - v, 1.0 - u),
            8 => (v, 1.0 - u),
            _ => (u, v),
        }
    }

    /// A rectangle of the stored image as a rectangle of the displayed one: how rows
    /// written before orientation was applied (boxes and regions in stored pixels) are
    /// migrated.
    pub fn map_rect(self, r: FracRect) -> FracRect {
        let (ax, ay) = self.map_point(r.x, r.y);
        let (bx, by) = self.map_point(r.x + r.w, r.y + r.h);
        FracRect {
            x: ax.min(bx),
            y: ay.min(by),
            w: (ax - bx).abs(),
            h: (ay - by).abs(),
        }
    }
}

/// Apply `o` to `img`: the stored pixels become the displayed ones.
pub fn apply(img: image::DynamicImage, o: Orientation) -> image::DynamicImage {
    let mut img = img;
    img.apply_orientation(o.pixel_turn());
    img
}

/// The pixels a camera stores for the upright `img` when it tags them with `o`: what
/// test photos are made of.
pub fn stored_for(img: &image::RgbImage, o: Orientation) -> image::RgbImage {
    apply(image::DynamicImage::ImageRgb8(img.clone()), o.inverse()).into_rgb8()
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{DynamicImage, Rgb, RgbImage};

    /// A 40 × 30 image, black but for a white block at x 4..12, y 6..10.
    fn marked() -> (RgbImage, FracRect) {
        let mut img = RgbImage::new(40, 30);
        for y in 6..10 {
            for x in 4..12 {
                img.put_pixel(x, y, Rgb([255, 255, 255]));
            }
        }
        let r = FracRect {
            x: 4.0 / 40.0,
            y: 6.0 / 30.0,
            w: 8.0 / 40.0,
            h: 4.0 / 30.0,
        };
        (img, r)
    }

    /// The white block's bounding box in fractions.
    fn white_box(img: &RgbImage) -> FracRect {
        let (mut x0, mut y0, mut x1, mut y1) = (u32::MAX, u32::MAX, 0, 0);
        for (x, y, p) in img.enumerate_pixels() {
            if p.0[0] > 128 {
                x0 = x0.min(x);
                y0 = y0.min(y);
                x1 = x1.max(x + 1);
                y1 = y1.max(y + 1);
            }
        }
        let (w, h) = (img.width() as f32, img.height() as f32);
        FracRect {
            x: x0 as f32 / w,
            y: y0 as f32 / h,
            w: (x1 - x0) as f32 / w,
            h: (y1 - y0) as f32 / h,
        }
    }

    #[test]
    fn rectangles_follow_the_pixels_for_all_eight_orientations() {
        let (img, r) = marked();
        for v in 1..=8 {
            let o = Orientation::from_exif(v);
            let turned = apply(DynamicImage::ImageRgb8(img.clone()), o).to_rgb8();
            assert_eq!(
                turned.dimensions(),
                o.displayed_size(40, 30),
                "orientation {v}"
            );
            let want = white_box(&turned);
            let got = o.map_rect(r);
            for (a, b) in [
                (got.x, want.x),
                (got.y, want.y),
                (got.w, want.w),
                (got.h, want.h),
            ] {
                assert!((a - b).abs() < 1e-5, "orientation {v}: {got:?} != {want:?}");
            }
        }
    }

    #[test]
    fn stored_pixels_tagged_with_their_orientation_come_back_upright() {
        let (img, _) = marked();
        for v in 1..=8 {
            let o = Orientation::from_exif(v);
            let back = apply(DynamicImage::ImageRgb8(stored_for(&img, o)), o).to_rgb8();
            assert_eq!(back, img, "orientation {v}");
        }
    }

    #[test]
    fn unknown_values_are_upright() {
        for v in [0, 9, 255, 65535] {
            assert!(Orientation::from_exif(v).is_upright());
        }
        assert!(Orientation::from_exif(6).swaps_axes());
        assert!(!Orientation::from_exif(3).swaps_axes());
    }
}
