//! The one decode path for photos: size, type, dimensions, decompression bombs and
//! truncation are checked from the bytes before anything is decoded; the pixels are
//! decoded with allocation limits; the EXIF orientation is applied, so the result is what
//! a viewer shows. Every refusal names the file and says what to do.

use crate::Refused;
use crate::orient::{self, Orientation};
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits, RgbImage};
use serde::{Deserialize, Serialize};
use std::io::Cursor;

/// Largest upload accepted, in bytes.
pub const MAX_BYTES: u64 = 100 << 20;
/// Largest photo accepted, in pixels (a 108 MP phone sensor is 12000 × 9000).
pub const MAX_PIXELS: u64 = 120_000_000;

/// The photo formats Tessera decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// JPEG (what most cameras and Android phones write).
    Jpeg,
    /// PNG.
    Png,
    /// WebP (lossy or lossless).
    Webp,
    /// HEIF/HEIC (the iPhone default).
    Heif,
}

impl Format {
    /// The name used in records and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Jpeg => "jpeg",
            Format::Png => "png",
            Format::Webp => "webp",
            Format::Heif => "heif",
        }
    }
}

/// What the formats list says to a person whose file was refused.
pub const ACCEPTED: &str = "JPEG, PNG, WebP or HEIC/HEIF";

/// An accepted photo's pixels, upright.
#[derive(Debug)]
pub struct Decoded {
    /// 8-bit RGB as displayed (the orientation applied; grey, alpha, CMYK and 16-bit
    /// inputs are converted).
    pub rgb: RgbImage,
    /// The file's format.
    pub format: Format,
    /// The orientation the file declared (already applied to `rgb`).
    pub orientation: Orientation,
    /// Width and height of the pixels as stored, before the orientation.
    pub stored: (u32, u32),
    /// The embedded colour profile, kept in published files so colours do not shift.
    pub icc: Option<Vec<u8>>,
    /// The raw EXIF block, if any (for the metadata a project chose to keep).
    pub exif: Option<Vec<u8>>,
}

/// Check and decode `bytes` (the file `name`) into upright pixels.
pub fn decode(name: &str, bytes: &[u8]) -> Result<Decoded, Refused> {
    decode_with(name, bytes, MAX_PIXELS)
}

/// [`decode`] with another pixel limit.
pub fn decode_with(name: &str, bytes: &[u8], max_pixels: u64) -> Result<Decoded, Refused> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Refused(format!(
            "`{name}` is {} MiB, more than the {} MiB accepted; upload a smaller export",
            bytes.len() >> 20,
            MAX_BYTES >> 20
        )));
    }
    let (w, h) = crate::check::check(name, bytes, max_pixels)?;
    if matches!(
        imagesize::image_type(bytes),
        Ok(imagesize::ImageType::Heif(_))
    ) {
        return crate::heif::decode(name, bytes, (w, h));
    }
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| Refused(format!("`{name}` cannot be read: {e}")))?;
    let format = match reader.format() {
        Some(ImageFormat::Jpeg) => Format::Jpeg,
        Some(ImageFormat::Png) => Format::Png,
        Some(ImageFormat::WebP) => Format::Webp,
        Some(other) => {
            return Err(Refused(format!(
                "`{name}` is {}; photos must be {ACCEPTED}, convert it first",
                other.to_mime_type()
            )));
        }
        None => {
            return Err(Refused(format!(
                "`{name}` is not a {ACCEPTED} image; convert it first"
            )));
        }
    };
    let mut reader = reader;
    reader.limits(limits(w, h));
    let damaged = |e: image::ImageError| {
        Refused(format!(
            "`{name}` is a damaged {} ({e}); re-export or re-copy it",
            format.as_str()
        ))
    };
    let mut decoder = reader.into_decoder().map_err(damaged)?;
    // Metadata that cannot be read is treated as absent: the pixels decide.
    let icc = decoder.icc_profile().ok().flatten();
    let exif = decoder.exif_metadata().ok().flatten();
    let orientation = exif
        .as_deref()
        .and_then(exif_orientation)
        .unwrap_or_default();
    let img = DynamicImage::from_decoder(decoder).map_err(damaged)?;
    if (img.width() as u64, img.height() as u64) != (w, h) {
        return Err(Refused(format!(
            "`{name}` declares {w}x{h} pixels but decodes to {}x{}; re-export it",
            img.width(),
            img.height()
        )));
    }
    let stored = (img.width(), img.height());
    let rgb = orient::apply(img, orientation).into_rgb8();
    Ok(Decoded {
        rgb,
        format,
        orientation,
        stored,
        icc,
        exif,
    })
}

/// Room for the decoded image at 16 bits per channel with alpha, and no more.
pub(crate) fn limits(w: u64, h: u64) -> Limits {
    let mut limits = Limits::default();
    limits.max_image_width = Some(w as u32);
    limits.max_image_height = Some(h as u32);
    limits.max_alloc = Some((w * h * 8).max(1 << 20));
    limits
}

/// The orientation in a raw EXIF block (a TIFF structure, with or without the
/// `Exif\0\0` prefix JPEG puts before it).
pub fn exif_orientation(raw: &[u8]) -> Option<Orientation> {
    let tiff = raw.strip_prefix(b"Exif\0\0").unwrap_or(raw);
    let (fields, _) = exif::parse_exif(tiff).ok()?;
    let f = fields
        .iter()
        .find(|f| f.tag == exif::Tag::Orientation && f.ifd_num == exif::In::PRIMARY)?;
    Some(Orientation::from_exif(f.value.get_uint(0)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any bytes — or a real JPEG with bytes flipped — decode or are refused by
        /// name; EXIF readers never panic on them.
        #[test]
        fn hostile_bytes_are_refused_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), flips in proptest::collection::vec((0usize..4096, any::<u8>()), 0..8)) {
            let _ = exif_orientation(&bytes);
            let _ = crate::metadata::kept_exif(&bytes, crate::KeepMetadata::default());
            if let Err(Refused(why)) = decode("x.bin", &bytes) {
                prop_assert!(why.contains("x.bin"));
            }
            let mut jpeg = Vec::new();
            RgbImage::from_pixel(16, 16, image::Rgb([1, 2, 3]))
                .write_to(&mut Cursor::new(&mut jpeg), ImageFormat::Jpeg)
                .unwrap();
            for (at, b) in flips {
                let i = at % jpeg.len();
                jpeg[i] = b;
            }
            let _ = exif_orientation(&jpeg);
            let _ = decode("flipped.jpg", &jpeg);
        }
    }

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
            let e = decode(name, &bytes).unwrap_err().0;
            assert!(e.contains(name) && e.contains(why), "{name}: {e}");
        }
        // A PNG whose header claims 60000 x 60000 (the IHDR is patched; the CRC no
        // longer matches, which does not matter: the size is refused first).
        let mut big = png(8, 8);
        big[16..20].copy_from_slice(&60000u32.to_be_bytes());
        big[20..24].copy_from_slice(&60000u32.to_be_bytes());
        let e = decode("huge.png", &big).unwrap_err().0;
        assert!(e.contains("huge.png") && e.contains("60000x60000"), "{e}");
    }

    #[test]
    fn grey_sixteen_bit_and_webp_decode_to_rgb() {
        let mut out = Vec::new();
        image::ImageBuffer::<image::Luma<u16>, _>::from_pixel(5, 4, image::Luma([40000u16]))
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .unwrap();
        let d = decode("deep.png", &out).unwrap();
        assert_eq!(
            (d.rgb.width(), d.rgb.height(), d.format),
            (5, 4, Format::Png)
        );
        assert_eq!(d.rgb.get_pixel(0, 0).0, [156, 156, 156]);
        assert_eq!(
            decode("ok.png", &png(3, 2)).unwrap().rgb.get_pixel(1, 1).0,
            [10, 200, 30]
        );
        let mut webp = Vec::new();
        RgbImage::from_pixel(7, 5, image::Rgb([10, 200, 30]))
            .write_to(&mut Cursor::new(&mut webp), ImageFormat::WebP)
            .unwrap();
        let d = decode("phone.webp", &webp).unwrap();
        assert_eq!((d.rgb.dimensions(), d.format), ((7, 5), Format::Webp));
    }

    #[test]
    fn other_formats_are_refused_by_name() {
        let mut gif = b"GIF89a".to_vec();
        gif.extend_from_slice(&[4, 0, 4, 0, 0, 0, 0]);
        gif.extend_from_slice(&[0; 32]);
        let e = decode("anim.gif", &gif).unwrap_err().0;
        assert!(e.contains("anim.gif") && e.contains("gif"), "{e}");
    }
}
