//! Writing published files: upright JPEG with the source's colour profile and no other
//! metadata unless a project chose to keep some ([`crate::metadata`]). A file written here
//! has no orientation tag, no GPS, no serial numbers, no XMP and no embedded preview (a
//! preview would show the unblurred face).

use crate::Refused;
use image::codecs::jpeg::JpegEncoder;
use image::{ImageEncoder, RgbImage};

/// JPEG quality of written files.
pub const JPEG_QUALITY: u8 = 90;

/// JPEG bytes of `img`, carrying `icc` when given and `exif` (a TIFF block from
/// [`crate::metadata::kept_exif`]) when given.
pub fn jpeg(img: &RgbImage, icc: Option<&[u8]>, exif: Option<&[u8]>) -> Result<Vec<u8>, Refused> {
    let mut out = Vec::new();
    let mut enc = JpegEncoder::new_with_quality(&mut out, JPEG_QUALITY);
    if let Some(p) = icc {
        enc.set_icc_profile(p.to_vec())
            .map_err(|e| Refused(format!("the colour profile cannot be written: {e}")))?;
    }
    enc.write_image(
        img.as_raw(),
        img.width(),
        img.height(),
        image::ExtendedColorType::Rgb8,
    )
    .map_err(|e| Refused(format!("encoding JPEG: {e}")))?;
    if let Some(tiff) = exif {
        out = insert_exif(&out, tiff);
    }
    Ok(out)
}

/// `jpeg` with an APP1 `Exif` segment right after its SOI marker.
fn insert_exif(jpeg: &[u8], tiff: &[u8]) -> Vec<u8> {
    let len = tiff.len() + 6 + 2;
    if len > u16::MAX as usize {
        return jpeg.to_vec();
    }
    let mut out = Vec::with_capacity(jpeg.len() + len + 2);
    out.extend_from_slice(&jpeg[..2]);
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(b"Exif\0\0");
    out.extend_from_slice(tiff);
    out.extend_from_slice(&jpeg[2..]);
    out
}
