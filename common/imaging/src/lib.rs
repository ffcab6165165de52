//! Pixels in and out, one path for every photo Tessera decides about.
//!
//! - [`check`]: is it an image worth decoding (format, dimensions under a pixel limit,
//!   truncation), from the bytes alone;
//! - [`decode`]: the pixels with allocation limits and the EXIF orientation applied, so
//!   that faces, blur regions and published files are about what a viewer shows;
//! - [`orient`]: the eight orientations, for pixels and for rectangles;
//! - [`encode`] and [`metadata`]: upright JPEG with the colour profile and only the EXIF
//!   fields a project allows;
//! - [`resize`]: one resampling for every scaled copy (detector inputs, thumbnails).
#![deny(missing_docs)]

pub mod check;
pub mod decode;
pub mod encode;
mod heif;
pub mod metadata;
pub mod orient;
pub mod resize;

pub use decode::{Decoded, Format, decode};
pub use metadata::KeepMetadata;
pub use orient::Orientation;

use tessera_core::{Classify, ErrorClass};

/// Why a file was not accepted or could not be written, naming the file and saying what
/// to do. Always permanent: the same bytes fail the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Classify for Refused {
    fn class(&self) -> ErrorClass {
        ErrorClass::Permanent
    }
}

impl From<Refused> for String {
    fn from(r: Refused) -> String {
        r.0
    }
}
