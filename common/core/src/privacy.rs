//! The privacy rules: who a face is, against one project's opted-out subjects, and in
//! which files it must be blurred.
//!
//! Matching is biased toward blurring: a missed match publishes someone who asked not
//! to be shown, while a false match only blurs a face that could have stayed. So a face
//! similar enough to two subjects is blurred in every file, their own included, and a
//! project without a configured threshold fails closed: every face is blurred in every
//! file and no match is recorded.

use crate::ids::SubjectId;
use serde::{Deserialize, Serialize};

/// One opted-out subject's reference embeddings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubjectEmbeddings {
    /// The subject.
    pub subject: SubjectId,
    /// Unit-length embeddings of their reference photos.
    pub embeddings: Vec<Vec<f32>>,
}

/// How faces are decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MatchPolicy {
    /// No threshold is configured: blur every face everywhere, match nobody.
    FailClosed,
    /// Cosine similarity at or above this is a match.
    Threshold(f32),
}

/// The threshold to start from: SFace's published operating point, which
/// `tessera bench privacy --curve` found inside the range where no decision showed an
/// opted-out face and no case blurred more than 5 % of its bystanders (0.30–0.475 with
/// the enlarged search of small faces; see the table in docs/measuring.md).
pub const RECOMMENDED_THRESHOLD: f32 = 0.363;

/// What a face offers to recognise it by, as the detector found it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The larger side of its box, in pixels of the upright photo.
    pub px: f32,
    /// Head roll from the eyes' landmarks, in degrees (signed; 0 is level).
    pub roll: f32,
}

/// How much of their similarity to their own reference the same person keeps at a face
/// size: `(face px, fraction kept)`, ascending, interpolated linearly, the first value held
/// below it and all of it kept from the last size up. A face's embedding loses detail as
/// it shrinks, and its similarity to *any* reference shrinks with it, roughly in
/// proportion (strangers' scores shrank too); so a face that keeps a fraction `r` is held
/// to `r` × the threshold, which asks of it what the threshold asks of a clear face.
///
/// Measured with `tessera bench privacy --curve --photos 3` (its similarity table): the
/// median similarity of opted-out faces to their own reference, enrolled from another
/// picture of them, at each size as the detector boxed it, over the same faces at 92 px
/// (0.943): 25 px 0.540, 32 px 0.731, 41 px 0.862, 63 px 0.930. The largest similarity of
/// any face to an opted-out person it is not stayed at 0.17–0.24 at every size, so the
/// lowest threshold this gives at the recommended one (0.57 × 0.363 = 0.21) still sits
/// above the strangers at 24 px (0.17).
///
/// Head roll is not in the rule: faces turned a quarter or half turn, or tilted 60–120°,
/// kept 0.98–1.0 of their similarity once the search had turned them upright, and a 35°
/// tilt kept 0.97 while its landmarks showed 4° of roll, as level as an upright face's.
pub const KEPT_BY_SIZE: &[(f32, f32)] = &[
    (25.0, 0.573),
    (32.0, 0.775),
    (41.0, 0.914),
    (63.0, 0.986),
    (92.0, 1.0),
];

/// The fraction of a clear face's similarity a face is expected to keep, and why. Rows
/// written before faces carried their [`Evidence`] only know whether the face was small
/// or tilted; such a face is held to the smallest fraction measured (the rule leaning
/// toward blurring where it knows least).
pub fn expected_kept(evidence: Option<Evidence>, hard: bool) -> (f32, Basis) {
    let Some(e) = evidence.filter(|e| e.px.is_finite()) else {
        let least = KEPT_BY_SIZE.iter().map(|(_, k)| *k).fold(1.0, f32::min);
        return if hard {
            (least, Basis::Unmeasured)
        } else {
            (1.0, Basis::Clear)
        };
    };
    let size = interpolate(KEPT_BY_SIZE, e.px);
    if size < 1.0 {
        (size, Basis::Small)
    } else {
        (1.0, Basis::Clear)
    }
}

fn interpolate(table: &[(f32, f32)], x: f32) -> f32 {
    let Some(&(x0, y0)) = table.first() else {
        return 1.0;
    };
    if x <= x0 {
        return y0;
    }
    for w in table.windows(2) {
        let ((a, ya), (b, yb)) = (w[0], w[1]);
        if x <= b {
            return ya + (yb - ya) * (x - a) / (b - a);
        }
    }
    1.0
}

/// Why a face's threshold is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Large enough that the same person loses nothing measurable.
    Clear,
    /// Small: what the same person keeps at its size.
    Small,
    /// Found before faces carried their size and roll, and then called small or tilted:
    /// the least measured.
    Unmeasured,
}

/// The threshold a face was decided at, and why: the project's threshold is what a clear
/// face must reach, and a face that shows less of its person is held to the same share of
/// it as the same person was measured to keep at its size. So one threshold means
/// one thing for every face: how sure a match must be, not how clear the photo is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MatchRule {
    /// The threshold this face was decided at.
    pub threshold: f32,
    /// How far below the project's threshold.
    pub lowered_by: f32,
    /// The fraction of a clear face's similarity the face is expected to keep.
    pub kept: f32,
    /// Why.
    pub basis: Basis,
}

/// A [`MatchRule`] as shown to people: per face, in the API and the manifest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleReport {
    /// The threshold the face was decided at.
    pub threshold: f32,
    /// How far below the project's threshold.
    pub lowered_by: f32,
    /// The fraction of a clear face's similarity the face is expected to keep.
    pub kept: f32,
    /// Why.
    pub basis: Basis,
    /// The face's size as found, when recorded.
    pub face_px: Option<f32>,
    /// Its head roll as found, when recorded.
    pub roll_deg: Option<f32>,
    /// The reason in one sentence.
    pub why: String,
}

impl MatchRule {
    /// The rule for a face with `evidence` (or, in an older row, only `hard`) under
    /// `policy`; `None` when no threshold is set (every face blurred).
    pub fn for_face(policy: MatchPolicy, evidence: Option<Evidence>, hard: bool) -> Option<Self> {
        let MatchPolicy::Threshold(t) = policy else {
            return None;
        };
        let (kept, basis) = expected_kept(evidence, hard);
        // Scaling a threshold at or below zero would raise it: such a project already
        // matches nearly every face, and a small one is held to the same.
        let threshold = if t > 0.0 { t * kept } else { t };
        Some(MatchRule {
            threshold,
            lowered_by: t - threshold,
            kept,
            basis,
        })
    }

    /// The rule as the API and the manifest show it, with its reason in words.
    pub fn report(&self, evidence: Option<Evidence>) -> RuleReport {
        RuleReport {
            threshold: self.threshold,
            lowered_by: self.lowered_by,
            kept: self.kept,
            basis: self.basis,
            face_px: evidence.map(|e| e.px.round()),
            roll_deg: evidence.map(|e| e.roll.round()),
            why: self.explain(evidence),
        }
    }

    /// One sentence for a person reviewing the photo.
    pub fn explain(&self, evidence: Option<Evidence>) -> String {
        let at = format!("decided at similarity {:.3}", self.threshold);
        let kept = self.kept * 100.0;
        let px = evidence.map_or(0.0, |e| e.px);
        match self.basis {
            Basis::Clear => format!("{at}, the project's threshold: the face is clear"),
            Basis::Small => format!(
                "{at}, {kept:.0} % of the project's: the same person at {px:.0} px was measured to keep {kept:.0} % of their similarity"
            ),
            Basis::Unmeasured => format!(
                "{at}, {kept:.0} % of the project's: the face was found small or tilted before sizes were recorded, so the least share measured applies"
            ),
        }
    }
}

impl MatchPolicy {
    /// The policy for a project's configured threshold.
    pub fn from_threshold(t: Option<f32>) -> Self {
        match t {
            Some(t) if t.is_finite() => MatchPolicy::Threshold(t),
            _ => MatchPolicy::FailClosed,
        }
    }

    /// Whether faces are compared with anyone at all: only under a threshold. A project
    /// without one blurs every face and recognises nobody, so the faces in its photos are
    /// found but never embedded (it makes no biometric template of its bystanders, data
    /// it has no use for); they are embedded when a threshold is set, as every photo is
    /// decided again. (Opted-out people's reference embeddings are kept either way: they
    /// are what the opt-out is.)
    pub fn recognises(self) -> bool {
        matches!(self, MatchPolicy::Threshold(_))
    }
}

/// What was decided about one face.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum FaceDecision {
    /// No threshold configured: blurred in every file; no match recorded.
    FailClosed,
    /// Not similar enough to any opted-out subject: shown.
    NotOptedOut {
        /// The best similarity seen (below the threshold), if there were subjects.
        best: Option<f32>,
    },
    /// One opted-out subject: blurred everywhere except in that subject's own file.
    Subject {
        /// Who.
        subject: SubjectId,
        /// Cosine similarity to their closest reference.
        similarity: f32,
    },
    /// Several subjects reach the threshold: blurred in every file, theirs included.
    Ambiguous {
        /// Each candidate with its similarity, best first.
        candidates: Vec<(SubjectId, f32)>,
    },
}

impl FaceDecision {
    /// Must this face be blurred in the file made for `variant` (`None`: the public file)?
    pub fn blurred_in(&self, variant: Option<SubjectId>) -> bool {
        match self {
            FaceDecision::FailClosed | FaceDecision::Ambiguous { .. } => true,
            FaceDecision::NotOptedOut { .. } => false,
            FaceDecision::Subject { subject, .. } => variant != Some(*subject),
        }
    }

    /// The subject whose own file shows this face, if any.
    pub fn shown_to(&self) -> Option<SubjectId> {
        match self {
            FaceDecision::Subject { subject, .. } => Some(*subject),
            _ => None,
        }
    }
}

/// Decide one face from its embedding.
pub fn decide(
    embedding: &[f32],
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) -> FaceDecision {
    decide_views(&[embedding], subjects, policy)
}

/// Decide one face seen several ways (the same face found at another quarter turn or in
/// another tile gives other landmarks, so another embedding): each subject is scored by
/// its best similarity over every view, so a view that recognises an opted-out person is
/// enough to blur them. With no view at all the face stays blurred (fail closed).
pub fn decide_views(
    views: &[&[f32]],
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) -> FaceDecision {
    let MatchPolicy::Threshold(threshold) = policy else {
        return FaceDecision::FailClosed;
    };
    if views.is_empty() {
        return FaceDecision::FailClosed;
    }
    // A damaged embedding (empty, not finite, or of another length than a subject's)
    // decides nothing: the face stays blurred rather than compared wrongly.
    let damaged = |v: &[f32]| v.is_empty() || v.iter().any(|x| !x.is_finite());
    if views.iter().any(|v| damaged(v))
        || subjects
            .iter()
            .flat_map(|s| &s.embeddings)
            .any(|e| damaged(e) || views.iter().any(|v| v.len() != e.len()))
    {
        return FaceDecision::FailClosed;
    }
    let mut scored: Vec<(SubjectId, f32)> = subjects
        .iter()
        .filter_map(|s| best_similarity(views, s).map(|best| (s.subject, best)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let best = scored.first().map(|s| s.1);
    let candidates: Vec<_> = scored.into_iter().filter(|s| s.1 >= threshold).collect();
    match candidates.len() {
        0 => FaceDecision::NotOptedOut { best },
        1 => FaceDecision::Subject {
            subject: candidates[0].0,
            similarity: candidates[0].1,
        },
        _ => FaceDecision::Ambiguous { candidates },
    }
}

/// The best similarity of any of `views` to any of `subject`'s references.
pub fn best_similarity(views: &[&[f32]], subject: &SubjectEmbeddings) -> Option<f32> {
    subject
        .embeddings
        .iter()
        .flat_map(|e| views.iter().map(move |v| cosine(v, e)))
        .max_by(f32::total_cmp)
}

/// `v` scaled to unit length (zeros stay zeros).
pub fn normalized(v: &[f32]) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter().map(|x| x / n).collect()
    } else {
        v.to_vec()
    }
}

/// Cosine similarity of two unit-length embeddings (their dot product).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        normalized(v)
    }

    #[test]
    fn decisions_lean_toward_blurring() {
        let a = SubjectId::new();
        let b = SubjectId::new();
        let subjects = vec![
            SubjectEmbeddings {
                subject: a,
                embeddings: vec![unit(&[1.0, 0.0, 0.0])],
            },
            SubjectEmbeddings {
                subject: b,
                embeddings: vec![unit(&[0.0, 1.0, 0.0]), unit(&[0.6, 0.8, 0.0])],
            },
        ];
        let t = MatchPolicy::Threshold(0.7);
        // Close to a only.
        let d = decide(&unit(&[1.0, 0.05, 0.0]), &subjects, t);
        assert!(matches!(d, FaceDecision::Subject { subject, .. } if subject == a));
        assert!(d.blurred_in(None) && d.blurred_in(Some(b)) && !d.blurred_in(Some(a)));
        // Close to both (b's second reference): blurred everywhere.
        let d = decide(&unit(&[0.9, 0.6, 0.0]), &subjects, t);
        assert!(matches!(d, FaceDecision::Ambiguous { ref candidates } if candidates.len() == 2));
        assert!(d.blurred_in(Some(a)) && d.blurred_in(Some(b)));
        // Nobody.
        let d = decide(&unit(&[0.0, 0.0, 1.0]), &subjects, t);
        assert!(matches!(d, FaceDecision::NotOptedOut { best: Some(_) }));
        assert!(!d.blurred_in(None));
        // No threshold: fail closed even for a perfect match, and no match recorded.
        let d = decide(&unit(&[1.0, 0.0, 0.0]), &subjects, MatchPolicy::FailClosed);
        assert_eq!(d, FaceDecision::FailClosed);
        assert!(d.blurred_in(Some(a)) && d.shown_to().is_none());
        assert_eq!(
            MatchPolicy::from_threshold(Some(f32::NAN)),
            MatchPolicy::FailClosed
        );
        // A damaged embedding decides nothing: NaN, empty, or of another length.
        for damaged in [vec![f32::NAN, 0.0, 1.0], vec![], vec![1.0, 0.0]] {
            let d = decide(&damaged, &subjects, t);
            assert_eq!(d, FaceDecision::FailClosed, "{damaged:?}");
        }
        let d = decide_views(&[&unit(&[0.0, 0.0, 1.0]), &[f32::NAN; 3]], &subjects, t);
        assert_eq!(
            d,
            FaceDecision::FailClosed,
            "one damaged view among good ones"
        );
    }

    #[test]
    fn a_face_is_held_to_what_the_same_person_keeps_at_its_size() {
        let t = MatchPolicy::Threshold(0.4);
        let at = |px: f32, roll: f32| {
            MatchRule::for_face(t, Some(Evidence { px, roll }), false).unwrap()
        };
        // A large level face: the project's threshold, nothing lowered.
        let clear = at(200.0, 2.0);
        assert_eq!(
            (clear.threshold, clear.lowered_by, clear.basis),
            (0.4, 0.0, Basis::Clear)
        );
        // What is kept is measured, a fraction, and never shrinks as the face grows: a
        // bigger face is never held to a lower threshold than a smaller one.
        let mut last = 0.0;
        for px in (8..=256).map(|p| p as f32) {
            let r = at(px, 0.0);
            assert!(
                r.kept > 0.0 && r.kept <= 1.0 && r.kept >= last - 1e-6,
                "{px} px: {r:?}"
            );
            assert!((r.threshold - 0.4 * r.kept).abs() < 1e-6);
            assert!((r.lowered_by - (0.4 - r.threshold)).abs() < 1e-6);
            last = r.kept;
        }
        let smallest = KEPT_BY_SIZE[0];
        assert_eq!(
            at(smallest.0 / 2.0, 0.0).kept,
            smallest.1,
            "held below the table"
        );
        // The smallest faces measured are held well below the threshold; roll is not in
        // the rule (a turned face is searched upright and keeps its similarity).
        assert!(at(24.0, 0.0).kept < 0.6, "{:?}", at(24.0, 0.0));
        assert_eq!(at(200.0, 90.0), at(200.0, 0.0));
        // Rows from before evidence was recorded: a hard face gets the least share
        // measured, a clear one all; no threshold decides nothing.
        let least = KEPT_BY_SIZE.iter().map(|x| x.1).fold(1.0, f32::min);
        let old = MatchRule::for_face(t, None, true).unwrap();
        assert_eq!((old.kept, old.basis), (least, Basis::Unmeasured));
        assert_eq!(
            MatchRule::for_face(t, None, false).unwrap().basis,
            Basis::Clear
        );
        assert_eq!(
            MatchRule::for_face(MatchPolicy::FailClosed, None, true),
            None
        );
        // A damaged evidence (not finite) is read as unknown.
        let nan = MatchRule::for_face(
            t,
            Some(Evidence {
                px: f32::NAN,
                roll: 0.0,
            }),
            true,
        )
        .unwrap();
        assert_eq!(nan.basis, Basis::Unmeasured);
        // A threshold at or below zero is never raised for a small face.
        let negative = MatchRule::for_face(
            MatchPolicy::Threshold(-0.2),
            Some(Evidence {
                px: 20.0,
                roll: 0.0,
            }),
            false,
        )
        .unwrap();
        assert_eq!(negative.threshold, -0.2);
        // Every rule explains itself.
        for r in [clear, at(20.0, 0.0), at(200.0, 60.0), at(20.0, 60.0), old] {
            assert!(
                r.explain(None).contains(&format!("{:.3}", r.threshold)),
                "{r:?}"
            );
        }
    }
}
