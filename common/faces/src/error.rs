//! What can go wrong with the runtime, the models and inference.

use tessera_core::{Classify, ErrorClass};

/// A face-pipeline failure.
#[derive(Debug, thiserror::Error)]
pub enum FaceError {
    /// `libonnxruntime.so` could not be found or loaded.
    #[error(
        "ONNX Runtime could not be loaded from `{path}`: {reason}. Run scripts/setup-onnx (it installs the onnxruntime 1.32 wheel's library) or point ORT_DYLIB_PATH at libonnxruntime.so.1.32.x"
    )]
    Runtime {
        /// The library path tried.
        path: String,
        /// Why it failed (missing, not ONNX Runtime, too old).
        reason: String,
    },
    /// A model file is missing or does not load.
    #[error(
        "face model `{path}` could not be loaded: {reason}. Run scripts/setup-onnx or point TESSERA_MODELS at a folder holding the models"
    )]
    Model {
        /// The model file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A model ran but failed or returned something unexpected.
    #[error("{model} inference failed: {reason}")]
    Inference {
        /// Which model.
        model: &'static str,
        /// Why.
        reason: String,
    },
}

impl Classify for FaceError {
    fn class(&self) -> ErrorClass {
        match self {
            // A worker without its runtime or models cannot do this work; another
            // attempt on the same worker would fail the same way.
            FaceError::Runtime { .. } | FaceError::Model { .. } => ErrorClass::Permanent,
            FaceError::Inference { .. } => ErrorClass::Transient,
        }
    }
}

pub(crate) fn inference(model: &'static str, e: impl std::fmt::Display) -> FaceError {
    FaceError::Inference {
        model,
        reason: e.to_string(),
    }
}
