//! Deciding a photo's faces against the project's opted-out subjects, looking again where
//! the answer is close.
//!
//! Every face is decided at the threshold its evidence calls for ([`Face::redecide`]).
//! The search embeds a face only from the detections it made anyway (the upright pass,
//! the turns and tiles that found it). A face whose best similarity to an opted-out
//! subject comes within [`LOOK_AGAIN_AT`] of its threshold without reaching it gets
//! second looks ([`tessera_faces::search::second_looks`]): crops levelled and enlarged,
//! whose landmarks align a tilted or small face far better. It is then decided again
//! over all its views. A face is looked at again once; its views are stored with it, so
//! a later re-blur never repeats them.
//!
//! Nothing is looked at again when nobody opted out or no threshold is set (every face is
//! blurred): there is no match to be unsure of. A later opt-out re-decides the photo from
//! its original, and looks again then.

use tessera_core::photo::Face;
use tessera_core::privacy::{FaceDecision, MatchPolicy, SubjectEmbeddings};
use tessera_faces::{Detection, FaceError, FaceModels};

/// The share of its threshold at which a face's best similarity is close enough to look
/// again. Measured with `tessera bench privacy --curve --only "tilted 35"` (4 scenes, 24
/// faces): the opted-out faces that second looks lifted over 0.363 scored 0.68–1.00 of
/// it before them (5 faces), and the faces of other people 0.23 (median), 0.47 (p90) and
/// 0.54 (max) of it; at 40 px in 12 MP no face needed them, strangers at most 0.46. Half
/// keeps a margin under the least lifted, and looks again at about one stranger in ten.
pub const LOOK_AGAIN_AT: f32 = 0.5;

/// What deciding cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decided {
    /// Faces looked at again.
    pub looked_again: usize,
    /// Of those, faces whose decision changed.
    pub changed: usize,
}

/// Whether `f`, as last decided, is shown with a match close enough to look again.
pub fn close_call(f: &Face) -> bool {
    let (Some(rule), FaceDecision::NotOptedOut { best: Some(best) }) = (f.rule, &f.decision) else {
        return false;
    };
    !f.looked_again && rule.threshold > 0.0 && *best >= rule.threshold * LOOK_AGAIN_AT
}

/// Decide every face of the upright `img` against `subjects` under `policy`, looking
/// again at the close calls first (see the module's doc).
pub fn decide(
    models: &FaceModels,
    img: &image::RgbImage,
    faces: &mut [Face],
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) -> Result<Decided, FaceError> {
    let mut out = Decided::default();
    for f in faces.iter_mut() {
        f.redecide(subjects, policy);
        if !close_call(f) {
            continue;
        }
        let before = f.decision.blurred_in(None);
        look_again(models, img, f)?;
        f.redecide(subjects, policy);
        out.looked_again += 1;
        out.changed += usize::from(f.decision.blurred_in(None) != before);
    }
    Ok(out)
}

/// Take `f`'s second looks in the upright `img`, put their embeddings first among its
/// views and mark it looked at (it is not decided again here). Nothing for a face already
/// looked at.
pub fn look_again(
    models: &FaceModels,
    img: &image::RgbImage,
    f: &mut Face,
) -> Result<(), FaceError> {
    if f.looked_again {
        return Ok(());
    }
    let looks = models.second_looks(img, &detection(f, img))?;
    for l in looks.iter().rev() {
        f.views.insert(0, models.embed(img, l)?);
    }
    f.looked_again = true;
    Ok(())
}

/// Whether deciding `faces` needs the detector and the photo's pixels: someone opted out,
/// a threshold is set, and some face has not been looked at again.
pub fn may_look_again(faces: &[Face], subjects: &[SubjectEmbeddings], policy: MatchPolicy) -> bool {
    matches!(policy, MatchPolicy::Threshold(_))
        && !subjects.is_empty()
        && faces.iter().any(|f| !f.looked_again)
}

/// The stored face as a detection in `img`'s pixels.
pub(super) fn detection(f: &Face, img: &image::RgbImage) -> Detection {
    let (w, h) = (img.width() as f32, img.height() as f32);
    let b = f.bbox;
    Detection {
        bbox: [b.x * w, b.y * h, (b.x + b.w) * w, (b.y + b.h) * h],
        landmarks: f.landmarks.map(|[x, y]| [x * w, y * h]),
        score: f.score,
    }
}
