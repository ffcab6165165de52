//! Deciding from its bytes whether a file is an image worth decoding: a known format, a
//! header with sane dimensions under a pixel limit (a decompression bomb declares huge
//! dimensions in a tiny file), and for JPEG an end-of-image marker after the scan (a
//! truncated JPEG otherwise decodes "successfully" into grey).

use crate::Refused;

/// Width and height from the header, or why the file is not accepted (naming it).
pub fn check(name: &str, bytes: &[u8], max_pixels: u64) -> Result<(u64, u64), Refused> {
    if bytes.is_empty() {
        return Err(Refused(format!("`{name}` is empty (0 bytes)")));
    }
    let kind = imagesize::image_type(bytes).map_err(|_| {
        Refused(format!(
            "`{name}` is not an image (unknown or damaged header)"
        ))
    })?;
    let size = imagesize::blob_size(bytes)
        .map_err(|e| Refused(format!("`{name}` has a damaged header: {e}")))?;
    let (w, h) = (size.width as u64, size.height as u64);
    if w == 0 || h == 0 {
        return Err(Refused(format!("`{name}` claims {w}x{h} pixels")));
    }
    if w.saturating_mul(h) > max_pixels {
        return Err(Refused(format!(
            "`{name}` claims {w}x{h} pixels, more than the {max_pixels} accepted; downscale it"
        )));
    }
    if matches!(kind, imagesize::ImageType::Jpeg) && !jpeg_complete(bytes) {
        return Err(Refused(format!(
            "`{name}` is a truncated JPEG (its image data has no end marker); re-copy or re-export it"
        )));
    }
    Ok((w, h))
}

/// Walk the JPEG's segments (skipping APPn blocks, whose embedded thumbnail has markers
/// of its own) to the first scan, then require the end-of-image marker after it: in
/// entropy-coded data `FF D9` can only be that marker.
fn jpeg_complete(b: &[u8]) -> bool {
    let mut i = 2;
    while i + 3 < b.len() {
        if b[i] != 0xFF {
            return false;
        }
        let marker = b[i + 1];
        if marker == 0xFF {
            i += 1;
            continue;
        }
        if marker == 0x01 || (0xD0..=0xD7).contains(&marker) {
            i += 2;
            continue;
        }
        if marker == 0xD9 {
            return false;
        }
        let len = u16::from_be_bytes([b[i + 2], b[i + 3]]) as usize;
        if marker == 0xDA {
            let scan = (i + 2 + len).min(b.len());
            return b[scan..].windows(2).any(|w| w == [0xFF, 0xD9]);
        }
        i += 2 + len;
    }
    false
}
