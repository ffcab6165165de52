//! The same person across a project's photos.
//!
//! Each face is decided against the opted-out subjects on its own evidence, and a hard
//! view (small, blurred, turned) of an opted-out person may fall short of the threshold
//! while their clear views in the same project match it; a bystander's borderline view may
//! reach a threshold lowered for its size while twenty clear views of the same bystander
//! match nobody. A **cluster** gathers the faces of one person in a project: a face joins
//! the cluster whose centroid it resembles at [`JOIN_AT`], or starts one. The cluster keeps
//! up to [`MAX_REPS`] representative views (clear ones first), and from them, against the
//! subjects of the moment, its [`Standing`]:
//!
//! - a clear view that reaches the project's own threshold for a subject makes the whole
//!   cluster that subject's: its members that fell short are blurred too ([`Ruling::Pulled`]);
//! - at least [`RELEASE_AFTER`] clear views, none of which reaches the threshold, release
//!   a member that matched only under a threshold lowered for its weak evidence, when the
//!   clear views' median similarity to that subject is below even the member's lowered
//!   threshold ([`Ruling::Released`]). A weak view keeps a fraction of its person's
//!   similarity ([`crate::privacy::KEPT_BY_SIZE`]); were the person the subject, their
//!   clear views would score above the weak one, not below what it was held to. Those clear
//!   views are already published unblurred: releasing one more view of the same face
//!   reveals nobody new.
//!
//! Pulling is the fail-closed direction and wins over releasing. A cluster never releases a
//! face that reaches the project's own threshold, nor one decided with no threshold.
//!
//! Invariant: a cluster holds embeddings only of faces whose photos exist; erasing a photo
//! removes its representatives (`tessera_jobs::photos::clusters::forget_photo`), and
//! erasing the project erases every cluster.

use crate::Millis;
use crate::ids::{ClusterId, PhotoId, ProjectId, SubjectId};
use crate::photo::Face;
use crate::privacy::{
    Basis, FaceDecision, MatchPolicy, SubjectEmbeddings, best_similarity, cosine, normalized,
};
use serde::{Deserialize, Serialize};

/// Similarity to a cluster's centroid at which a face joins it: the recommended matching
/// threshold, which the measurements behind [`crate::privacy::KEPT_BY_SIZE`] place above
/// every stranger at every size (the largest similarity of any face to a person it is not
/// was 0.17–0.24) and below the same person down to about 25 px (median 0.54). A centroid
/// averages many views, so it resembles a new view of its person at least as much as one
/// view does; a stranger is no closer to an average than to a face.
pub const JOIN_AT: f32 = crate::privacy::RECOMMENDED_THRESHOLD;
/// Representative views a cluster keeps (each 128 numbers): enough for [`RELEASE_AFTER`]
/// clear views with a margin, and about 24 KB in the record whatever the cluster's size.
pub const MAX_REPS: usize = 24;
/// Clear views that must match nobody before a cluster releases a borderline member: with
/// twenty, the median is not one lucky or unlucky photo.
pub const RELEASE_AFTER: usize = 20;

/// One representative view of a cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rep {
    /// The photo it is in.
    pub photo: PhotoId,
    /// Its index among the photo's faces.
    pub face: u32,
    /// Large enough that its person loses nothing measurable ([`Basis::Clear`]).
    pub clear: bool,
    /// Clear, and matched a subject at the project's own threshold when it joined: never
    /// replaced by another view, so a cluster cannot stop saying whose it is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub matched: bool,
    /// Unit-length embedding, as little-endian `f32` in hex (a fixed 8 characters a
    /// number, where JSON numbers take up to 12).
    #[serde(with = "hex_f32")]
    pub embedding: Vec<f32>,
}

/// One person as a project's photos show them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    /// Id.
    pub id: ClusterId,
    /// The project.
    pub project: ProjectId,
    /// Faces that joined it, as of the last change to its views (a join that changes
    /// none writes only the counters, `records::cluster_count_key`).
    pub faces: u64,
    /// Photos those faces are in, likewise.
    pub photos: u64,
    /// Members that were shown when they joined (decided nobody opted out).
    #[serde(default)]
    pub shown: u64,
    /// Members that matched a subject only under a threshold lowered for their evidence
    /// when they joined: the views a release would show.
    #[serde(default)]
    pub leaning: u64,
    /// The unit-length mean of its representatives, which a face is compared with to
    /// join ([`nearest`]); kept with the counts so that finding a face's cluster reads
    /// about 1 KB a cluster, not its representatives.
    #[serde(with = "hex_i8")]
    pub centroid: Vec<f32>,
    /// Clear representative views.
    #[serde(default)]
    pub clear_views: u32,
    /// Representative views, clear ones first kept. Stored in a record of their own
    /// (`records::cluster_reps_key`) and read only for the clusters a photo's faces are
    /// in: empty in a cluster read from the listing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reps: Vec<Rep>,
    /// Created.
    pub created_at: Millis,
    /// Last joined or changed.
    pub updated_at: Millis,
}

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
    /// A cluster started by one face.
    pub fn new(project: ProjectId, now: Millis) -> Self {
        Cluster {
            id: ClusterId::new(),
            project,
            faces: 0,
            photos: 0,
            shown: 0,
            leaning: 0,
            centroid: Vec::new(),
            clear_views: 0,
            reps: Vec::new(),
            created_at: now,
            updated_at: now,
        }
    }

    /// The unit-length mean of its representatives (empty when it has none).
    fn mean_of_reps(&self) -> Vec<f32> {
        let Some(dim) = self.reps.first().map(|r| r.embedding.len()) else {
            return Vec::new();
        };
        let mut sum = vec![0.0f32; dim];
        for r in self.reps.iter().filter(|r| r.embedding.len() == dim) {
            for (s, x) in sum.iter_mut().zip(&r.embedding) {
                *s += x;
            }
        }
        normalized(&sum)
    }

    /// Clear representative views.
    pub fn clear_reps(&self) -> impl Iterator<Item = &Rep> {
        self.reps.iter().filter(|r| r.clear)
    }

    /// The centroid and the clear count, after the representatives changed.
    fn summarise(&mut self) {
        self.centroid = self.mean_of_reps();
        self.clear_views = self.clear_reps().count() as u32;
        self.updated_at = Millis::now();
    }

    /// Take `face` (index `index` of `photo`) as a member: counted, and kept as a
    /// representative while there is room, or in place of an unclear one when it is clear,
    /// or, when it `matched` a subject at the project's threshold, in place of any view
    /// that did not. `first_in_photo`: no other face of the photo joined before (a photo
    /// counts once).
    pub fn admit(
        &mut self,
        photo: PhotoId,
        index: u32,
        face: &Face,
        first_in_photo: bool,
        matched: bool,
    ) {
        self.faces += 1;
        self.photos += u64::from(first_in_photo);
        match &face.decision {
            FaceDecision::NotOptedOut { .. } => self.shown += 1,
            FaceDecision::Subject { .. } | FaceDecision::Ambiguous { .. } if leaning(face) => {
                self.leaning += 1
            }
            _ => {}
        }
        self.updated_at = Millis::now();
        if face.embedding.is_empty() {
            return;
        }
        let rep = Rep {
            photo,
            face: index,
            clear: is_clear(face),
            matched: matched && is_clear(face),
            embedding: face.embedding.clone(),
        };
        let slot = if self.reps.len() < MAX_REPS {
            None
        } else if rep.clear {
            self.reps.iter().position(|r| !r.clear).or_else(|| {
                rep.matched
                    .then(|| self.reps.iter().position(|r| !r.matched))
                    .flatten()
            })
        } else {
            return self.summarise();
        };
        match slot {
            Some(i) => self.reps[i] = rep,
            None if self.reps.len() < MAX_REPS => self.reps.push(rep),
            None => {}
        }
        self.summarise();
    }

    /// Drop what `photo` gave: its representatives, and its faces from the counts
    /// (`faces` of them). Whether the cluster has no view left to say anything with (its
    /// standing is then `Unsure`, as for a face in no cluster): it can go.
    pub fn forget(&mut self, photo: PhotoId, faces: u64) -> bool {
        self.reps.retain(|r| r.photo != photo);
        self.faces = self.faces.saturating_sub(faces);
        self.photos = self.photos.saturating_sub(1);
        self.shown = self.shown.min(self.faces);
        self.leaning = self.leaning.min(self.faces);
        self.summarise();
        self.reps.is_empty()
    }

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
    /// members that were shown; a release may show members that leaned to a match.
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
            (Standing::Nobody { .. }, Standing::Nobody { .. }) => false,
            (_, Standing::Nobody { .. }) => self.leaning > 0 && others,
            _ => false,
        }
    }
}

/// Whether `face` is clear enough to speak for its person.
pub fn is_clear(face: &Face) -> bool {
    !face.hard_to_recognise
        && face.evidence.is_some()
        && crate::privacy::expected_kept(face.evidence, false).1 == Basis::Clear
}

/// Whether `face`, decided a match, is one only under a threshold lowered for its
/// evidence: its best similarity stays under the project's own threshold.
fn leaning(face: &Face) -> bool {
    let Some(rule) = face.rule else {
        return false;
    };
    let base = rule.threshold + rule.lowered_by;
    match &face.decision {
        FaceDecision::Subject { similarity, .. } => *similarity < base,
        FaceDecision::Ambiguous { candidates } => candidates.iter().all(|(_, s)| *s < base),
        _ => false,
    }
}

/// The cluster `embedding` joins among `clusters`: the one whose centroid it resembles
/// most, if at [`JOIN_AT`] or more.
pub fn nearest(clusters: &[Cluster], embedding: &[f32]) -> Option<(usize, f32)> {
    if embedding.is_empty() {
        return None;
    }
    clusters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.centroid.len() == embedding.len())
        .map(|(i, c)| (i, cosine(&c.centroid, embedding)))
        .filter(|(_, s)| *s >= JOIN_AT)
        .max_by(|a, b| a.1.total_cmp(&b.1))
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

/// A unit vector as one signed byte a number (× 127), in hex: the head every join of a
/// growing cluster rewrites stays under 1 KB (one write unit, where `f32` took two), and
/// a similarity to it moves by under 0.01 (the load rehearsal's extrapolated peak put
/// the heads' hottest shard at 0.46 of a partition's write limit with `f32`).
mod hex_i8 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = v
            .iter()
            .map(|x| (x * 127.0).round().clamp(-127.0, 127.0) as i8 as u8)
            .collect();
        s.serialize_str(&hex::encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = hex::decode(&text).map_err(D::Error::custom)?;
        let v: Vec<f32> = bytes.iter().map(|b| f32::from(*b as i8) / 127.0).collect();
        Ok(crate::privacy::normalized(&v))
    }
}

mod hex_f32 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        s.serialize_str(&hex::encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = hex::decode(&text).map_err(D::Error::custom)?;
        if bytes.len() % 4 != 0 {
            return Err(D::Error::custom(
                "an embedding of a length not a multiple of 4 bytes",
            ));
        }
        let v: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if v.iter().any(|x| !x.is_finite()) {
            return Err(D::Error::custom(
                "an embedding with a number that is not finite",
            ));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::FracRect;
    use crate::privacy::Evidence;

    /// Exactly orthogonal for distinct seeds (below `dim`), so each similarity in these
    /// tests follows from the mixes.
    fn unit(seed: u32, dim: usize) -> Vec<f32> {
        let mut v = vec![0.0; dim];
        v[seed as usize % dim] = 1.0;
        v
    }

    /// `base` moved towards `other` by `t` (0: base, 1: other), unit length.
    fn mix(base: &[f32], other: &[f32], t: f32) -> Vec<f32> {
        normalized(
            &base
                .iter()
                .zip(other)
                .map(|(a, b)| a * (1.0 - t) + b * t)
                .collect::<Vec<_>>(),
        )
    }

    fn face(embedding: Vec<f32>, px: f32, subjects: &[SubjectEmbeddings], t: f32) -> Face {
        let mut f = Face {
            bbox: FracRect {
                x: 0.1,
                y: 0.1,
                w: 0.1,
                h: 0.1,
            },
            landmarks: [[0.0; 2]; 5],
            score: 0.9,
            embedding,
            views: Vec::new(),
            looked_again: true,
            hard_to_recognise: false,
            evidence: Some(Evidence { px, roll: 0.0 }),
            rule: None,
            decision: FaceDecision::FailClosed,
            cluster: None,
            ruling: None,
        };
        f.redecide(subjects, MatchPolicy::Threshold(t));
        f
    }

    #[test]
    fn a_clear_match_pulls_the_hard_views_of_its_person() {
        let person = unit(1, 128);
        let subject = SubjectEmbeddings {
            subject: SubjectId::new(),
            embeddings: vec![mix(&person, &unit(9, 128), 0.6)],
        };
        let subjects = std::slice::from_ref(&subject);
        let t = 0.363;
        let clear = face(mix(&person, &unit(2, 128), 0.1), 150.0, subjects, t);
        assert!(matches!(clear.decision, FaceDecision::Subject { .. }));
        // A hard view: far from the reference, close enough to the person's clear view.
        let mut hard = face(mix(&person, &unit(3, 128), 0.685), 30.0, subjects, t);
        assert!(
            matches!(hard.decision, FaceDecision::NotOptedOut { .. }),
            "{:?}",
            hard.decision
        );
        let mut c = Cluster::new(ProjectId::new(), Millis::now());
        c.admit(PhotoId::new(), 0, &clear, true, false);
        let (i, sim) = nearest(std::slice::from_ref(&c), &hard.embedding).expect("joins");
        assert_eq!(i, 0);
        assert!(sim >= JOIN_AT);
        hard.cluster = Some(c.id);
        let standing = c.standing(subjects, MatchPolicy::Threshold(t));
        assert!(matches!(standing, Standing::Subjects(ref s) if s[0].0 == subject.subject));
        rule(&mut hard, &standing, subjects, MatchPolicy::Threshold(t));
        assert!(hard.decision.blurred_in(None));
        assert_eq!(hard.decision.shown_to(), Some(subject.subject));
        assert!(matches!(hard.ruling, Some(Ruling::Pulled { .. })));
        // Under no threshold, a cluster changes nothing (everything is blurred anyway).
        let mut closed = hard.clone();
        closed.redecide(subjects, MatchPolicy::FailClosed);
        rule(&mut closed, &standing, subjects, MatchPolicy::FailClosed);
        assert_eq!(closed.decision, FaceDecision::FailClosed);
    }

    #[test]
    fn many_clear_views_of_nobody_release_a_view_matched_only_by_a_lowered_threshold() {
        let bystander = unit(4, 128);
        let subject = SubjectEmbeddings {
            subject: SubjectId::new(),
            embeddings: vec![unit(5, 128)],
        };
        let subjects = std::slice::from_ref(&subject);
        let policy = MatchPolicy::Threshold(0.363);
        let mut c = Cluster::new(ProjectId::new(), Millis::now());
        for i in 0..RELEASE_AFTER as u32 {
            let f = face(
                mix(&bystander, &unit(100 + i, 128), 0.2),
                140.0,
                subjects,
                0.363,
            );
            assert!(!f.decision.blurred_in(None));
            c.admit(PhotoId::new(), 0, &f, true, false);
        }
        // A small view that leans to the subject: between the lowered and the project's
        // threshold.
        let mut small = face(
            mix(&bystander, &subject.embeddings[0], 0.25),
            25.0,
            subjects,
            0.363,
        );
        let sim = small.similarity_to(&subject).unwrap();
        let rule_t = small.rule.unwrap().threshold;
        assert!(sim >= rule_t && sim < 0.363, "{sim} under {rule_t}");
        assert!(small.decision.blurred_in(None));
        assert!(nearest(std::slice::from_ref(&c), &small.embedding).is_some());
        small.cluster = Some(c.id);

        // One clear view short: nothing released.
        let mut short = c.clone();
        short.reps.pop();
        assert_eq!(short.standing(subjects, policy), Standing::Unsure);

        let standing = c.standing(subjects, policy);
        assert!(
            matches!(&standing, Standing::Nobody { clear_views, medians } if *clear_views == RELEASE_AFTER && medians[0].1.abs() < 0.01),
            "{standing:?}"
        );
        let mut released = small.clone();
        rule(&mut released, &standing, subjects, policy);
        assert!(!released.decision.blurred_in(None));
        assert!(matches!(released.ruling, Some(Ruling::Released { .. })));

        // Clear views that score, in the median, above what the weak view was held to
        // (under the threshold still) do not explain its match away: it stays blurred.
        let near = Standing::Nobody {
            clear_views: RELEASE_AFTER,
            medians: vec![(subject.subject, rule_t + 0.01)],
        };
        let mut kept = small.clone();
        rule(&mut kept, &near, subjects, policy);
        assert!(kept.decision.blurred_in(None));
        assert_eq!(kept.ruling, None);

        // A face that reaches the project's own threshold is never released.
        let mut sure = face(subject.embeddings[0].clone(), 25.0, subjects, 0.363);
        sure.cluster = Some(c.id);
        rule(&mut sure, &standing, subjects, policy);
        assert!(sure.decision.blurred_in(None));
        assert_eq!(sure.ruling, None);

        // Once a clear view matches the subject, pulling wins.
        let mut pulled = c.clone();
        let m = face(subject.embeddings[0].clone(), 140.0, subjects, 0.363);
        pulled.reps[0] = Rep {
            photo: PhotoId::new(),
            face: 0,
            clear: true,
            matched: true,
            embedding: m.embedding.clone(),
        };
        assert!(matches!(
            pulled.standing(subjects, policy),
            Standing::Subjects(_)
        ));
    }

    #[test]
    fn representatives_prefer_clear_views_and_go_with_their_photo() {
        let person = unit(6, 128);
        let mut c = Cluster::new(ProjectId::new(), Millis::now());
        let small_photo = PhotoId::new();
        for i in 0..MAX_REPS as u32 {
            c.admit(
                small_photo,
                i,
                &face(mix(&person, &unit(200 + i, 128), 0.2), 30.0, &[], 0.363),
                i == 0,
                false,
            );
        }
        assert_eq!(c.clear_reps().count(), 0);
        let clear_photo = PhotoId::new();
        c.admit(
            clear_photo,
            0,
            &face(person.clone(), 120.0, &[], 0.363),
            true,
            false,
        );
        assert_eq!(c.reps.len(), MAX_REPS);
        assert_eq!(c.clear_reps().count(), 1);
        assert_eq!((c.faces, c.photos), (MAX_REPS as u64 + 1, 2));
        assert!(!c.forget(small_photo, MAX_REPS as u64));
        assert_eq!(c.reps.len(), 1);
        assert!(c.reps.iter().all(|r| r.photo == clear_photo));
        assert!(c.forget(clear_photo, 1));
        // Full of clear views: another clear one is not kept, unless it matched a
        // subject at the threshold, and that one is never replaced.
        let mut full = Cluster::new(ProjectId::new(), Millis::now());
        for i in 0..MAX_REPS as u32 {
            let f = face(mix(&person, &unit(300 + i, 128), 0.2), 120.0, &[], 0.363);
            full.admit(PhotoId::new(), 0, &f, true, false);
        }
        let late = PhotoId::new();
        full.admit(
            late,
            0,
            &face(person.clone(), 120.0, &[], 0.363),
            true,
            false,
        );
        assert!(full.reps.iter().all(|r| r.photo != late));
        full.admit(
            late,
            1,
            &face(person.clone(), 120.0, &[], 0.363),
            false,
            true,
        );
        assert_eq!(full.reps.iter().filter(|r| r.matched).count(), 1);
        for i in 0..MAX_REPS as u32 {
            let f = face(mix(&person, &unit(400 + i, 128), 0.2), 120.0, &[], 0.363);
            full.admit(PhotoId::new(), 0, &f, true, true);
        }
        assert!(
            full.reps.iter().any(|r| r.photo == late),
            "a matched view stays"
        );
        // Stored as hex, read back exactly.
        let mut c = Cluster::new(ProjectId::new(), Millis::now());
        c.admit(
            clear_photo,
            0,
            &face(person.clone(), 120.0, &[], 0.363),
            true,
            false,
        );
        let back: Cluster = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back.reps, c.reps);
        assert_eq!(
            (back.id, back.faces, back.clear_views),
            (c.id, c.faces, c.clear_views)
        );
        // The centroid is kept to a byte a number: within 0.01 of itself.
        assert!(cosine(&back.centroid, &c.centroid) > 0.99);
        assert!(
            serde_json::to_string(&Cluster {
                reps: Vec::new(),
                ..c.clone()
            })
            .unwrap()
            .len()
                < 1000
        );
        let mut bad = serde_json::to_value(&c).unwrap();
        bad["reps"][0]["embedding"] = "0000807f".into();
        assert!(
            serde_json::from_value::<Cluster>(bad).is_err(),
            "infinity refused"
        );
    }

    #[test]
    fn a_new_match_calls_for_redecision_only_when_others_are_in_the_cluster() {
        let s = SubjectId::new();
        let mut c = Cluster::new(ProjectId::new(), Millis::now());
        c.faces = 1;
        let matched = Standing::Subjects(vec![(s, 0.5)]);
        assert!(!c.calls_for_redecision(&Standing::Unsure, &matched, 1));
        c.faces = 3;
        assert!(c.calls_for_redecision(&Standing::Unsure, &matched, 1));
        assert!(!c.calls_for_redecision(&matched, &matched, 1));
        let nobody = Standing::Nobody {
            clear_views: 20,
            medians: Vec::new(),
        };
        assert!(
            !c.calls_for_redecision(&Standing::Unsure, &nobody, 1),
            "nothing leans"
        );
        c.leaning = 1;
        assert!(c.calls_for_redecision(&Standing::Unsure, &nobody, 1));
        assert!(!c.calls_for_redecision(&nobody, &nobody, 1));
    }
}
