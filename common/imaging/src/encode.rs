//! Writing published files: upright JPEG with the source's colour profile and no other
//! metadata unless a project chose to keep some ([`crate::metadata`]). A file written here
//! has no orientation tag, no GPS, no serial numbers, no XMP and no embedded preview (a
//! preview would show the unblurred face).

use crate::Refused;
use image::RgbImage;
use jpeg_encoder::{ColorType, Encoder, SamplingFactor};

/// JPEG quality of written files.
pub const JPEG_QUALITY: u8 = 90;

/// JPEG bytes of `img`, carrying `icc` when given and `exif` (a TIFF block from
/// [`crate::metadata::kept_exif`]) when given.
///
/// Written by `jpeg-encoder` (colour conversion and DCT in AVX2 where the CPU has it,
/// chosen at run time), with chroma at half resolution both ways (4:2:0, what phone
/// cameras write): every published photo and thumbnail is encoded here, and `image`'s
/// own encoder took about a sixth of a photo's whole processing time.
pub fn jpeg(img: &RgbImage, icc: Option<&[u8]>, exif: Option<&[u8]>) -> Result<Vec<u8>, Refused> {
    let (w, h) = img.dimensions();
    let (Ok(w16), Ok(h16)) = (u16::try_from(w), u16::try_from(h)) else {
        return Err(Refused(format!(
            "a JPEG is at most 65,535 pixels a side, and this image is {w} × {h}"
        )));
    };
    let mut out = Vec::with_capacity(img.as_raw().len() / 8);
    let mut enc = Encoder::new(&mut out, JPEG_QUALITY);
    enc.set_sampling_factor(SamplingFactor::R_4_2_0);
    if let Some(p) = icc {
        enc.add_icc_profile(p)
            .map_err(|e| Refused(format!("the colour profile cannot be written: {e}")))?;
    }
    enc.encode(img.as_raw(), w16, h16, ColorType::Rgb)
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
