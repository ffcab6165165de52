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

/// How much lower the threshold is for a face that is hard to recognise (tilted past
/// ~15° or under ~48 px): its alignment is worse, so its similarity to the right person
/// comes out lower (measured with `tessera bench privacy`: heads tilted 35° matched their
/// opted-out person at 0.29–0.36 against a threshold of 0.363, while a second recognizer
/// still knew them). Leaning toward blurring there costs little: faces of other people
/// score below 0.2 against an opted-out person in the same measurements.
pub const HARD_FACE_MARGIN: f32 = 0.1;

impl MatchPolicy {
    /// The same policy with the threshold lowered by `margin` (fail closed stays so).
    pub fn lowered(self, margin: f32) -> Self {
        match self {
            MatchPolicy::Threshold(t) => MatchPolicy::Threshold(t - margin),
            other => other,
        }
    }

    /// The policy for a project's configured threshold.
    pub fn from_threshold(t: Option<f32>) -> Self {
        match t {
            Some(t) if t.is_finite() => MatchPolicy::Threshold(t),
            _ => MatchPolicy::FailClosed,
        }
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
        .filter_map(|s| {
            s.embeddings
                .iter()
                .flat_map(|e| views.iter().map(move |v| cosine(v, e)))
                .max_by(f32::total_cmp)
                .map(|best| (s.subject, best))
        })
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
}
