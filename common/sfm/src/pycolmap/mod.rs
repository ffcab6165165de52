//! The COLMAP 4 backend, through pycolmap: the same stages as the command-line backend,
//! each run as `python stage.py <stage> …` (the runner is embedded in this crate and
//! written out once per version of its text). It speaks JSON lines; everything else it
//! prints is log. As with the command line, the exit status is only one signal: the
//! stages read the database and the models it wrote.
//!
//! Why a second backend: pycolmap 4.2 matches several times faster than Debian's
//! COLMAP 3.8 on a CPU and brings the global mapper (`map.global`) without CUDA. The
//! command-line backend stays for the worker container's CUDA COLMAP.

use crate::backend::{
    BackendInfo, CameraSharing, EngineBackend, Invocation, LineEvent, Unsupported,
};
use crate::colmap::database;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use tessera_core::spec::{BaMode, MapperKind, PairStrategy, ReconstructionSpec};

/// The stage runner's source, shipped inside the binary so no checkout is needed at run
/// time.
pub const STAGE_RUNNER: &str = include_str!("stage.py");

/// The pycolmap version Tessera is tested against; `scripts/setup-pycolmap` installs it.
pub const PINNED_VERSION: &str = "4.2.1";

/// Problems finding pycolmap.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// No Python with pycolmap.
    #[error(
        "`{python}` could not run the pycolmap stage runner ({why}); run scripts/setup-pycolmap, or set TESSERA_PYCOLMAP_PYTHON to a Python with pycolmap=={PINNED_VERSION}"
    )]
    Missing {
        /// The interpreter tried.
        python: String,
        /// What went wrong.
        why: String,
    },
}

/// The Python to run: `$TESSERA_PYCOLMAP_PYTHON`, else the venv the setup script makes.
pub fn python() -> String {
    std::env::var("TESSERA_PYCOLMAP_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        format!("{home}/.cache/tessera/venv-pycolmap/bin/python")
    })
}

/// What pycolmap can do through Tessera: what the command-line backend offers on a CPU
/// (the hierarchical mapper included), plus the global mapper, which COLMAP 4 runs
/// without CUDA, and SIFT from the photos' own pixels.
pub fn capabilities() -> BTreeSet<String> {
    let mut caps = crate::colmap::capabilities("3.8", false);
    caps.insert("map.global".into());
    // SIFT from the photos' own pixels, weak photos extracted again (`stage.py`'s
    // `look_again`): the command line cannot read the database between two extractions.
    caps.insert("features.native_scale".into());
    // The mapping stage's last look at photos in no model: COLMAP 3.8's registrator
    // takes no list of photos, so it would lower the bar for other scenes' too.
    caps.insert("relocalize.last_look".into());
    caps
}

/// The pycolmap backend.
#[derive(Debug, Clone)]
pub struct PycolmapBackend {
    info: BackendInfo,
    python: String,
    runner: PathBuf,
}

#[derive(Deserialize)]
struct VersionLine {
    tessera: String,
    version: Option<String>,
    cuda: Option<bool>,
}

/// Where the runner is written: this user's cache (`~/.cache/tessera/pycolmap-runner/`,
/// one file per text of the runner, so two Tessera versions never run each other's),
/// never a folder another user could prepare. Without a home, a fresh folder of this
/// process's own in the temp directory.
fn runner_path() -> std::io::Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    STAGE_RUNNER.hash(&mut h);
    let dir = match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => PathBuf::from(home)
            .join(".cache/tessera/pycolmap-runner")
            .join(format!("{:016x}", h.finish())),
        None => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = std::env::temp_dir()
                .join(format!("tessera-pycolmap-{}-{nanos}", std::process::id()));
            // Fails if it exists: nobody else's folder is ever used.
            std::fs::create_dir(&dir)?;
            dir
        }
    };
    std::fs::create_dir_all(&dir)?;
    Ok(dir.join("stage.py"))
}

/// Make sure `path` holds the runner: written aside with `create_new` (never through a
/// link someone placed) and renamed over, so a concurrent start never runs half a file;
/// written again if a cleaner removed it while the process ran.
fn ensure_runner(path: &Path) -> std::io::Result<()> {
    use std::io::Write;
    if std::fs::read_to_string(path).is_ok_and(|t| t == STAGE_RUNNER) {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        "stage.py.{}.{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    f.write_all(STAGE_RUNNER.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The major version of COLMAP the runner is written for.
const MAJOR: &str = "4.";

impl PycolmapBackend {
    /// `register`: COLMAP's 30 pose inliers first, then a second try from that result
    /// at `second_try` for the photos still out.
    fn register(
        &self,
        db: &Path,
        input: &Path,
        out: &Path,
        second_try: u32,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.info.require("relocalize.images", "")?;
        Ok(vec![self.call(
            "register",
            vec![
                ("database", p(db)),
                ("input", p(input)),
                ("output", p(out)),
                ("relaxed-abs-pose-min-inliers", second_try.to_string()),
            ],
        )])
    }

    /// Find pycolmap (see [`python`]) and read its version.
    pub fn detect() -> Result<Self, DetectError> {
        let python = python();
        let missing = |why: String| DetectError::Missing {
            python: python.clone(),
            why,
        };
        let runner = runner_path()
            .and_then(|p| ensure_runner(&p).map(|()| p))
            .map_err(|e| missing(format!("writing the runner: {e}")))?;
        let out = Command::new(&python)
            .arg(&runner)
            .arg("version")
            .output()
            .map_err(|e| missing(e.to_string()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<VersionLine>(l).ok())
            .find(|l| l.tessera == "version" || l.tessera == "error");
        let (version, cuda) = match line {
            Some(VersionLine {
                version: Some(v),
                cuda,
                ..
            }) => (v, cuda.unwrap_or(false)),
            _ => {
                let said = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
                return Err(missing(said.trim().chars().take(300).collect()));
            }
        };
        if !version.starts_with(MAJOR) {
            return Err(missing(format!(
                "it has pycolmap {version}; the runner is written for COLMAP {MAJOR}x (pinned {PINNED_VERSION})"
            )));
        }
        let cuda = crate::colmap::use_cuda(
            cuda,
            std::env::var("TESSERA_GPU").ok().as_deref(),
            Path::new("/dev/nvidiactl").exists(),
        );
        Ok(PycolmapBackend {
            info: BackendInfo {
                name: "pycolmap".into(),
                capabilities: capabilities(),
                version,
                cuda,
            },
            python,
            runner,
        })
    }

    fn call(&self, stage: &str, flags: Vec<(&str, String)>) -> Invocation {
        // A failure here shows as Python's "can't open file", in the stage's error.
        if let Err(e) = ensure_runner(&self.runner) {
            tracing::warn!(path = %self.runner.display(), error = %e, "cannot write the pycolmap stage runner");
        }
        let mut args = vec![self.runner.display().to_string(), stage.to_string()];
        for (k, v) in flags {
            args.push(format!("--{k}"));
            args.push(v);
        }
        Invocation {
            program: self.python.clone(),
            args,
        }
    }

    fn gpu(&self) -> String {
        u8::from(self.info.cuda).to_string()
    }
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

fn pair_capability(pairs: &PairStrategy) -> &'static str {
    match pairs {
        PairStrategy::Exhaustive => "pairs.exhaustive",
        PairStrategy::Sequential { .. } => "pairs.sequential",
        PairStrategy::Spatial { .. } => "pairs.spatial",
        PairStrategy::VocabTree { .. } => "pairs.vocabtree",
    }
}

impl EngineBackend for PycolmapBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn extract(
        &self,
        spec: &ReconstructionSpec,
        db: &Path,
        images: &Path,
        cameras: CameraSharing,
        image_list: Option<&Path>,
        existing_camera: Option<u32>,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.info.require("features.extract.sift", "")?;
        let model = serde_json::to_value(spec.camera_model)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "SIMPLE_RADIAL".into());
        let mut flags = vec![
            ("database", p(db)),
            ("images", p(images)),
            ("camera-model", model),
            (
                "camera-mode",
                match cameras {
                    CameraSharing::Shared => "single",
                    CameraSharing::Auto => "auto",
                    CameraSharing::PerImage => "per_image",
                }
                .to_string(),
            ),
            ("max-image-size", spec.max_image_size.to_string()),
            ("max-features", spec.max_features.to_string()),
            (
                "first-octave",
                if spec.sift_native_scale { "0" } else { "-1" }.to_string(),
            ),
            ("gpu", self.gpu()),
            ("threads", crate::backend::extract_threads().to_string()),
        ];
        if spec.sift_native_scale {
            self.info.require(
                "features.native_scale",
                "leave out sift_native_scale: SIFT then sees a doubled copy of each photo",
            )?;
            // A photo that reached the cap asked for is not weak, whatever the cap.
            let weak_below = tessera_core::spec::NATIVE_SCALE_WEAK_BELOW.min(spec.max_features);
            flags.push(("weak-below", weak_below.to_string()));
            flags.push((
                "weak-peak-threshold",
                tessera_core::spec::NATIVE_SCALE_WEAK_PEAK_THRESHOLD.to_string(),
            ));
        }
        if let Some(list) = image_list {
            flags.push(("image-list", p(list)));
        }
        if let Some(cam) = existing_camera {
            flags.push(("existing-camera", cam.to_string()));
        }
        Ok(vec![self.call("extract", flags)])
    }

    fn train_vocab_tree(
        &self,
        db: &Path,
        tree: &Path,
        training: crate::vocab_tree::TreeTraining,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.info.require("pairs.vocabtree", "")?;
        Ok(vec![self.call(
            "train-tree",
            vec![
                ("database", p(db)),
                ("out", p(tree)),
                ("words", training.words.to_string()),
                ("descriptors", training.descriptors.to_string()),
            ],
        )])
    }

    fn match_pairs(
        &self,
        pairs: &PairStrategy,
        db: &Path,
        vocab_tree: Option<&Path>,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.info.require(pair_capability(pairs), "")?;
        let mut flags = vec![("database", p(db)), ("gpu", self.gpu())];
        match pairs {
            PairStrategy::Exhaustive => flags.push(("strategy", "exhaustive".into())),
            PairStrategy::Sequential { overlap } => {
                flags.push(("strategy", "sequential".into()));
                flags.push(("overlap", overlap.to_string()));
            }
            PairStrategy::Spatial {
                max_neighbors,
                max_distance_m,
                ..
            } => {
                flags.push(("strategy", "spatial".into()));
                flags.push(("max-neighbors", max_neighbors.to_string()));
                flags.push(("max-distance", max_distance_m.to_string()));
            }
            PairStrategy::VocabTree { num_images, .. } => {
                let tree = vocab_tree.ok_or_else(|| Unsupported {
                    backend: self.info.name.clone(),
                    version: self.info.version.clone(),
                    capability: "pairs.vocabtree".into(),
                    hint: "vocabulary-tree pairs need a tree file".into(),
                })?;
                flags.push(("strategy", "vocabtree".into()));
                flags.push(("vocab-tree", p(tree)));
                flags.push(("num-images", num_images.to_string()));
            }
        }
        Ok(vec![self.call("match", flags)])
    }

    fn match_listed(&self, db: &Path, list: &Path) -> Result<Vec<Invocation>, Unsupported> {
        self.info.require("pairs.spatial", "")?;
        Ok(vec![self.call(
            "match",
            vec![
                ("database", p(db)),
                ("gpu", self.gpu()),
                ("strategy", "listed".into()),
                ("pairs", p(list)),
            ],
        )])
    }

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
    ) -> Result<Vec<Invocation>, Unsupported> {
        let base = vec![
            ("database", p(db)),
            ("images", p(images)),
            ("output", p(out)),
        ];
        match mapper {
            MapperKind::Global => {
                self.info.require("map.global", "")?;
                Ok(vec![self.call("map_global", base)])
            }
            MapperKind::Hierarchical => {
                self.info.require("map.hierarchical", "")?;
                let mut flags = base;
                if let Some(c) = clusters {
                    flags.push(("leaf-max-images", c.cluster_size.to_string()));
                    flags.push(("image-overlap", c.overlap.to_string()));
                }
                Ok(vec![self.call("map_hierarchical", flags)])
            }
            MapperKind::Incremental => {
                self.info.require("map.incremental", "")?;
                let mut flags = base;
                flags.push(("snapshots", p(snapshots)));
                flags.push(("snapshot-every", snapshot_every.to_string()));
                if let Some(i) = input {
                    flags.push(("input", p(i)));
                }
                Ok(vec![self.call("map", flags)])
            }
        }
    }

    fn map_relaxed(
        &self,
        db: &Path,
        images: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.info.require("map.incremental", "")?;
        let r = crate::backend::RELAXED_INIT;
        Ok(vec![self.call(
            "map",
            vec![
                ("database", p(db)),
                ("images", p(images)),
                ("output", p(out)),
                ("init-min-inliers", r.min_inliers.to_string()),
                ("init-min-tri-angle", r.min_tri_angle_deg.to_string()),
                ("abs-pose-min-inliers", r.abs_pose_min_inliers.to_string()),
            ],
        )])
    }

    fn map_subset(
        &self,
        db: &Path,
        images: &Path,
        out: &Path,
        image_list: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.info.require("map.incremental", "")?;
        Ok(vec![self.call(
            "map",
            vec![
                ("database", p(db)),
                ("images", p(images)),
                ("output", p(out)),
                ("image-list", p(image_list)),
            ],
        )])
    }

    fn bundle_adjust(
        &self,
        mode: BaMode,
        input: &Path,
        mid: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        let pass = |i: &Path, o: &Path, fix: bool| {
            self.call(
                "bundle_adjust",
                vec![
                    ("input", p(i)),
                    ("output", p(o)),
                    ("fix-intrinsics", u8::from(fix).to_string()),
                ],
            )
        };
        match mode {
            BaMode::Standard => {
                self.info.require("ba.standard", "")?;
                Ok(vec![pass(input, out, false)])
            }
            BaMode::TwoStage => {
                self.info.require("ba.two_stage", "")?;
                Ok(vec![pass(input, mid, true), pass(mid, out, false)])
            }
        }
    }

    fn georegister_gps(
        &self,
        input: &Path,
        out: &Path,
        db: &Path,
        ecef: bool,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.info.require("georegister.sim3", "")?;
        Ok(vec![self.call(
            "georegister",
            vec![
                ("input", p(input)),
                ("output", p(out)),
                ("database", p(db)),
                ("ecef", u8::from(ecef).to_string()),
                ("max-error", crate::backend::GPS_MAX_ERROR_M.to_string()),
            ],
        )])
    }

    fn register_images(
        &self,
        db: &Path,
        input: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.register(
            db,
            input,
            out,
            crate::backend::RELAXED_INIT.abs_pose_min_inliers,
        )
    }

    fn register_left_out(
        &self,
        db: &Path,
        input: &Path,
        out: &Path,
        image_list: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.info.require("relocalize.last_look", "")?;
        let mut inv = self.register(
            db,
            input,
            out,
            crate::backend::LAST_LOOK_ABS_POSE_MIN_INLIERS,
        )?;
        inv[0]
            .args
            .extend(["--image-list".to_string(), p(image_list)]);
        Ok(inv)
    }

    fn triangulate(
        &self,
        db: &Path,
        images: &Path,
        input: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.info.require("triangulate.retri", "")?;
        Ok(vec![self.call(
            "triangulate",
            vec![
                ("database", p(db)),
                ("images", p(images)),
                ("input", p(input)),
                ("output", p(out)),
            ],
        )])
    }

    fn parse_line(&self, line: &str, total: Option<u64>) -> Option<LineEvent> {
        parse_line(line, total)
    }

    fn database_stats(
        &self,
        db: &Path,
    ) -> Result<database::DatabaseStats, database::DatabaseError> {
        database::stats(db)
    }
}

mod lines;
pub use lines::parse_line;

#[cfg(test)]
mod tests;
