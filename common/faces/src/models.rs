//! The face models, loaded once per process and shared by every photo it processes.

use crate::detect::{self, Detection, DetectorKind};
use crate::embed;
use crate::error::FaceError;
use crate::runtime::OnnxRuntime;
use crate::search::Thoroughness;
use image::RgbImage;
use ort::session::Session;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// Where the model files are.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// Folder holding the `.onnx` files.
    pub dir: PathBuf,
}

/// The environment variable naming the models folder.
pub const MODELS_ENV: &str = "TESSERA_MODELS";

impl ModelFiles {
    /// The models in `dir`.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        ModelFiles { dir: dir.into() }
    }

    /// The folder named by `TESSERA_MODELS`, or where `scripts/setup` installs the
    /// models (`~/.cache/tessera/models`) when the variable is not set.
    pub fn from_env() -> Result<Self, FaceError> {
        std::env::var_os(MODELS_ENV)
            .map(PathBuf::from)
            .or_else(|| installed("models"))
            .map(Self::in_dir)
            .ok_or_else(|| FaceError::Model {
                path: format!("${MODELS_ENV}"),
                reason: "the variable is not set and there is no home folder to look in".into(),
            })
    }

    /// The detector's file.
    pub fn detector(&self, kind: DetectorKind) -> PathBuf {
        self.dir.join(match kind {
            DetectorKind::Yunet => "yunet_2023mar_fp32_dynamic.onnx",
            DetectorKind::Centerface => "centerface_dynamic.onnx",
        })
    }

    /// The embedder's file.
    pub fn embedder(&self) -> PathBuf {
        self.dir.join("sface_2021dec_fp32.onnx")
    }
}

/// `sub` under the folder `scripts/setup` installs into: `$TESSERA_CACHE`, else
/// `~/.cache/tessera` (the environment variables stay overrides, so a new shell needs
/// nothing sourced).
pub(crate) fn installed(sub: &str) -> Option<PathBuf> {
    std::env::var_os("TESSERA_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/tessera")))
        .map(|d| d.join(sub))
}

/// A detector and the embedder, each an ONNX Runtime session created once.
///
/// Sessions are behind mutexes: ONNX Runtime runs one inference per session at a time
/// here, with `threads` intra-op threads, which keeps a worker's CPU use predictable.
pub struct FaceModels {
    detector_kind: DetectorKind,
    detector: Mutex<detect::Detector>,
    embedder: Mutex<Session>,
    /// How long creating both sessions took, in milliseconds.
    pub load_ms: f64,
    /// The runtime's version.
    pub runtime_version: String,
}

impl std::fmt::Debug for FaceModels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaceModels")
            .field("detector", &self.detector_kind)
            .field("load_ms", &self.load_ms)
            .finish()
    }
}

fn session(rt: &OnnxRuntime, path: &Path, threads: usize) -> Result<Session, FaceError> {
    let err = |e: String| FaceError::Model {
        path: path.display().to_string(),
        reason: e,
    };
    if !path.is_file() {
        return Err(err("no such file".into()));
    }
    Session::builder(&rt.env)
        .map_err(|e| err(e.to_string()))?
        .with_intra_threads(threads)
        .map_err(|e| err(e.to_string()))?
        .with_inter_threads(1)
        .map_err(|e| err(e.to_string()))?
        .commit_from_file(path)
        .map_err(|e| err(e.to_string()))
}

impl FaceModels {
    /// Load the detector and the embedder with `threads` intra-op threads each.
    pub fn load(
        rt: &OnnxRuntime,
        files: &ModelFiles,
        detector: DetectorKind,
        threads: usize,
    ) -> Result<FaceModels, FaceError> {
        let started = Instant::now();
        let d = session(rt, &files.detector(detector), threads)?;
        let e = session(rt, &files.embedder(), threads)?;
        let load_ms = started.elapsed().as_secs_f64() * 1e3;
        tracing::info!(detector = ?detector, load_ms, runtime = %rt.version, "face models loaded");
        Ok(FaceModels {
            detector_kind: detector,
            detector: Mutex::new(detect::Detector::new(d)),
            embedder: Mutex::new(e),
            load_ms,
            runtime_version: rt.version.clone(),
        })
    }

    /// Which detector this is.
    pub fn detector_kind(&self) -> DetectorKind {
        self.detector_kind
    }

    /// Faces in `img`, in its pixels, best first: searched at the four quarter turns
    /// and, for a photo larger than the detector's input, in full-resolution tiles
    /// ([`crate::search`]).
    pub fn detect(&self, img: &RgbImage) -> Result<Vec<Detection>, FaceError> {
        Ok(self.search_with(img, Thoroughness::Gated)?.faces)
    }

    /// [`Self::detect`] with each face's other views and what the search did: what the
    /// product runs.
    pub fn search(&self, img: &RgbImage) -> Result<crate::search::Found, FaceError> {
        self.search_with(img, Thoroughness::Gated)
    }

    /// The landmarks of `face`'s second looks in `img` ([`crate::search::second_looks`]).
    pub fn second_looks(
        &self,
        img: &RgbImage,
        face: &Detection,
    ) -> Result<Vec<crate::search::Landmarks>, FaceError> {
        let mut s = self.detector.lock().unwrap_or_else(|p| p.into_inner());
        crate::search::second_looks(img, face, |part| {
            detect::run(&mut s, self.detector_kind, part)
        })
    }

    /// The search as thorough as `how` says.
    pub fn search_with(
        &self,
        img: &RgbImage,
        how: Thoroughness,
    ) -> Result<crate::search::Found, FaceError> {
        let mut s = self.detector.lock().unwrap_or_else(|p| p.into_inner());
        crate::search::search(img, how, |part| {
            detect::run(&mut s, self.detector_kind, part)
        })
    }

    /// One detector pass over `img` as it is (scaled to the detector's input size): what
    /// a single upright search finds, for comparisons.
    pub fn detect_once(&self, img: &RgbImage) -> Result<Vec<Detection>, FaceError> {
        let mut s = self.detector.lock().unwrap_or_else(|p| p.into_inner());
        detect::run(&mut s, self.detector_kind, img)
    }

    /// The unit-length embedding of the face with these landmarks.
    pub fn embed(&self, img: &RgbImage, landmarks: &[[f32; 2]; 5]) -> Result<Vec<f32>, FaceError> {
        let mut s = self.embedder.lock().unwrap_or_else(|p| p.into_inner());
        embed::run(&mut s, img, landmarks)
    }
}
