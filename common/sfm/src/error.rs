//! Errors reading and writing models.

use std::path::PathBuf;
use tessera_core::{Classify, ErrorClass};

/// What can go wrong with a model file.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is truncated, corrupt or not a COLMAP model file.
    #[error("{} is not a valid COLMAP {what}: {why} (at byte/line {at}); the stage that wrote it must run again", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Which kind of file.
        what: &'static str,
        /// What is wrong.
        why: String,
        /// Byte offset (binary) or line number (text).
        at: usize,
    },
    /// The model refers to something it does not contain.
    #[error("inconsistent model: {0}")]
    Inconsistent(String),
    /// A model point or camera cannot be placed in the output coordinate system.
    #[error("{0}; choose another coordinate system (crs)")]
    Crs(#[from] tessera_core::crs::CrsError),
    /// An export's encoder refused the model.
    #[error("the {format} export could not be written: {why}")]
    Encode {
        /// The format.
        format: &'static str,
        /// What the encoder said.
        why: String,
    },
}

impl Classify for ModelError {
    fn class(&self) -> ErrorClass {
        match self {
            ModelError::Io { .. } => ErrorClass::Transient,
            ModelError::Corrupt { .. }
            | ModelError::Inconsistent(_)
            | ModelError::Crs(_)
            | ModelError::Encode { .. } => ErrorClass::Permanent,
        }
    }
}
