//! Made photos decided at trial thresholds, for the tests and benchmarks that need a face
//! decided a given way on its own (a hard view shown, a borderline view blurred) before
//! checking what the project's other photos change about it.
//!
//! A face is searched once ([`measure`]); deciding it at a threshold ([`decided`]) takes
//! the same steps as [`super::decide::decide`] (its own rule, then its second looks if the
//! call is close), with the second looks taken once up front, so a scan over thresholds
//! ([`threshold_where`]) costs no model run.

use super::scenes::{self, Portrait, SceneSpec, Stored};
use super::{decide, faces};
use image::RgbImage;
use tessera_core::photo::Face;
use tessera_core::privacy::{MatchPolicy, RECOMMENDED_THRESHOLD, SubjectEmbeddings};
use tessera_faces::{FaceError, FaceModels};

/// Why a trial could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// The portrait shows no face the detector finds.
    #[error("the portrait shows no face the detector finds; use one with a clear face")]
    NoFace,
    /// A trial photo does not decode.
    #[error("a trial photo does not decode: {0}")]
    Decode(String),
    /// A face model failed.
    #[error(transparent)]
    Faces(#[from] FaceError),
}

/// `pixels` and their one face as the product's detector finds it, mirrored if asked.
pub fn portrait(
    models: &FaceModels,
    mut pixels: RgbImage,
    mirrored: bool,
) -> Result<Portrait, TrialError> {
    if mirrored {
        pixels = image::imageops::flip_horizontal(&pixels);
    }
    let face = models
        .detect_once(&pixels)?
        .into_iter()
        .next()
        .map(|d| d.bbox)
        .ok_or(TrialError::NoFace)?;
    Ok(Portrait { pixels, face })
}

/// A 960 × 720 upright JPEG of `count` faces of `who` on `background`, `px` high,
/// softened by a Gaussian of `sigma` px (0: sharp), placed with `seed`.
pub fn photo(
    who: &Portrait,
    background: &RgbImage,
    count: usize,
    px: u32,
    sigma: f32,
    seed: u64,
) -> Vec<u8> {
    let s = scenes::make(
        std::slice::from_ref(who),
        background,
        &SceneSpec {
            width: 960,
            height: 720,
            face_px: px,
            face_px_max: px,
            tilt_deg: 0.0,
            people: vec![0; count],
            stored: Stored::Upright,
            seed,
        },
    );
    if sigma <= 0.0 {
        return s.jpeg;
    }
    let img = image::load_from_memory(&s.jpeg)
        .expect("a made scene decodes")
        .to_rgb8();
    let soft = image::imageops::blur(&img, sigma);
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
        .encode_image(&soft)
        .expect("JPEG encoding into memory");
    out
}

/// The faces the pipeline finds in a photo, each as searched and as looked at again.
#[derive(Debug, Clone)]
pub struct Measured {
    /// As the search found them.
    pub plain: Vec<Face>,
    /// The same with their second looks among their views.
    pub looked: Vec<Face>,
}

/// Search `jpeg` for faces and take every face's second looks.
pub fn measure(models: &FaceModels, jpeg: &[u8]) -> Result<Measured, TrialError> {
    let img = image::load_from_memory(jpeg)
        .map_err(|e| TrialError::Decode(e.to_string()))?
        .to_rgb8();
    // Embedded: the faces are decided at whichever threshold the test chooses.
    let plain = faces::faces_in(models, &img, MatchPolicy::Threshold(RECOMMENDED_THRESHOLD))?;
    let mut looked = plain.clone();
    for f in &mut looked {
        decide::look_again(models, &img, f)?;
    }
    Ok(Measured { plain, looked })
}

/// What [`decide::decide`] decides for `m` against `subject` at threshold `t`.
pub fn decided(m: &Measured, subject: &SubjectEmbeddings, t: f32) -> Vec<Face> {
    let subjects = std::slice::from_ref(subject);
    let policy = MatchPolicy::Threshold(t);
    m.plain
        .iter()
        .zip(&m.looked)
        .map(|(p, l)| {
            let mut f = p.clone();
            f.redecide(subjects, policy);
            if decide::close_call(&f) {
                f = l.clone();
                f.redecide(subjects, policy);
            }
            f
        })
        .collect()
}

/// The middle of the longest run of thresholds in 0.05..0.95 (steps of 0.005) for which
/// `ok` holds, if any.
pub fn threshold_where(ok: impl Fn(f32) -> bool) -> Option<f32> {
    let steps: Vec<f32> = (10..190).map(|i| i as f32 * 0.005).collect();
    let (mut best, mut run): ((usize, usize), Option<usize>) = ((0, 0), None);
    for (i, t) in steps.iter().enumerate() {
        if ok(*t) {
            let start = *run.get_or_insert(i);
            if i + 1 - start > best.1 - best.0 {
                best = (start, i + 1);
            }
        } else {
            run = None;
        }
    }
    (best.1 > best.0).then(|| steps[(best.0 + best.1 - 1) / 2])
}
