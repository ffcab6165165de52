//! Faces in pixels, with no storage and no jobs: load the ONNX models once, find faces
//! (YuNet, or CenterFace as a second detector), embed them (SFace, after aligning to the
//! ArcFace 5-point template), decide who they are against a project's opted-out
//! subjects, and blur so that it cannot be undone.
//!
//! Geometry that leaves this crate is in *fractions* of the image's width and height
//! ([`FracRect`]), so boxes stay valid for any file derived from the same pixels and
//! reprocessing never needs to detect again. Images come in upright (the caller applied
//! the EXIF orientation); faces that are still turned or small are found by searching
//! at quarter turns and in full-resolution tiles ([`search`]).
#![deny(missing_docs)]

pub mod align;
pub mod blur;
pub mod detect;
pub mod embed;
pub mod error;
pub mod models;
pub mod quality;
pub mod runtime;
pub mod search;

pub use detect::{Detection, DetectorKind};
pub use error::FaceError;
pub use models::{FaceModels, ModelFiles};
pub use runtime::OnnxRuntime;
pub use tessera_core::geometry::FracRect;
