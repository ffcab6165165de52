//! Engine backends and their declared capabilities, named as in the sfmapi v1
//! capability list. Asking a backend for something it lacks is a permanent error that
//! names the capability.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::Path;
use tessera_core::event::Phase;
use tessera_core::spec::{BaMode, Georef, MapperKind, PairStrategy, ReconstructionSpec};
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
            Err(self.unsupported(cap, hint))
        }
    }

    /// The error that says `cap` is not offered here, and what to do instead.
    pub fn unsupported(&self, cap: &str, hint: &str) -> Unsupported {
        Unsupported {
            backend: self.name.clone(),
            version: self.version.clone(),
            capability: cap.into(),
            hint: hint.into(),
        }
    }

    /// Every capability a reconstruction spec needs, checked at once.
    pub fn check_spec(&self, spec: &ReconstructionSpec) -> Result<(), Unsupported> {
        self.require("features.extract.sift", "")?;
        if spec.sift_native_scale {
            self.require(
                "features.native_scale",
                "leave out sift_native_scale, or run on COLMAP 4 (pycolmap)",
            )?;
        }
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
        // Ground control is placed by Tessera itself; GPS by the engine.
        if matches!(spec.georef, Georef::Gps { .. }) {
            self.require("georegister.sim3", "leave out georeferencing")?;
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

/// Initialisation thresholds for a second incremental pass over a scene the defaults
/// split or left out (COLMAP's defaults: 100 inliers, 16°, 30).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RelaxedInit {
    /// Inliers an initial pair needs.
    pub min_inliers: u32,
    /// Triangulation angle an initial pair needs, in degrees.
    pub min_tri_angle_deg: f64,
    /// Inliers a photo's absolute pose needs.
    pub abs_pose_min_inliers: u32,
}

/// The relaxed pass every backend runs.
pub const RELAXED_INIT: RelaxedInit = RelaxedInit {
    min_inliers: 50,
    min_tri_angle_deg: 8.0,
    abs_pose_min_inliers: 15,
};

/// Pose inliers enough for a photo on the mapping stage's last look
/// ([`EngineBackend::register_left_out`]), against COLMAP's 30 and the relaxed pass's 15:
/// OpenSfM's own minimum for resection. Only photos in no model get it (a photo of
/// another scene's sub-model could pull its whole scene in), the rest of the model is
/// held, so a weak pose moves nothing else, and the result is kept only if it has as
/// many points and a mean error at most half again the model's. On the first 20 photos of `odm_seneca_80` at their own pixels,
/// `IMG_0543` (one neighbour, 256 verified matches) reached 10–14 pose inliers: left out
/// at 15, registered at 10 with its centre 1.4 % of the survey's extent from where the
/// doubled copy's model puts it (pycolmap 4.2.1). Lowered for the whole relaxed pass
/// instead, `opensfm_lund` took 79 s to map instead of 9.5 s.
pub const LAST_LOOK_ABS_POSE_MIN_INLIERS: u32 = 10;

/// Farthest a camera may sit from its photo's GPS position and still count as an
/// inlier when a model is aligned to GPS, in metres.
pub const GPS_MAX_ERROR_M: f64 = 50.0;

/// Photos SIFT extracts at once at most: one per thread, each holding its decoded photo
/// and its scale space. COLMAP's own default is one thread per core it sees, and in a
/// container it sees the host's cores, not the container's share: 64 photos in flight
/// in a 4-vCPU job's memory. Capped here so the memory model
/// (`tessera_jobs::reconstruct::memory`) bounds extraction on any machine; 8 is the
/// most vCPUs a class's job definition gives.
pub const EXTRACT_THREADS_MAX: usize = 8;

/// Threads for extraction here: the CPUs this process may use (Rust reads a cgroup's CPU
/// quota and affinity, unlike COLMAP; where a container is limited by CPU shares alone,
/// as on Batch, it sees the host's), at most [`EXTRACT_THREADS_MAX`].
pub fn extract_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(EXTRACT_THREADS_MAX)
}

/// One subprocess a backend wants run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Program.
    pub program: String,
    /// Arguments; the first names the engine's sub-command where it has them.
    pub args: Vec<String>,
}

impl Invocation {
    /// A short name for logs and metrics (`feature_extractor`): the first argument, or
    /// the one after it when the first is a script the program runs (`stage.py map`).
    pub fn name(&self) -> &str {
        let mut args = self.args.iter().map(String::as_str);
        match args.next() {
            Some(script) if script.ends_with(".py") => args.next().unwrap_or(script),
            Some(first) => first,
            None => &self.program,
        }
    }
}

/// What an output line of the engine says.
#[derive(Debug, Clone, PartialEq)]
pub enum LineEvent {
    /// Progress in a phase.
    Progress {
        /// Phase.
        phase: Phase,
        /// Done so far.
        current: u64,
        /// Out of.
        total: Option<u64>,
    },
    /// A phase began.
    Started(Phase),
    /// A figure the engine reported.
    Figure(&'static str, f64),
    /// A warning worth showing.
    Warning(String),
}

/// How feature extraction gives photos their camera intrinsics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CameraSharing {
    /// One camera for every photo: right only for one camera at one size (COLMAP drops
    /// photos whose size differs from the shared camera's).
    Shared,
    /// The engine's own rule (COLMAP 4: photos whose size and EXIF agree share one).
    Auto,
    /// One camera per photo.
    PerImage,
}

impl CameraSharing {
    /// What `spec` asks for photos that come in `sizes` distinct sizes: its own camera
    /// per photo if it says so, else one shared camera where every photo has one size.
    pub fn of(spec: &ReconstructionSpec, sizes: usize) -> Self {
        match (spec.per_image_intrinsics, sizes) {
            (true, _) => Self::PerImage,
            (false, 1) => Self::Shared,
            (false, _) => Self::Auto,
        }
    }
}

/// An engine backend: the command lines for each stage, the meaning of its output, and
/// what its feature database holds. Every method refuses, naming the capability, what
/// the backend does not offer.
pub trait EngineBackend: Send + Sync + 'static {
    /// Name, version and capabilities.
    fn info(&self) -> &BackendInfo;

    /// Feature extraction into `db` for the photos in `images` (only those listed in
    /// `image_list`, when given), the photos' cameras as `cameras` says; `existing_camera`
    /// reuses a camera already in the database.
    fn extract(
        &self,
        spec: &ReconstructionSpec,
        db: &Path,
        images: &Path,
        cameras: CameraSharing,
        image_list: Option<&Path>,
        existing_camera: Option<u32>,
    ) -> Result<Vec<Invocation>, Unsupported>;

    /// A vocabulary tree trained from the features in `db`, written to `tree`, for
    /// `pairs.vocabtree` where no tree was given.
    fn train_vocab_tree(
        &self,
        db: &Path,
        tree: &Path,
        training: crate::vocab_tree::TreeTraining,
    ) -> Result<Vec<Invocation>, Unsupported>;

    /// Matching (and geometric verification) of the pairs the spec chooses; `vocab_tree`
    /// is the tree file for `pairs.vocabtree` (given, or trained by
    /// [`EngineBackend::train_vocab_tree`]).
    fn match_pairs(
        &self,
        pairs: &PairStrategy,
        db: &Path,
        vocab_tree: Option<&Path>,
    ) -> Result<Vec<Invocation>, Unsupported>;

    /// Matching (and verification) of the pairs listed in `list`, one `name1 name2` per
    /// line, after [`EngineBackend::match_pairs`] in the same database: spatial pairs'
    /// flight-strip neighbours. Pairs the strategy already matched are skipped by the
    /// engine, so a pair costs its matching once.
    fn match_listed(&self, db: &Path, list: &Path) -> Result<Vec<Invocation>, Unsupported>;

    /// Mapping into `out`, writing snapshots every `snapshot_every` registered images into
    /// `snapshots`; `input` continues from a snapshot. `clusters` sizes the hierarchical
    /// mapper's own clusters (leaf size and overlap; COLMAP's 500 and 50 where `None`).
    #[allow(clippy::too_many_arguments)]
    fn map(
        &self,
        mapper: MapperKind,
        db: &Path,
        images: &Path,
        out: &Path,
        snapshots: &Path,
        snapshot_every: u32,
        input: Option<&Path>,
        clusters: Option<tessera_core::spec::SplitSpec>,
    ) -> Result<Vec<Invocation>, Unsupported>;

    /// Incremental mapping again with relaxed initialisation thresholds, for scenes the
    /// defaults split into several models.
    fn map_relaxed(
        &self,
        db: &Path,
        images: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported>;

    /// Incremental mapping of only the photos named in `image_list` (one name a line):
    /// one cluster of a split run, whose models are merged afterwards.
    fn map_subset(
        &self,
        db: &Path,
        images: &Path,
        out: &Path,
        image_list: &Path,
    ) -> Result<Vec<Invocation>, Unsupported>;

    /// Bundle adjustment of `input` into `out` (`mid` holds a first pass).
    fn bundle_adjust(
        &self,
        mode: BaMode,
        input: &Path,
        mid: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported>;

    /// Similarity alignment of `input` to the photos' GPS (ENU, or ECEF).
    fn georegister_gps(
        &self,
        input: &Path,
        out: &Path,
        db: &Path,
        ecef: bool,
    ) -> Result<Vec<Invocation>, Unsupported>;

    /// Register photos already in `db` into the model `input`.
    fn register_images(
        &self,
        db: &Path,
        input: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported>;

    /// The mapping stage's last look at photos that are in no model: registered into
    /// `input` with its poses held, only the photos `image_list` names (the model's own
    /// and those), down to [`LAST_LOOK_ABS_POSE_MIN_INLIERS`] pose inliers. Capability
    /// `relocalize.last_look`; not offered by default.
    fn register_left_out(
        &self,
        db: &Path,
        input: &Path,
        out: &Path,
        image_list: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        let _ = (db, input, out, image_list);
        Err(self.info().unsupported(
            "relocalize.last_look",
            "the photos the mapper left out stay out",
        ))
    }

    /// Re-triangulate the points of `input` with its poses fixed.
    fn triangulate(
        &self,
        db: &Path,
        images: &Path,
        input: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported>;

    /// Read one output line.
    fn parse_line(&self, line: &str, total: Option<u64>) -> Option<LineEvent>;

    /// Counts in the feature database, to check what a stage really wrote.
    fn database_stats(
        &self,
        db: &Path,
    ) -> Result<crate::colmap::database::DatabaseStats, crate::colmap::database::DatabaseError>;
}
