//! HEIF/HEIC (the iPhone default), through libheif (built into the binary from the
//! source the `libheif-sys` crate ships, HEVC by Debian's libde265).
//!
//! In HEIF the container's own transforms (`irot`, `imir`, `clap`) say how the image is
//! shown, and the EXIF orientation is informational (HEIF/MIAF: readers ignore it). libheif
//! applies those transforms while decoding; the EXIF orientation an iPhone also writes
//! repeats the `irot` and must not be applied a second time, and one written by a tool
//! that set no `irot` is ignored as every conforming viewer ignores it. The orientation
//! reported is an estimate of what libheif applied (a quarter turn when the axes swapped;
//! the EXIF value when it agrees), kept for the record only.
//!
//! A build without the `heif` feature refuses HEIF by name: never published unprocessed.

use crate::Refused;
use crate::decode::Decoded;

#[cfg(feature = "heif")]
pub(crate) fn decode(name: &str, bytes: &[u8], stored: (u64, u64)) -> Result<Decoded, Refused> {
    use crate::orient::Orientation;
    use libheif_rs::{ColorSpace, HeifContext, ItemId, LibHeif, RgbChroma};
    use std::sync::OnceLock;

    static LIB: OnceLock<LibHeif> = OnceLock::new();
    let lib = LIB.get_or_init(LibHeif::new);
    let damaged = |e: libheif_rs::HeifError| {
        Refused(format!(
            "`{name}` is a damaged HEIF ({e}); re-export it from the phone or convert it to JPEG"
        ))
    };
    let ctx = HeifContext::read_from_bytes(bytes).map_err(damaged)?;
    let handle = ctx.primary_image_handle().map_err(damaged)?;
    let (w, h) = (handle.width(), handle.height());
    if u64::from(w) * u64::from(h) > stored.0 * stored.1 + stored.0 + stored.1 {
        return Err(Refused(format!(
            "`{name}` declares {}x{} pixels but its image is {w}x{h}; re-export it",
            stored.0, stored.1
        )));
    }
    let mut ids: [ItemId; 1] = [0];
    let exif = if handle.metadata_block_ids(&mut ids, b"Exif") > 0 {
        // The block starts with a 4-byte big-endian offset to the TIFF header.
        handle.metadata(ids[0]).ok().and_then(|raw| {
            let off = u32::from_be_bytes(raw.get(..4)?.try_into().ok()?) as usize;
            raw.get(4 + off..).map(<[u8]>::to_vec)
        })
    } else {
        None
    };
    let icc = handle.color_profile_raw().map(|p| p.data);
    let img = lib
        .decode(&handle, ColorSpace::Rgb(RgbChroma::Rgb), None)
        .map_err(damaged)?;
    let planes = img.planes();
    let plane = planes.interleaved.ok_or_else(|| {
        Refused(format!(
            "`{name}`: libheif returned no RGB plane; convert it to JPEG"
        ))
    })?;
    let (pw, ph) = (plane.width as usize, plane.height as usize);
    let mut rgb = Vec::with_capacity(pw * ph * 3);
    for row in 0..ph {
        let s = row * plane.stride;
        rgb.extend_from_slice(&plane.data[s..s + pw * 3]);
    }
    let rgb = image::RgbImage::from_raw(pw as u32, ph as u32, rgb)
        .ok_or_else(|| Refused(format!("`{name}`: decoded HEIF has a bad size")))?;
    let exif_o = exif.as_deref().and_then(crate::decode::exif_orientation);
    let swapped = (stored.0, stored.1) != (pw as u64, ph as u64) && stored.0 != stored.1;
    let orientation = match exif_o {
        Some(o) if swapped && o.swaps_axes() => o,
        _ if swapped => Orientation::from_exif(6),
        _ => Orientation::UPRIGHT,
    };
    Ok(Decoded {
        rgb,
        format: crate::decode::Format::Heif,
        orientation,
        stored: (stored.0 as u32, stored.1 as u32),
        icc,
        exif,
    })
}

#[cfg(not(feature = "heif"))]
pub(crate) fn decode(name: &str, _bytes: &[u8], _stored: (u64, u64)) -> Result<Decoded, Refused> {
    Err(Refused(format!(
        "`{name}` is HEIF/HEIC, which this build does not decode; convert it to JPEG (on an iPhone: Settings > Camera > Formats > Most Compatible)"
    )))
}
