//! What a cluster says about its members against the subjects of the moment, and how
//! that changes a member's decision.

use super::{Cluster, RELEASE_AFTER};
use crate::ids::{ClusterId, SubjectId};
use crate::photo::Face;
use crate::privacy::{FaceDecision, MatchPolicy, SubjectEmbeddings, best_similarity};
use serde::{Deserialize, Serialize};

/// What a cluster says about its members, against the subjects of the moment.
#[derive(Debug, Clone, PartialEq)]
pub enum Standing {
    /// Clear views reach the project's threshold for these subjects (best first, with the
    /// best clear view's similarity).
    Subjects(Vec<(SubjectId, f32)>),
    /// At least [`RELEASE_AFTER`] clear views, and none reaches the threshold.
    Nobody {
        /// How many clear views say so.
        clear_views: usize,
        /// Per subject, the clear views' median similarity to them.
        medians: Vec<(SubjectId, f32)>,
    },
    /// Neither.
    Unsure,
}

/// Why a face's decision is not its own, as the API and the manifest show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ruling {
    /// Blurred: a clear view of the same person elsewhere in the project matches an
    /// opted-out subject at the project's threshold.
    Pulled {
        /// The cluster.
        cluster: ClusterId,
        /// Who.
        subject: SubjectId,
        /// The similarity of that clear view to the subject.
        similarity: f32,
    },
    /// Shown: it matched only under a threshold lowered for its weak evidence, and the
    /// clear views of the same person match nobody.
    Released {
        /// The cluster.
        cluster: ClusterId,
        /// How many clear views match nobody.
        clear_views: usize,
    },
}

impl Ruling {
    /// One sentence for a person reviewing the photo.
    pub fn explain(&self) -> String {
        match self {
            Ruling::Pulled { similarity, .. } => format!(
                "blurred with the rest of its person: a clear photo of the same person in this project matches an opted-out subject at similarity {similarity:.3}"
            ),
            Ruling::Released { clear_views, .. } => format!(
                "shown: it matched only under a threshold lowered for its size, and {clear_views} clear photos of the same person match nobody"
            ),
        }
    }
}

impl Cluster {
    /// What the cluster says about its members under `subjects` and `policy`.
    pub fn standing(&self, subjects: &[SubjectEmbeddings], policy: MatchPolicy) -> Standing {
        let MatchPolicy::Threshold(t) = policy else {
            return Standing::Unsure;
        };
        if !(t > 0.0 && t.is_finite()) {
            return Standing::Unsure;
        }
        let clear: Vec<&[f32]> = self.clear_reps().map(|r| r.embedding.as_slice()).collect();
        let mut matched: Vec<(SubjectId, f32)> = subjects
            .iter()
            .filter_map(|s| {
                clear
                    .iter()
                    .filter_map(|v| best_similarity(&[v], s))
                    .max_by(f32::total_cmp)
                    .filter(|best| *best >= t)
                    .map(|best| (s.subject, best))
            })
            .collect();
        // What it stood for when views that said so were erased, while still enrolled.
        for (s, sim) in &self.stood_for {
            if subjects.iter().any(|x| x.subject == *s) && !matched.iter().any(|(m, _)| m == s) {
                matched.push((*s, *sim));
            }
        }
        if !matched.is_empty() {
            matched.sort_by(|a, b| b.1.total_cmp(&a.1));
            return Standing::Subjects(matched);
        }
        if clear.len() < RELEASE_AFTER {
            return Standing::Unsure;
        }
        let medians = subjects
            .iter()
            .map(|s| {
                let mut sims: Vec<f32> = clear
                    .iter()
                    .map(|v| best_similarity(&[v], s).unwrap_or(f32::MAX))
                    .collect();
                sims.sort_by(f32::total_cmp);
                (s.subject, sims[sims.len() / 2])
            })
            .collect();
        Standing::Nobody {
            clear_views: clear.len(),
            medians,
        }
    }

    /// Whether the change from `before` to `after` (this cluster's standing before and
    /// after a face joined) may change the decision of a member in another photo, so that
    /// every photo must be decided again. A new subject among those it matches may blur
    /// members that were shown; a release may show members that leaned to a match, and a
    /// release that no longer holds must blur them again ([`Self::withdraws_release`]).
    pub fn calls_for_redecision(&self, before: &Standing, after: &Standing, own: u64) -> bool {
        let others = self.faces.saturating_sub(own) > 0;
        match (before, after) {
            (_, Standing::Subjects(now)) => {
                let had = |s: &SubjectId| match before {
                    Standing::Subjects(b) => b.iter().any(|(x, _)| x == s),
                    _ => false,
                };
                others && now.iter().any(|(s, _)| !had(s))
            }
            (Standing::Nobody { .. }, _) => others && self.withdraws_release(before, after),
            (_, Standing::Nobody { .. }) => self.leaning > 0 && others,
            _ => false,
        }
    }

    /// Whether going from `before` to `after` (this cluster's standing, `after` being
    /// `Unsure` for a cluster deleted with its last view) may take back a release that
    /// members were shown by: the cluster stops saying "nobody", or its clear views'
    /// median similarity to some subject rose, so a member's lowered threshold may no
    /// longer be above it. Members released under the old standing stay shown until their
    /// photos are decided again, so this errs to re-deciding: it does not know which
    /// members leaned, only that some did ([`Cluster::leaning`]).
    pub fn withdraws_release(&self, before: &Standing, after: &Standing) -> bool {
        let Standing::Nobody { medians: was, .. } = before else {
            return false;
        };
        if self.leaning == 0 {
            return false;
        }
        match after {
            Standing::Nobody { medians: now, .. } => now
                .iter()
                .any(|(s, m)| was.iter().find(|(x, _)| x == s).is_none_or(|(_, w)| m > w)),
            _ => true,
        }
    }
}

/// Apply its cluster's `standing` to `face`, as decided on its own evidence (by
/// [`Face::redecide`]), under `subjects` and `policy`: record the ruling, if any, and
/// change the decision it makes.
pub fn rule(
    face: &mut Face,
    standing: &Standing,
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) {
    face.ruling = None;
    let Some(cluster) = face.cluster else {
        return;
    };
    let MatchPolicy::Threshold(t) = policy else {
        return;
    };
    let own = |s: SubjectId| {
        subjects
            .iter()
            .find(|x| x.subject == s)
            .and_then(|x| face.similarity_to(x))
            .unwrap_or(0.0)
    };
    match standing {
        Standing::Subjects(matched) => {
            let (subject, similarity) = matched[0];
            let mut candidates: Vec<(SubjectId, f32)> = match &face.decision {
                FaceDecision::FailClosed => return,
                FaceDecision::NotOptedOut { .. } => Vec::new(),
                FaceDecision::Subject {
                    subject,
                    similarity,
                } => vec![(*subject, *similarity)],
                FaceDecision::Ambiguous { candidates } => candidates.clone(),
            };
            let before = candidates.len();
            for (s, _) in matched {
                if !candidates.iter().any(|(c, _)| c == s) {
                    candidates.push((*s, own(*s)));
                }
            }
            if candidates.len() == before {
                return;
            }
            candidates.sort_by(|a, b| b.1.total_cmp(&a.1));
            face.decision = if candidates.len() == 1 {
                FaceDecision::Subject {
                    subject: candidates[0].0,
                    similarity: candidates[0].1,
                }
            } else {
                FaceDecision::Ambiguous { candidates }
            };
            face.ruling = Some(Ruling::Pulled {
                cluster,
                subject,
                similarity,
            });
        }
        Standing::Nobody {
            clear_views,
            medians,
        } => {
            let candidates: Vec<(SubjectId, f32)> = match &face.decision {
                FaceDecision::Subject {
                    subject,
                    similarity,
                } => vec![(*subject, *similarity)],
                FaceDecision::Ambiguous { candidates } => candidates.clone(),
                _ => return,
            };
            let best = candidates.iter().map(|c| c.1).fold(f32::MIN, f32::max);
            let held_to = face.rule.map_or(t, |r| r.threshold);
            // Only what the lowered threshold matched: a face that reaches the project's
            // own threshold is a match whatever its cluster says. And only where the
            // person's clear views score, in the median, under what this view was held to.
            let explained = candidates.iter().all(|(s, _)| {
                medians
                    .iter()
                    .find(|(m, _)| m == s)
                    .is_some_and(|(_, median)| *median < held_to)
            });
            if best >= t || !explained {
                return;
            }
            face.decision = FaceDecision::NotOptedOut { best: Some(best) };
            face.ruling = Some(Ruling::Released {
                cluster,
                clear_views: *clear_views,
            });
        }
        Standing::Unsure => {}
    }
}

/// Apply to each of `faces` the standing of its cluster among `clusters` (read with their
/// representatives); a face whose cluster is not among them is decided on its own.
/// How many faces a cluster decided.
pub fn apply(
    faces: &mut [Face],
    clusters: &[Cluster],
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) -> usize {
    let standings: Vec<(ClusterId, Standing)> = clusters
        .iter()
        .map(|c| (c.id, c.standing(subjects, policy)))
        .collect();
    let mut ruled = 0;
    for f in faces.iter_mut() {
        f.ruling = None;
        let Some(s) = f
            .cluster
            .and_then(|id| standings.iter().find(|(c, _)| *c == id))
        else {
            continue;
        };
        rule(f, &s.1, subjects, policy);
        ruled += usize::from(f.ruling.is_some());
    }
    ruled
}
