//! Photos, their faces and files, and the people who asked not to be published.
//!
//! A photo row is the one place that says what is published. Its invariants:
//! - every derived object key contains the row's `variant_version`, which is bumped
//!   before any file of a new version is written, so a key a row points at is never
//!   overwritten;
//! - keys are staged on the row *before* their upload and moved into `renditions` after
//!   it, so every object under the photo's prefix is either pointed at, staged, or an
//!   orphan that cleanup may delete;
//! - `published_at` is written last, after every file of the version is stored, and is
//!   cleared first when a new version starts or when processing finally fails;
//! - the upload and its thumbnail are never deleted, and never served: every published
//!   file is one Tessera wrote, upright, with the metadata the project allows;
//! - boxes and regions are fractions of the *displayed* image (EXIF orientation applied);
//! - `subjects_rev` is the project's subject revision the published files were decided
//!   at; publishing is conditioned on it still being the project's.

use crate::clock::Millis;
use crate::geometry::FracRect;
use crate::ids::{PhotoId, ProjectId, SubjectId};
use crate::privacy::FaceDecision;
use serde::{Deserialize, Serialize};

/// Which job acts on a photo after ingest. Chosen once, at ingest, so the two never
/// both act on one upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pipeline {
    /// Detect, match, blur, write variants.
    FaceProcess,
    /// Nobody in the project opted out and a threshold is set: read the dimensions,
    /// make a thumbnail, publish the upload as it is.
    ThumbnailDims,
}

/// One face, found once per photo and kept for every later re-blur.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Face {
    /// Box, as fractions of the displayed (upright) image.
    pub bbox: FracRect,
    /// Eye, eye, nose, mouth corner, mouth corner, as fractions of the displayed image.
    pub landmarks: [[f32; 2]; 5],
    /// Detector confidence.
    pub score: f32,
    /// Unit-length embedding. Empty in a row whose embeddings are kept in an object
    /// (`Photo::embeddings_key`, [`crate::embeddings`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub embedding: Vec<f32>,
    /// Embeddings of the same face seen by other detector passes (another quarter turn,
    /// another tile): other landmarks, so other alignments. Matching takes the best view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub views: Vec<Vec<f32>>,
    /// Whether its second looks (crops levelled and enlarged, searched again) are among
    /// its views. Faces are searched without them, and a decision that comes near the
    /// threshold asks for them once (`tessera_jobs::photos::decide`). Rows written before
    /// that had them for every face, so a row without the field has them.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub looked_again: bool,
    /// Tilted or small as found. Only read from rows written before faces carried their
    /// [`Face::evidence`]: such a face is decided at the largest measured loss.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hard_to_recognise: bool,
    /// Its size and head roll as found, which set the threshold it is decided at
    /// ([`crate::privacy::MatchRule`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<crate::privacy::Evidence>,
    /// The rule the last decision was made under (`None`: no threshold, fail closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<crate::privacy::MatchRule>,
    /// What matching decided, against the subjects at the time of the last render.
    pub decision: FaceDecision,
    /// The person it was found to be among the project's faces ([`crate::clusters`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<crate::ClusterId>,
    /// Where its cluster, not its own evidence, made the last decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ruling: Option<crate::clusters::Ruling>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Face {
    /// Decide this face against `subjects` over every view of it, at the threshold its
    /// evidence calls for, and record both the decision and the rule.
    pub fn redecide(
        &mut self,
        subjects: &[crate::privacy::SubjectEmbeddings],
        policy: crate::privacy::MatchPolicy,
    ) {
        let rule =
            crate::privacy::MatchRule::for_face(policy, self.evidence, self.hard_to_recognise);
        self.decision = self.decide_under(subjects, rule);
        self.rule = rule;
        self.ruling = None;
    }

    /// What [`Face::redecide`] would decide, leaving the face as it is.
    pub fn decide(
        &self,
        subjects: &[crate::privacy::SubjectEmbeddings],
        policy: crate::privacy::MatchPolicy,
    ) -> FaceDecision {
        self.decide_under(
            subjects,
            crate::privacy::MatchRule::for_face(policy, self.evidence, self.hard_to_recognise),
        )
    }

    fn decide_under(
        &self,
        subjects: &[crate::privacy::SubjectEmbeddings],
        rule: Option<crate::privacy::MatchRule>,
    ) -> FaceDecision {
        let views = self.views_all();
        let policy = rule.map_or(crate::privacy::MatchPolicy::FailClosed, |r| {
            crate::privacy::MatchPolicy::Threshold(r.threshold)
        });
        crate::privacy::decide_views(&views, subjects, policy)
    }

    /// The best similarity of any view of this face to any of `subject`'s references.
    pub fn similarity_to(&self, subject: &crate::privacy::SubjectEmbeddings) -> Option<f32> {
        crate::privacy::best_similarity(&self.views_all(), subject)
    }

    /// Its embedding and every other view of it.
    fn views_all(&self) -> Vec<&[f32]> {
        std::iter::once(self.embedding.as_slice())
            .chain(self.views.iter().map(Vec::as_slice))
            .collect()
    }
}

/// One published file and its thumbnail: the public one (`variant: None`) or the one
/// made for one opted-out subject, showing only them unblurred.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rendition {
    /// `None` for the public file, else the subject it is made for.
    pub variant: Option<SubjectId>,
    /// Object key of the file.
    pub key: String,
    /// Object key of its thumbnail (cut from the file).
    pub thumb_key: String,
    /// The file's size, for a download offered with it. Absent from renditions
    /// published before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byte_size: Option<u64>,
}

/// An uploaded photo and its publication state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Photo {
    /// Id.
    pub id: PhotoId,
    /// Project.
    pub project: ProjectId,
    /// Object key of the upload; never deleted by processing.
    pub upload_key: String,
    /// File name as uploaded.
    pub file_name: String,
    /// SHA-256 of the upload, hex.
    pub sha256: String,
    /// Size in bytes.
    pub bytes: u64,
    /// `jpeg`, `png`, `webp` or `heif`.
    pub format: String,
    /// Width as displayed (EXIF orientation applied).
    pub width: u32,
    /// Height as displayed.
    pub height: u32,
    /// The EXIF orientation the upload declared (1..=8; applied at every decode).
    #[serde(default = "upright")]
    pub orientation: u8,
    /// Which [`RULES`] the row's geometry and files follow; rows older than the current
    /// rules are re-processed (see [`Photo::needs_reprocess`]).
    #[serde(default)]
    pub rules: u32,
    /// The project's `subjects_rev` the published files were decided at (0: never
    /// decided).
    #[serde(default)]
    pub subjects_rev: u64,
    /// The storage event's sequencer, so an older event for the key is recognised.
    pub sequencer: String,
    /// Which job acts after ingest.
    pub pipeline: Pipeline,
    /// Faces, once detected (`None`: not detected yet). Without their embeddings when
    /// `embeddings_key` is set.
    pub faces: Option<Vec<Face>>,
    /// The object holding the faces' embeddings ([`crate::embeddings`]); `None` for a
    /// row that keeps them inline (rows from before), or has no faces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings_key: Option<String>,
    /// Which detector found them.
    pub detector: Option<String>,
    /// Manual blur regions, exactly as drawn (fractions of the displayed image).
    pub blur_regions: Vec<FracRect>,
    /// Bumped when regions change, so re-blurring after each edit is a new job.
    pub edits_rev: u64,
    /// Part of every derived key; bumped before each new set of files.
    pub variant_version: u64,
    /// What the row points at: the public file first, then one per subject.
    pub renditions: Vec<Rendition>,
    /// Thumbnail of the unblurred upload (for photos with nothing to blur).
    pub upload_thumb_key: Option<String>,
    /// Keys announced before upload and not yet pointed at.
    pub staged_keys: Vec<String>,
    /// Keys the row pointed at before; deleted by cleanup after publishing.
    pub replaced_keys: Vec<String>,
    /// Written last; `None` while unpublished.
    pub published_at: Option<Millis>,
    /// The digest of what the files of `variant_version` were drawn from (each file's
    /// blur plan and the metadata kept; `tessera_jobs::photos::render::fingerprint`),
    /// written with `published_at`. A re-decision that arrives at the same digest
    /// publishes those files again without reading the upload or drawing anything: most
    /// photos of a project do not hold the person who just opted out. `None`: published
    /// before this was kept, or never; such a photo is drawn again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendered: Option<String>,
    /// Why its last processing failed for good (it is unpublished with it); cleared when
    /// processing starts again. Rows from before this existed: none.
    #[serde(default)]
    pub failure: Option<String>,
    /// When the original upload was deleted under the project's retention: the photo can
    /// no longer be re-decided, only unpublished.
    #[serde(default)]
    pub original_deleted_at: Option<Millis>,
    /// When the row was created.
    pub created_at: Millis,
}

fn upright() -> u8 {
    1
}

/// The privacy rules a photo row's geometry and files follow.
///
/// - 0: rows written before orientation was applied: boxes and regions are fractions of
///   the *stored* pixels, and a photo with nothing to blur was served from its upload key.
/// - 1: boxes and regions are fractions of the displayed image; every published file is
///   one Tessera wrote under a versioned key.
///
/// Migrating a row from 0 (done by its next processing): its manual regions are mapped
/// through its orientation, its faces are detected again on the upright pixels when the
/// orientation is not upright (sideways faces were found badly or not at all, so their
/// boxes are not worth keeping), and it is re-published under the new rules.
pub const RULES: u32 = 1;

impl Photo {
    /// Whether this photo's files were decided under an older subject revision or older
    /// rules than the project's now, and so must be decided again before they can be
    /// trusted.
    pub fn needs_reprocess(&self, project_subjects_rev: u64) -> bool {
        self.rules < RULES || self.subjects_rev < project_subjects_rev
    }

    /// Whether its files may be served now: published, and decided at the project's
    /// current subjects. After an opt-out, files decided before it are withheld until the
    /// photo is decided again (fail closed), even while `published_at` is still set.
    pub fn servable(&self, project_subjects_rev: u64) -> bool {
        self.published_at.is_some() && !self.needs_reprocess(project_subjects_rev)
    }

    /// The public rendition, if any.
    pub fn public(&self) -> Option<&Rendition> {
        self.renditions.iter().find(|r| r.variant.is_none())
    }

    /// Every key the row points at (renditions and the upload's thumbnail) plus the upload.
    pub fn referenced_keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = vec![self.upload_key.as_str()];
        keys.extend(self.upload_thumb_key.as_deref());
        keys.extend(self.embeddings_key.as_deref());
        for r in &self.renditions {
            keys.push(&r.key);
            keys.push(&r.thumb_key);
        }
        keys
    }

    /// Keys that must never be deleted.
    pub fn is_protected(&self, key: &str) -> bool {
        key == self.upload_key || self.upload_thumb_key.as_deref() == Some(key)
    }
}

/// Which EXIF fields a project's published files may keep. Everything else is dropped:
/// serial numbers, owner names, maker notes, XMP, the orientation tag (files are written
/// upright) and the embedded preview image (it shows the unblurred photo).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeepMetadata {
    /// When the photo was taken (`DateTimeOriginal` and its time zone).
    pub capture_time: bool,
    /// Camera make and model and the exposure (focal length, aperture, shutter, ISO).
    pub camera: bool,
    /// Where it was taken (GPS). Off unless the project turns it on: a location can
    /// identify a home.
    pub location: bool,
}

impl Default for KeepMetadata {
    fn default() -> Self {
        KeepMetadata {
            capture_time: true,
            camera: true,
            location: false,
        }
    }
}

impl KeepMetadata {
    /// Keep nothing at all.
    pub const NOTHING: KeepMetadata = KeepMetadata {
        capture_time: false,
        camera: false,
        location: false,
    };
}

/// A person who asked not to be published in one project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    /// Id.
    pub id: SubjectId,
    /// The only project they are matched in.
    pub project: ProjectId,
    /// A label for people.
    pub label: String,
    /// Unit-length embeddings of their reference photos.
    pub embeddings: Vec<Vec<f32>>,
    /// Names of the reference photos, in the order of `embeddings`.
    pub references: Vec<String>,
    /// Created.
    pub created_at: Millis,
}

/// Object keys: the one place they are built.
pub mod keys {
    use crate::ids::{PhotoId, ProjectId, SubjectId};

    /// Where an upload goes: `uploads/<project>/<photo>/<file name>`.
    pub fn upload(project: ProjectId, photo: PhotoId, file_name: &str) -> String {
        format!("uploads/{project}/{photo}/{file_name}")
    }

    /// The ids in an upload key, or why it is not one.
    pub fn parse_upload(key: &str) -> Result<(ProjectId, PhotoId, String), String> {
        let mut parts = key.splitn(4, '/');
        let (Some("uploads"), Some(p), Some(ph), Some(name)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!(
                "`{key}` is not an upload key (uploads/<project>/<photo>/<file>)"
            ));
        };
        let project = p
            .parse()
            .map_err(|_| format!("`{key}`: `{p}` is not a project id"))?;
        let photo = ph
            .parse()
            .map_err(|_| format!("`{key}`: `{ph}` is not a photo id"))?;
        if name.is_empty() || name.contains('/') {
            return Err(format!("`{key}`: the file name must be one path segment"));
        }
        Ok((project, photo, name.to_string()))
    }

    /// Prefix of every derived object of a photo.
    pub fn derived_prefix(project: ProjectId, photo: PhotoId) -> String {
        format!("photos/{project}/{photo}/")
    }

    /// Thumbnail of the unblurred upload (unversioned: it is made once and never changes).
    pub fn upload_thumb(project: ProjectId, photo: PhotoId) -> String {
        format!("{}upload-thumb.jpg", derived_prefix(project, photo))
    }

    /// A rendition's file and thumbnail keys at `version`.
    pub fn rendition(
        project: ProjectId,
        photo: PhotoId,
        version: u64,
        variant: Option<SubjectId>,
    ) -> (String, String) {
        let base = format!("{}v{version}/", derived_prefix(project, photo));
        let name = variant.map_or_else(|| "public".to_string(), |s| format!("subject-{s}"));
        (
            format!("{base}{name}.jpg"),
            format!("{base}{name}-thumb.jpg"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_keys_round_trip_and_hostile_ones_are_refused() {
        let (p, ph) = (ProjectId::new(), PhotoId::new());
        let k = keys::upload(p, ph, "IMG 1.jpg");
        assert_eq!(keys::parse_upload(&k).unwrap(), (p, ph, "IMG 1.jpg".into()));
        for bad in [
            "photos/x/y/z.jpg",
            "uploads/x",
            "uploads/not-an-id/also-not/f.jpg",
            &format!("uploads/{p}/{ph}/"),
            &format!("uploads/{p}/{ph}/a/b.jpg"),
        ] {
            assert!(keys::parse_upload(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_face_is_decided_at_the_threshold_its_evidence_calls_for_and_says_so() {
        use crate::privacy::{Basis, Evidence, MatchPolicy, MatchRule, SubjectEmbeddings};
        let subject = SubjectEmbeddings {
            subject: SubjectId::new(),
            embeddings: vec![vec![1.0, 0.0]],
        };
        // A face whose best view is 0.36 from the subject's reference.
        let sim = 0.36f32;
        let face = |evidence: Option<Evidence>, hard: bool| -> Face {
            serde_json::from_value(serde_json::json!({
                "bbox": {"x": 0.1, "y": 0.1, "w": 0.1, "h": 0.1},
                "landmarks": [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], "score": 0.9,
                "embedding": [sim, (1.0 - sim * sim).sqrt()],
                "hard_to_recognise": hard, "evidence": evidence,
                "decision": {"decision": "fail_closed"},
            }))
            .unwrap()
        };
        let policy = MatchPolicy::Threshold(0.363);
        let mut clear = face(
            Some(Evidence {
                px: 300.0,
                roll: 0.0,
            }),
            false,
        );
        clear.redecide(std::slice::from_ref(&subject), policy);
        assert!(
            !clear.decision.blurred_in(None),
            "0.36 < 0.363 for a clear face"
        );
        assert_eq!(clear.rule.unwrap().basis, Basis::Clear);
        // The smallest face the table knows is held to what the same person reaches there.
        let (px, kept) = crate::privacy::KEPT_BY_SIZE[0];
        let mut small = face(Some(Evidence { px, roll: 0.0 }), false);
        small.redecide(std::slice::from_ref(&subject), policy);
        let rule = small.rule.unwrap();
        assert_eq!(
            rule,
            MatchRule::for_face(policy, small.evidence, false).unwrap()
        );
        assert_eq!(small.decision.blurred_in(None), sim >= 0.363 * kept);
        assert_eq!(
            small.decide(std::slice::from_ref(&subject), policy),
            small.decision
        );
        // A row from before evidence: its flag still lowers the threshold.
        let mut old = face(None, true);
        old.redecide(std::slice::from_ref(&subject), policy);
        assert_eq!(old.rule.unwrap().basis, Basis::Unmeasured);
        // No threshold: blurred, no rule.
        old.redecide(std::slice::from_ref(&subject), MatchPolicy::FailClosed);
        assert_eq!((old.rule, old.decision.blurred_in(None)), (None, true));
    }

    #[test]
    fn files_decided_before_a_subject_change_are_not_servable() {
        let mut p: Photo = serde_json::from_value(serde_json::json!({
            "id": PhotoId::new(), "project": ProjectId::new(), "upload_key": "u",
            "file_name": "a.jpg", "sha256": "0", "bytes": 1, "format": "jpeg", "width": 1,
            "height": 1, "sequencer": "0", "pipeline": "face_process", "faces": null,
            "detector": null, "blur_regions": [], "edits_rev": 0, "variant_version": 1,
            "renditions": [], "upload_thumb_key": null, "staged_keys": [], "replaced_keys": [],
            "published_at": 5, "created_at": 1,
        }))
        .unwrap();
        assert_eq!(
            (p.rules, p.orientation),
            (0, 1),
            "a row from before: old rules"
        );
        assert!(!p.servable(0), "old rules are not served");
        p.rules = RULES;
        p.subjects_rev = 3;
        assert!(p.servable(3));
        assert!(
            !p.servable(4),
            "an opt-out since: withheld until decided again"
        );
        p.published_at = None;
        assert!(!p.servable(3));
    }

    #[test]
    fn every_derived_key_carries_its_version() {
        let (p, ph, s) = (ProjectId::new(), PhotoId::new(), SubjectId::new());
        let (a, at) = keys::rendition(p, ph, 3, None);
        let (b, bt) = keys::rendition(p, ph, 3, Some(s));
        let (c, _) = keys::rendition(p, ph, 4, None);
        for k in [&a, &at, &b, &bt] {
            assert!(k.contains("/v3/") && k.starts_with(&keys::derived_prefix(p, ph)));
        }
        assert_ne!(a, c);
        assert_ne!(a, b);
    }
}
