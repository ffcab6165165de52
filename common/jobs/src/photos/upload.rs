//! Accepting an upload: the one decode path of [`tessera_imaging`] (checks before any
//! decoding, allocation limits, EXIF orientation applied), re-exported where the photo
//! jobs look for it.

pub use tessera_imaging::decode::{Decoded, Format, MAX_BYTES, MAX_PIXELS, decode};
