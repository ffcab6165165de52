//! Aligning a face to the ArcFace 5-point template before embedding, as OpenCV's
//! `FaceRecognizerSF::alignCrop` does: a least-squares similarity transform (rotation,
//! uniform scale, translation; Umeyama without reflection) from the detector's
//! landmarks to the template, then a bilinear warp into 112 × 112.

use image::{Rgb, RgbImage};

/// Side of the aligned crop.
pub const SIZE: u32 = 112;

/// Where the five landmarks sit in the 112 × 112 crop.
pub const TEMPLATE: [[f32; 2]; 5] = [
    [38.2946, 51.6963],
    [73.5318, 51.5014],
    [56.0252, 71.7366],
    [41.5493, 92.3655],
    [70.7299, 92.2041],
];

/// A similarity transform `p' = [a -b; b a] p + t`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Similarity {
    /// Scale × cos(angle).
    pub a: f32,
    /// Scale × sin(angle).
    pub b: f32,
    /// Translation x.
    pub tx: f32,
    /// Translation y.
    pub ty: f32,
}

impl Similarity {
    /// The least-squares similarity taking `src` onto `dst`.
    pub fn fit(src: &[[f32; 2]; 5], dst: &[[f32; 2]; 5]) -> Similarity {
        let n = src.len() as f64;
        let mean = |p: &[[f32; 2]; 5]| {
            let (sx, sy) = p
                .iter()
                .fold((0f64, 0f64), |(x, y), q| (x + q[0] as f64, y + q[1] as f64));
            (sx / n, sy / n)
        };
        let (msx, msy) = mean(src);
        let (mdx, mdy) = mean(dst);
        let (mut num_a, mut num_b, mut den) = (0f64, 0f64, 0f64);
        for (s, d) in src.iter().zip(dst) {
            let (sx, sy) = (s[0] as f64 - msx, s[1] as f64 - msy);
            let (dx, dy) = (d[0] as f64 - mdx, d[1] as f64 - mdy);
            num_a += sx * dx + sy * dy;
            num_b += sx * dy - sy * dx;
            den += sx * sx + sy * sy;
        }
        let (a, b) = if den > 1e-12 {
            (num_a / den, num_b / den)
        } else {
            (1.0, 0.0)
        };
        Similarity {
            a: a as f32,
            b: b as f32,
            tx: (mdx - (a * msx - b * msy)) as f32,
            ty: (mdy - (b * msx + a * msy)) as f32,
        }
    }

    /// Apply to a point.
    pub fn apply(&self, p: [f32; 2]) -> [f32; 2] {
        [
            self.a * p[0] - self.b * p[1] + self.tx,
            self.b * p[0] + self.a * p[1] + self.ty,
        ]
    }

    /// The inverse transform.
    pub fn inverse(&self) -> Similarity {
        let det = self.a * self.a + self.b * self.b;
        let (a, b) = (self.a / det, -self.b / det);
        Similarity {
            a,
            b,
            tx: -(a * self.tx - b * self.ty),
            ty: -(b * self.tx + a * self.ty),
        }
    }
}

/// The 112 × 112 aligned face (black outside the image).
pub fn crop(img: &RgbImage, landmarks: &[[f32; 2]; 5]) -> RgbImage {
    let back = Similarity::fit(landmarks, &TEMPLATE).inverse();
    let mut out = RgbImage::new(SIZE, SIZE);
    for (u, v, px) in out.enumerate_pixels_mut() {
        let [x, y] = back.apply([u as f32, v as f32]);
        *px = bilinear(img, x, y);
    }
    out
}

fn bilinear(img: &RgbImage, x: f32, y: f32) -> Rgb<u8> {
    let (w, h) = (img.width() as i64, img.height() as i64);
    let (x0, y0) = (x.floor(), y.floor());
    let (fx, fy) = (x - x0, y - y0);
    let (x0, y0) = (x0 as i64, y0 as i64);
    let at = |xi: i64, yi: i64| -> [f32; 3] {
        if xi < 0 || yi < 0 || xi >= w || yi >= h {
            [0.0; 3]
        } else {
            let p = img.get_pixel(xi as u32, yi as u32).0;
            [p[0] as f32, p[1] as f32, p[2] as f32]
        }
    };
    let (p00, p10, p01, p11) = (
        at(x0, y0),
        at(x0 + 1, y0),
        at(x0, y0 + 1),
        at(x0 + 1, y0 + 1),
    );
    let mut o = [0u8; 3];
    for c in 0..3 {
        let top = p00[c] * (1.0 - fx) + p10[c] * fx;
        let bottom = p01[c] * (1.0 - fx) + p11[c] * fx;
        o[c] = (top * (1.0 - fy) + bottom * fy).round().clamp(0.0, 255.0) as u8;
    }
    Rgb(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_known_similarity() {
        let truth = Similarity {
            a: 0.8 * 20f32.to_radians().cos(),
            b: 0.8 * 20f32.to_radians().sin(),
            tx: 12.0,
            ty: -7.0,
        };
        let src = [[10., 10.], [50., 12.], [30., 30.], [15., 50.], [45., 52.]];
        let dst = src.map(|p| truth.apply(p));
        let got = Similarity::fit(&src, &dst);
        for (g, t) in [got.a, got.b, got.tx, got.ty]
            .iter()
            .zip([truth.a, truth.b, truth.tx, truth.ty])
        {
            assert!((g - t).abs() < 1e-3, "{got:?} vs {truth:?}");
        }
        let round = got.inverse().apply(got.apply([3.0, 4.0]));
        assert!((round[0] - 3.0).abs() < 1e-3 && (round[1] - 4.0).abs() < 1e-3);
    }

    #[test]
    fn crop_of_template_landmarks_is_identity() {
        let mut img = RgbImage::new(112, 112);
        for (x, y, p) in img.enumerate_pixels_mut() {
            *p = Rgb([x as u8, y as u8, 7]);
        }
        let out = crop(&img, &TEMPLATE);
        assert_eq!(out.get_pixel(40, 60), img.get_pixel(40, 60));
    }
}
