//! How much detail a face shows: the variance of the Laplacian of its aligned 112 × 112
//! crop (the embedder's own input), in grey levels squared. A face blurred (out of focus,
//! shaken, or a photo of a face that was already blurred) has lost the fine edges the
//! embedder recognises people by, and its Laplacian is flat.
//!
//! Measured on the aligned crop rather than the photo so that the figure does not depend
//! on how large the face is in its photo: every face is brought to the same scale first.

use image::RgbImage;

/// The variance of the 4-neighbour Laplacian of the aligned crop's luma, over the pixels
/// that come from the photo (the alignment leaves black where the crop passes the
/// photo's edge; those and their neighbours are left out).
pub fn sharpness(aligned: &RgbImage) -> f32 {
    let (w, h) = aligned.dimensions();
    let luma = |x: u32, y: u32| {
        let p = aligned.get_pixel(x, y).0;
        0.299 * p[0] as f32 + 0.587 * p[1] as f32 + 0.114 * p[2] as f32
    };
    let outside = |x: u32, y: u32| aligned.get_pixel(x, y).0 == [0, 0, 0];
    let (mut n, mut sum, mut sum2) = (0f64, 0f64, 0f64);
    for y in 1..h.saturating_sub(1) {
        for x in 1..w.saturating_sub(1) {
            if [(x, y), (x - 1, y), (x + 1, y), (x, y - 1), (x, y + 1)]
                .iter()
                .any(|&(a, b)| outside(a, b))
            {
                continue;
            }
            let l = luma(x - 1, y) + luma(x + 1, y) + luma(x, y - 1) + luma(x, y + 1)
                - 4.0 * luma(x, y);
            n += 1.0;
            sum += l as f64;
            sum2 += (l as f64) * (l as f64);
        }
    }
    if n < 1.0 {
        return 0.0;
    }
    let mean = sum / n;
    (sum2 / n - mean * mean).max(0.0) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blurred_face_has_less_detail_than_the_face() {
        let mut img = RgbImage::new(112, 112);
        for (x, y, p) in img.enumerate_pixels_mut() {
            let v = if (x / 4 + y / 4) % 2 == 0 { 200 } else { 40 };
            *p = image::Rgb([v, v, v]);
        }
        let sharp = sharpness(&img);
        let blurred = sharpness(&image::imageops::blur(&img, 3.0));
        assert!(sharp > 10.0 * blurred, "{sharp} vs {blurred}");
        // Flat grey: no detail at all; all black: nothing from the photo.
        assert_eq!(
            sharpness(&RgbImage::from_pixel(112, 112, image::Rgb([90, 90, 90]))),
            0.0
        );
        assert_eq!(sharpness(&RgbImage::new(112, 112)), 0.0);
    }
}
