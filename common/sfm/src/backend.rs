//! Engine backends and their declared capabilities, named as in the sfmapi v1
//! capability list. Asking a backend for something it lacks is a permanent error that
//! names the capability.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use tessera_core::spec::{BaMode, MapperKind, PairStrategy, ReconstructionSpec};
use tessera_core::{Classify, ErrorClass};

/// A capability a backend may offer.
pub type Capability = &'static str;

/// What a backend is and can do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendInfo {
    /// Backend name (`colmap`).
    pub name: String,
    /// Version as reported by the engine (`3.8`).
    pub version: String,
    /// Whether it runs on a GPU.
    pub cuda: bool,
    /// Capabilities it offers.
    pub capabilities: BTreeSet<String>,
}

/// A requested capability is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {backend} {version} backend does not offer `{capability}`; {hint}")]
pub struct Unsupported {
    /// Backend name.
    pub backend: String,
    /// Its version.
    pub version: String,
    /// The missing capability.
    pub capability: String,
    /// What to do instead.
    pub hint: String,
}

impl Classify for Unsupported {
    fn class(&self) -> ErrorClass {
        ErrorClass::Permanent
    }
}

impl BackendInfo {
    /// Fail unless `cap` is offered.
    pub fn require(&self, cap: &str, hint: &str) -> Result<(), Unsupported> {
        if self.capabilities.contains(cap) {
            Ok(())
        } else {
            Err(Unsupported {
                backend: self.name.clone(),
                version: self.version.clone(),
                capability: cap.into(),
                hint: hint.into(),
            })
        }
    }

    /// Every capability a reconstruction spec needs, checked at once.
    pub fn check_spec(&self, spec: &ReconstructionSpec) -> Result<(), Unsupported> {
        self.require("features.extract.sift", "")?;
        match spec.pairs {
            PairStrategy::Exhaustive => self.require("pairs.exhaustive", "")?,
            PairStrategy::Sequential { .. } => self.require("pairs.sequential", "")?,
            PairStrategy::Spatial { .. } => self.require("pairs.spatial", "")?,
            PairStrategy::VocabTree { .. } => self.require("pairs.vocabtree", "")?,
        }
        match spec.mapper {
            MapperKind::Incremental => self.require("map.incremental", "")?,
            MapperKind::Hierarchical => self.require("map.hierarchical", "")?,
            MapperKind::Global => self.require(
                "map.global",
                "use `incremental`, or a CUDA COLMAP >= 3.14 worker",
            )?,
        }
        match spec.ba {
            BaMode::Standard => self.require("ba.standard", "")?,
            BaMode::TwoStage => self.require("ba.two_stage", "")?,
        }
        for e in &spec.exports {
            let name = serde_json::to_value(e)
                .ok()
                .and_then(|v| v.as_str().map(|s| s.replace('-', "_")))
                .unwrap_or_default();
            self.require(&format!("export.{name}"), "")?;
        }
        Ok(())
    }
}
