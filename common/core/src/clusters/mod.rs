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
use crate::privacy::{Basis, FaceDecision, cosine, normalized};
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
    /// Unit-length embedding, stored one signed byte a number (`encoding::rep_vector`).
    #[serde(with = "encoding::rep_vector")]
    pub embedding: Vec<f32>,
}

/// What a face's search for its cluster reads of every cluster of the project: its
/// centroid, and for the listing's order its photos. Written when a cluster starts and
/// when its centroid has moved past [`HEAD_DRIFT`] since last written, never for a join
/// that leaves it where it was: the heads of a project share a few partitions, and a
/// person in every photo of a burst must not write theirs once a photo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Head {
    /// The cluster.
    pub id: ClusterId,
    /// The project.
    pub project: ProjectId,
    /// The cluster's centroid when the head was written.
    #[serde(with = "encoding::hex_i8")]
    pub centroid: Vec<f32>,
    /// Photos counted when the head was written (the listing's order).
    pub photos: u64,
    /// Created.
    pub created_at: Millis,
}

/// Cosine between a cluster's centroid and the one its head holds under which the head
/// is written again. A new view moves a centroid of `n` views by about 0.7/`n` radians,
/// so a head is rewritten for its first half-dozen views and then rarely; a face's
/// similarity to a head within it is off by at most the angle's sine (0.1), small beside
/// the gap between [`JOIN_AT`] and strangers (0.17–0.24).
pub const HEAD_DRIFT: f32 = 0.995;

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
    /// Members that matched a subject only under a threshold lowered for their evidence
    /// when they joined: the views a release would show.
    #[serde(default)]
    pub leaning: u64,
    /// The unit-length mean of its representatives; its [`Head`] holds it as last
    /// written, which a face is compared with to join ([`nearest`]).
    #[serde(with = "encoding::hex_i8")]
    pub centroid: Vec<f32>,
    /// Clear representative views.
    #[serde(default)]
    pub clear_views: u32,
    /// Representative views, clear ones first kept.
    #[serde(default)]
    pub reps: Vec<Rep>,
    /// Subjects the cluster stood for when a photo holding its views was erased, each
    /// with the best clear view's similarity then ([`Cluster::remember`]). The cluster
    /// keeps standing for them while they are enrolled, whatever views remain: erasing
    /// the photos that hold a person's clearest views (which any key of the tenant may
    /// do) must not show the hard views of them that those views had blurred. Only
    /// removing the subject (an admin's act, audited) ends it. Ids and numbers, no
    /// embedding: an erasure still leaves none of the erased faces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stood_for: Vec<(SubjectId, f32)>,
    /// Created.
    pub created_at: Millis,
    /// Last joined or changed.
    pub updated_at: Millis,
}

impl Cluster {
    /// Its head as it would be written now.
    pub fn head(&self) -> Head {
        Head {
            id: self.id,
            project: self.project,
            centroid: self.centroid.clone(),
            photos: self.photos,
            created_at: self.created_at,
        }
    }

    /// Whether its head must be written again: its centroid moved past [`HEAD_DRIFT`]
    /// from `written`.
    pub fn head_drifted(&self, written: &[f32]) -> bool {
        written.len() != self.centroid.len() || cosine(&self.centroid, written) < HEAD_DRIFT
    }

    /// A cluster started by one face.
    pub fn new(project: ProjectId, now: Millis) -> Self {
        Cluster {
            id: ClusterId::new(),
            project,
            faces: 0,
            photos: 0,
            leaning: 0,
            centroid: Vec::new(),
            clear_views: 0,
            reps: Vec::new(),
            stood_for: Vec::new(),
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
        self.leaning += u64::from(leaning(face));
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

    /// Keep standing for the subjects `before` (its standing before a photo's views are
    /// taken out) says it stands for ([`Cluster::stood_for`]): what an erasure calls
    /// before [`Cluster::forget`]. Pulling is the fail-closed direction, and an erasure
    /// is not a way to take it back.
    pub fn remember(&mut self, before: &Standing) {
        let Standing::Subjects(matched) = before else {
            return;
        };
        for (s, sim) in matched {
            match self.stood_for.iter_mut().find(|(x, _)| x == s) {
                Some(kept) => kept.1 = kept.1.max(*sim),
                None => self.stood_for.push((*s, *sim)),
            }
        }
    }

    /// Drop what `photo` gave: its representatives, and its faces from the counts
    /// (`faces` of them). Whether the cluster has nothing left to say anything with (no
    /// view and no subject it stood for: its standing is then `Unsure`, as for a face in
    /// no cluster): it can go.
    pub fn forget(&mut self, photo: PhotoId, faces: u64) -> bool {
        self.reps.retain(|r| r.photo != photo);
        self.faces = self.faces.saturating_sub(faces);
        self.photos = self.photos.saturating_sub(1);
        self.leaning = self.leaning.min(self.faces);
        self.summarise();
        self.reps.is_empty() && self.stood_for.is_empty()
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
    matched_at_base(face).is_some_and(|at_base| !at_base)
}

/// Whether `face` is a clear view that matches a subject at the project's own threshold:
/// kept among its cluster's representatives whatever else they hold, so the cluster
/// cannot stop saying whose it is.
pub fn confident(face: &Face) -> bool {
    is_clear(face) && matched_at_base(face) == Some(true)
}

/// For a face decided a match: whether some candidate reaches the project's own
/// threshold (not only the one lowered for its evidence). `None` for any other decision.
fn matched_at_base(face: &Face) -> Option<bool> {
    let rule = face.rule?;
    let base = rule.threshold + rule.lowered_by;
    match &face.decision {
        FaceDecision::Subject { similarity, .. } => Some(*similarity >= base),
        FaceDecision::Ambiguous { candidates } => Some(candidates.iter().any(|(_, s)| *s >= base)),
        _ => None,
    }
}

/// The cluster `embedding` joins among `clusters`: the one whose centroid it resembles
/// most, if at [`JOIN_AT`] or more.
pub fn nearest(clusters: &[Head], embedding: &[f32]) -> Option<(usize, f32)> {
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

mod encoding;
mod standing;
#[cfg(test)]
mod tests;

pub use standing::{Ruling, Standing, apply, rule};
