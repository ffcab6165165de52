//! Rectangles as fractions of an image's width and height.

use serde::{Deserialize, Serialize};

/// An axis-aligned rectangle in fractions of the image (0..1 on both axes).
///
/// Faces and manual blur regions are stored this way so that any file derived from the
/// same pixels (any size) can be blurred from them without detecting again.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FracRect {
    /// Left edge.
    pub x: f32,
    /// Top edge.
    pub y: f32,
    /// Width.
    pub w: f32,
    /// Height.
    pub h: f32,
}

impl FracRect {
    /// From a pixel box `[x1, y1, x2, y2]` in an image of `width` × `height`.
    pub fn from_pixels(b: [f32; 4], width: u32, height: u32) -> FracRect {
        let (wf, hf) = (width as f32, height as f32);
        let x1 = b[0].clamp(0.0, wf);
        let y1 = b[1].clamp(0.0, hf);
        let x2 = b[2].clamp(0.0, wf);
        let y2 = b[3].clamp(0.0, hf);
        FracRect {
            x: x1 / wf,
            y: y1 / hf,
            w: (x2 - x1).max(0.0) / wf,
            h: (y2 - y1).max(0.0) / hf,
        }
    }

    /// Pixel box `[x1, y1, x2, y2]` in an image of `width` × `height`.
    pub fn to_pixels(&self, width: u32, height: u32) -> [f32; 4] {
        let (wf, hf) = (width as f32, height as f32);
        [
            self.x * wf,
            self.y * hf,
            (self.x + self.w) * wf,
            (self.y + self.h) * hf,
        ]
    }

    /// Why this rectangle is not a usable region, if it is not: every field finite,
    /// inside 0..1, with a positive area.
    pub fn problem(&self) -> Option<String> {
        let fields = [self.x, self.y, self.w, self.h];
        if fields.iter().any(|v| !v.is_finite()) {
            return Some("has a value that is not a finite number".into());
        }
        if self.x < 0.0 || self.y < 0.0 || self.x > 1.0 || self.y > 1.0 {
            return Some("starts outside the image (x and y must be within 0..1)".into());
        }
        if self.w <= 0.0 || self.h <= 0.0 {
            return Some("has no area (w and h must be > 0)".into());
        }
        if self.x + self.w > 1.0 + 1e-6 || self.y + self.h > 1.0 + 1e-6 {
            return Some("reaches past the image (x + w and y + h must be <= 1)".into());
        }
        None
    }

    /// Intersection over union with another rectangle.
    pub fn iou(&self, o: &FracRect) -> f32 {
        iou_px(
            [self.x, self.y, self.x + self.w, self.y + self.h],
            [o.x, o.y, o.x + o.w, o.y + o.h],
        )
    }
}

/// Intersection over union of two `[x1, y1, x2, y2]` boxes.
pub fn iou_px(a: [f32; 4], b: [f32; 4]) -> f32 {
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    let union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
    if union <= 0.0 { 0.0 } else { inter / union }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pixels_round_trip_and_clamp() {
        let r = FracRect::from_pixels([10.0, 20.0, 110.0, 70.0], 200, 100);
        assert_eq!(
            r,
            FracRect {
                x: 0.05,
                y: 0.2,
                w: 0.5,
                h: 0.5
            }
        );
        assert_eq!(r.to_pixels(400, 200), [20.0, 40.0, 220.0, 140.0]);
        let c = FracRect::from_pixels([-5.0, -5.0, 300.0, 50.0], 200, 100);
        assert_eq!((c.x, c.y, c.w), (0.0, 0.0, 1.0));
        assert!(c.problem().is_none());
    }

    #[test]
    fn problems_are_named() {
        let bad = FracRect {
            x: 0.9,
            y: 0.1,
            w: 0.2,
            h: 0.1,
        };
        assert!(bad.problem().unwrap().contains("past the image"));
        let nan = FracRect {
            x: f32::NAN,
            y: 0.1,
            w: 0.2,
            h: 0.1,
        };
        assert!(nan.problem().unwrap().contains("finite"));
        let empty = FracRect {
            x: 0.1,
            y: 0.1,
            w: 0.0,
            h: 0.1,
        };
        assert!(empty.problem().unwrap().contains("no area"));
    }

    #[test]
    fn iou_of_same_and_disjoint() {
        assert!((iou_px([0., 0., 2., 2.], [0., 0., 2., 2.]) - 1.0).abs() < 1e-6);
        assert_eq!(iou_px([0., 0., 1., 1.], [2., 2., 3., 3.]), 0.0);
        assert!((iou_px([0., 0., 2., 2.], [1., 0., 3., 2.]) - 1.0 / 3.0).abs() < 1e-6);
    }
}
