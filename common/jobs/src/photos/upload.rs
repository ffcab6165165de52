//! Accepting an upload: size, type, dimensions, decompression bombs and truncation are
//! checked from the bytes before anything is decoded, then the pixels are decoded with
//! allocation limits. Every refusal names the file and says what to do.
//!
//! Pixels are read as stored: no EXIF orientation is applied (uploads are upright
//! already, and boxes and blur regions are fractions of the stored pixels).

use image::{ImageFormat, ImageReader, Limits, RgbImage};
use std::io::Cursor;

/// Largest upload accepted, in bytes.
pub const MAX_BYTES: u64 = 100 << 20;
/// Largest photo accepted, in pixels (a 108 MP phone sensor is 12000 × 9000).
pub const MAX_PIXELS: u64 = 120_000_000;

/// An accepted upload's pixels.
#[derive(Debug)]
pub struct Decoded {
    /// 8-bit RGB (grey, alpha, CMYK and 16-bit inputs are converted).
    pub rgb: RgbImage,
    /// `jpeg` or `png`.
    pub format: &'static str,
}

/// Check and decode `bytes` (the upload `name`).
pub fn decode(name: &str, bytes: &[u8]) -> Result<Decoded, String> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(format!(
            "`{name}` is {} MiB, more than the {} MiB accepted; upload a smaller export",
            bytes.len() >> 20,
            MAX_BYTES >> 20
        ));
    }
    let (w, h) = crate::image_check::check(name, bytes, MAX_PIXELS)?;
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| format!("`{name}` cannot be read: {e}"))?;
    let format = match reader.format() {
        Some(ImageFormat::Jpeg) => "jpeg",
        Some(ImageFormat::Png) => "png",
        Some(other) => {
            return Err(format!(
                "`{name}` is {other:?}; photos must be JPEG or PNG, convert it first"
            ));
        }
        None => return Err(format!("`{name}` is not a JPEG or PNG image")),
    };
    let mut limits = Limits::default();
    limits.max_image_width = Some(w as u32);
    limits.max_image_height = Some(h as u32);
    // Room for the decoded image at 16 bits per channel with alpha, and no more.
    limits.max_alloc = Some((w * h * 8).max(1 << 20));
    let mut reader = reader;
    reader.limits(limits);
    let img = reader
        .decode()
        .map_err(|e| format!("`{name}` is a damaged {format} ({e}); re-export or re-copy it"))?;
    if (img.width() as u64, img.height() as u64) != (w, h) {
        return Err(format!(
            "`{name}` declares {w}x{h} pixels but decodes to {}x{}; re-export it",
            img.width(),
            img.height()
        ));
    }
    Ok(Decoded {
        rgb: img.to_rgb8(),
        format,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let mut out = Vec::new();
        RgbImage::from_pixel(w, h, image::Rgb([10, 200, 30]))
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .unwrap();
        out
    }

    #[test]
    fn hostile_uploads_are_refused_with_the_file_named() {
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("empty.jpg", vec![], "empty"),
            (
                "notes.jpg",
                b"just some text, honestly".to_vec(),
                "not an image",
            ),
            (
                "cut.jpg",
                {
                    let mut b = Vec::new();
                    RgbImage::from_pixel(64, 64, image::Rgb([1, 2, 3]))
                        .write_to(&mut Cursor::new(&mut b), ImageFormat::Jpeg)
                        .unwrap();
                    b.truncate(b.len() / 2);
                    b
                },
                "truncated",
            ),
        ];
        for (name, bytes, why) in cases {
            let e = decode(name, &bytes).unwrap_err();
            assert!(e.contains(name) && e.contains(why), "{name}: {e}");
        }
        // A PNG whose header claims 60000 x 60000 (the IHDR is patched; the CRC no
        // longer matches, which does not matter: the size is refused first).
        let mut big = png(8, 8);
        big[16..20].copy_from_slice(&60000u32.to_be_bytes());
        big[20..24].copy_from_slice(&60000u32.to_be_bytes());
        let e = decode("huge.png", &big).unwrap_err();
        assert!(e.contains("huge.png") && e.contains("60000x60000"), "{e}");
    }

    #[test]
    fn grey_and_sixteen_bit_pngs_decode_to_rgb() {
        let mut out = Vec::new();
        image::ImageBuffer::<image::Luma<u16>, _>::from_pixel(5, 4, image::Luma([40000u16]))
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .unwrap();
        let d = decode("deep.png", &out).unwrap();
        assert_eq!((d.rgb.width(), d.rgb.height(), d.format), (5, 4, "png"));
        assert_eq!(d.rgb.get_pixel(0, 0).0, [156, 156, 156]);
        assert_eq!(
            decode("ok.png", &png(3, 2)).unwrap().rgb.get_pixel(1, 1).0,
            [10, 200, 30]
        );
    }
}
