//! The COLMAP command-line backend: version and capability detection, command lines
//! for each stage, progress parsed from its output, and checks of what it wrote
//! (its exit code alone cannot be trusted).

pub mod commands;
pub mod database;
pub mod progress;

use crate::backend::{
    BackendInfo, CameraSharing, EngineBackend, Invocation, LineEvent, Unsupported,
};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use tessera_core::spec::{BaMode, MapperKind, PairStrategy, ReconstructionSpec};

/// Problems finding COLMAP.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// Not installed.
    #[error(
        "`{program}` could not be run ({source}); install COLMAP (Debian: `apt-get install colmap`, or run scripts/setup) or set TESSERA_COLMAP"
    )]
    Missing {
        /// What was tried.
        program: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Its banner was not understood.
    #[error("`{program} help` did not print a COLMAP version banner; got: {banner}")]
    Unrecognised {
        /// What was run.
        program: String,
        /// First line printed.
        banner: String,
    },
}

/// The COLMAP program to run: `$TESSERA_COLMAP` or `colmap`.
pub fn program() -> String {
    std::env::var("TESSERA_COLMAP").unwrap_or_else(|_| "colmap".into())
}

/// Parse COLMAP's banner (`COLMAP 3.8 -- Structure-from-Motion …` and
/// `(Commit … with CUDA)`): version and CUDA.
pub fn parse_banner(text: &str) -> Option<(String, bool)> {
    let first = text
        .lines()
        .find(|l| l.trim_start().starts_with("COLMAP "))?;
    let version = first
        .trim_start()
        .strip_prefix("COLMAP ")?
        .split_whitespace()
        .next()?
        .to_string();
    if !version.chars().next()?.is_ascii_digit() {
        return None;
    }
    let cuda = text.contains("with CUDA");
    Some((version, cuda))
}

fn at_least(version: &str, major: u32, minor: u32) -> bool {
    let mut it = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// What COLMAP `version` (with or without CUDA) can do through Tessera.
pub fn capabilities(version: &str, cuda: bool) -> BTreeSet<String> {
    let mut caps: BTreeSet<String> = [
        "features.extract.sift",
        "pairs.exhaustive",
        "pairs.sequential",
        "pairs.spatial",
        "pairs.vocabtree",
        "map.incremental",
        "map.hierarchical",
        "ba.standard",
        "ba.two_stage",
        "triangulate.retri",
        "relocalize.images",
        "georegister.sim3",
        "export.ply",
        "export.nvm",
        "export.colmap_text",
        "export.colmap_bin",
        "export.points_bin",
        // Written by Tessera from the model, whatever the engine (`tessera_sfm::export`).
        "export.las",
        "export.laz",
        "export.cameras_geojson",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    if at_least(version, 3, 14) && cuda {
        caps.insert("map.global".into());
    }
    if cuda {
        caps.insert("dense.patch_match_stereo".into());
        caps.insert("dense.stereo_fusion".into());
    }
    caps
}

/// The COLMAP command-line backend.
#[derive(Debug, Clone)]
pub struct ColmapBackend {
    info: BackendInfo,
    program: String,
}

impl ColmapBackend {
    /// Find COLMAP on this machine and read its version and capabilities.
    pub fn detect() -> Result<Self, DetectError> {
        Ok(ColmapBackend {
            info: detect()?,
            program: program(),
        })
    }

    /// A backend whose capabilities are given, not detected: for tests of what it
    /// offers and refuses.
    #[cfg(test)]
    pub(crate) fn with_info(info: BackendInfo) -> Self {
        ColmapBackend {
            info,
            program: program(),
        }
    }

    fn call(&self, args: Vec<String>) -> Vec<Invocation> {
        vec![Invocation {
            program: self.program.clone(),
            args,
        }]
    }

    fn require(&self, cap: &str) -> Result<(), Unsupported> {
        self.info.require(cap, "")
    }
}

impl EngineBackend for ColmapBackend {
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
        self.require("features.extract.sift")?;
        let mut args = commands::extract(spec, db, images, self.info.cuda, cameras);
        if let Some(list) = image_list {
            args.extend(["--image_list_path".into(), list.display().to_string()]);
        }
        if let Some(cam) = existing_camera {
            args.extend(["--ImageReader.existing_camera_id".into(), cam.to_string()]);
        }
        Ok(self.call(args))
    }

    fn train_vocab_tree(
        &self,
        db: &Path,
        tree: &Path,
        training: crate::vocab_tree::TreeTraining,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.require("pairs.vocabtree")?;
        Ok(self.call(commands::train_vocab_tree(db, tree, training)))
    }

    fn match_pairs(
        &self,
        pairs: &PairStrategy,
        db: &Path,
        vocab_tree: Option<&Path>,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.require(match pairs {
            PairStrategy::Exhaustive => "pairs.exhaustive",
            PairStrategy::Sequential { .. } => "pairs.sequential",
            PairStrategy::Spatial { .. } => "pairs.spatial",
            PairStrategy::VocabTree { .. } => "pairs.vocabtree",
        })?;
        if matches!(pairs, PairStrategy::VocabTree { .. }) && vocab_tree.is_none() {
            return Err(Unsupported {
                backend: self.info.name.clone(),
                version: self.info.version.clone(),
                capability: "pairs.vocabtree".into(),
                hint: "vocabulary-tree pairs need a tree file".into(),
            });
        }
        Ok(self.call(commands::match_pairs(pairs, db, self.info.cuda, vocab_tree)))
    }

    fn match_listed(&self, db: &Path, list: &Path) -> Result<Vec<Invocation>, Unsupported> {
        self.require("pairs.spatial")?;
        Ok(self.call(commands::match_listed(db, list, self.info.cuda)))
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
        match mapper {
            MapperKind::Incremental => self.require("map.incremental")?,
            MapperKind::Hierarchical => self.require("map.hierarchical")?,
            MapperKind::Global => self.info.require(
                "map.global",
                "use `incremental`, or a CUDA COLMAP >= 3.14 worker",
            )?,
        }
        if mapper == MapperKind::Global {
            let args = vec![
                "global_mapper".into(),
                "--database_path".into(),
                db.display().to_string(),
                "--image_path".into(),
                images.display().to_string(),
                "--output_path".into(),
                out.display().to_string(),
            ];
            return Ok(self.call(args));
        }
        let mut args = commands::map(
            mapper == MapperKind::Hierarchical,
            db,
            images,
            out,
            snapshots,
            snapshot_every,
            input,
        );
        if let (MapperKind::Hierarchical, Some(c)) = (mapper, clusters) {
            args.extend([
                "--leaf_max_num_images".into(),
                c.cluster_size.to_string(),
                "--image_overlap".into(),
                c.overlap.to_string(),
            ]);
        }
        Ok(self.call(args))
    }

    fn map_relaxed(
        &self,
        db: &Path,
        images: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.require("map.incremental")?;
        let p = |x: &Path| x.display().to_string();
        let mut args: Vec<String> = vec![
            "mapper".into(),
            "--database_path".into(),
            p(db),
            "--image_path".into(),
            p(images),
            "--output_path".into(),
            p(out),
        ];
        let r = crate::backend::RELAXED_INIT;
        args.extend([
            "--Mapper.init_min_num_inliers".into(),
            r.min_inliers.to_string(),
            "--Mapper.init_min_tri_angle".into(),
            r.min_tri_angle_deg.to_string(),
            "--Mapper.abs_pose_min_num_inliers".into(),
            r.abs_pose_min_inliers.to_string(),
        ]);
        Ok(self.call(args))
    }

    fn map_subset(
        &self,
        db: &Path,
        images: &Path,
        out: &Path,
        image_list: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.require("map.incremental")?;
        let p = |x: &Path| x.display().to_string();
        Ok(self.call(vec![
            "mapper".into(),
            "--database_path".into(),
            p(db),
            "--image_path".into(),
            p(images),
            "--output_path".into(),
            p(out),
            "--image_list_path".into(),
            p(image_list),
        ]))
    }

    fn bundle_adjust(
        &self,
        mode: BaMode,
        input: &Path,
        mid: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.require(if mode == BaMode::TwoStage {
            "ba.two_stage"
        } else {
            "ba.standard"
        })?;
        Ok(commands::bundle_adjust(mode, input, mid, out)
            .into_iter()
            .flat_map(|a| self.call(a))
            .collect())
    }

    fn georegister_gps(
        &self,
        input: &Path,
        out: &Path,
        db: &Path,
        ecef: bool,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.require("georegister.sim3")?;
        Ok(self.call(commands::align_gps(
            input,
            out,
            db,
            ecef,
            crate::backend::GPS_MAX_ERROR_M,
        )))
    }

    fn register_images(
        &self,
        db: &Path,
        input: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.require("relocalize.images")?;
        let p = |x: &Path| x.display().to_string();
        Ok(self.call(vec![
            "image_registrator".into(),
            "--database_path".into(),
            p(db),
            "--input_path".into(),
            p(input),
            "--output_path".into(),
            p(out),
        ]))
    }

    fn triangulate(
        &self,
        db: &Path,
        images: &Path,
        input: &Path,
        out: &Path,
    ) -> Result<Vec<Invocation>, Unsupported> {
        self.require("triangulate.retri")?;
        let p = |x: &Path| x.display().to_string();
        Ok(self.call(vec![
            "point_triangulator".into(),
            "--database_path".into(),
            p(db),
            "--image_path".into(),
            p(images),
            "--input_path".into(),
            p(input),
            "--output_path".into(),
            p(out),
            "--clear_points".into(),
            "1".into(),
        ]))
    }

    fn parse_line(&self, line: &str, total: Option<u64>) -> Option<LineEvent> {
        progress::parse(line, total)
    }

    fn database_stats(
        &self,
        db: &Path,
    ) -> Result<database::DatabaseStats, database::DatabaseError> {
        database::stats(db)
    }
}

/// Run `colmap help` and describe the backend.
pub fn detect() -> Result<BackendInfo, DetectError> {
    let program = program();
    let out = Command::new(&program)
        .arg("help")
        .output()
        .map_err(|source| DetectError::Missing {
            program: program.clone(),
            source,
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (version, built_with_cuda) =
        parse_banner(&text).ok_or_else(|| DetectError::Unrecognised {
            program: program.clone(),
            banner: text
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect(),
        })?;
    let cuda = use_cuda(
        built_with_cuda,
        std::env::var("TESSERA_GPU").ok().as_deref(),
        nvidia_device_present(),
    );
    Ok(BackendInfo {
        name: "colmap".into(),
        capabilities: capabilities(&version, cuda),
        version,
        cuda,
    })
}

/// Whether COLMAP may use the GPU: it must be built with CUDA *and* a GPU must be there.
/// The worker image is CUDA-built, and the CPU Batch queue runs it on machines without a
/// GPU, where `use_gpu 1` aborts. `TESSERA_GPU=0|1` overrides what the device check finds.
pub fn use_cuda(built_with_cuda: bool, override_: Option<&str>, device_present: bool) -> bool {
    built_with_cuda
        && match override_.map(str::trim) {
            Some("0") => false,
            Some("1") => true,
            _ => device_present,
        }
}

/// Whether an NVIDIA GPU is visible: the driver's device nodes exist (as they do in a
/// Batch GPU container or on a GPU host).
fn nvidia_device_present() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
        || std::fs::read_dir("/proc/driver/nvidia/gpus").is_ok_and(|mut d| d.next().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_is_used_only_when_built_for_it_and_present() {
        assert!(use_cuda(true, None, true));
        assert!(
            !use_cuda(true, None, false),
            "a CUDA build on a CPU machine"
        );
        assert!(!use_cuda(false, None, true), "a CPU build on a GPU machine");
        assert!(!use_cuda(true, Some("0"), true));
        assert!(use_cuda(true, Some("1"), false));
        assert!(
            !use_cuda(false, Some("1"), true),
            "no override makes a CPU build use CUDA"
        );
    }

    #[test]
    fn banners_are_parsed() {
        let cpu = "\nCOLMAP 3.8 -- Structure-from-Motion and Multi-View Stereo\n              (Commit Unknown on Unknown without CUDA)\n";
        assert_eq!(parse_banner(cpu), Some(("3.8".into(), false)));
        let gpu = "COLMAP 3.14.0.dev0 -- Structure-from-Motion and Multi-View Stereo\n(Commit abc on 2026-01-01 with CUDA)";
        assert_eq!(parse_banner(gpu), Some(("3.14.0.dev0".into(), true)));
        assert_eq!(parse_banner("command not found"), None);
    }

    #[test]
    fn global_mapping_needs_cuda_colmap_3_14() {
        assert!(!capabilities("3.8", false).contains("map.global"));
        assert!(!capabilities("3.14", false).contains("map.global"));
        assert!(capabilities("3.14.1", true).contains("map.global"));
        assert!(capabilities("4.0", true).contains("dense.stereo_fusion"));
    }
}
