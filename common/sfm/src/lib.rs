//! Structure from motion, natively in Rust where it matters for trust: COLMAP's sparse
//! model is read and written here (binary and text), so every stage output can be
//! validated, measured and exported without asking COLMAP.
#![deny(missing_docs)]

pub mod align;
pub mod backend;
pub mod camera;
pub mod colmap;
pub mod error;
pub mod export;
pub mod merge;
pub mod metrics;
pub mod model;
pub mod model_bin;
pub mod model_text;
pub mod pycolmap;
pub mod vocab_tree;

pub use error::ModelError;
pub use model::{Camera, Image, Observation, Point2D, Point3D, Reconstruction};
