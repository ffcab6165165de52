//! What every photo decision reads of its project, kept where a burst does not make one
//! partition hot.
//!
//! Each photo's processing needs its project's privacy settings, its subject revision
//! and its opted-out subjects' embeddings, and each publication is conditioned on that
//! revision still being the project's. Read from the project's own partition (the
//! project record and its subject items), a burst into one project put every photo's
//! reads and its publication check on that one partition: the load rehearsal counted
//! 39 % of a partition's read limit and 67–75 % of its write limit at 1 M photos a day
//! with a 10× peak hour.
//!
//! So the project keeps a *view* of what a decision needs, copied into [`VIEW_SHARDS`]
//! items (each its own partition), and a photo reads and checks the one its id picks.
//! The subjects' embeddings are not copied into the items: they go to one immutable
//! object named by its content (a subject set), which the view names and a process
//! keeps in memory by that name, so a project of any number of subjects costs each
//! photo one small read.
//!
//! Invariants:
//! - every change of a project's subjects or privacy settings writes the project record
//!   and all its view shards in one transaction (with the new `subjects_rev`), so any
//!   shard says what the project says;
//! - a shard exists only while its project does: written conditioned on the project
//!   (when first made) or with it (on a change), deleted with it;
//! - a subject set object is stored only once a committed view names it (by the change,
//!   or by a reader that finds it missing, from the subject records, which it undoes if
//!   the view moved on meanwhile), and never changed; those of older views are deleted
//!   after the change that replaced them and again by its sweep (they may hold the
//!   embeddings of someone removed). Nothing is stored for a change that failed.

use crate::domain::Project;
use crate::ids::{PhotoId, ProjectId, SubjectId, TenantId};
use crate::photo::{KeepMetadata, Subject};
use crate::ports::state_store::{Condition, Item, ItemKey, StoreError, Write};
use crate::privacy::SubjectEmbeddings;
use crate::records;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How many items a project's view is copied into: a burst into one project reads
/// about 1/16 of its photos' decisions from each (measured by
/// `infra/rehearsal/load.py`).
pub const VIEW_SHARDS: u32 = 16;

/// What a photo's privacy decision needs of its project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrivacyView {
    /// The project.
    pub project: ProjectId,
    /// Its owner.
    pub tenant: TenantId,
    /// The project's subject revision this view was written at.
    pub subjects_rev: u64,
    /// How many opted-out subjects the project has.
    pub opted_out: u64,
    /// See [`Project::match_threshold`]; `None` fails closed.
    pub match_threshold: Option<f32>,
    /// See [`Project::blur_expand`].
    pub blur_expand: f32,
    /// See [`Project::keep_metadata`].
    pub keep_metadata: KeepMetadata,
    /// See [`Project::upload_retention_days`] (ingest applies it to each new photo).
    #[serde(default)]
    pub upload_retention_days: Option<u32>,
    /// The subject set object holding the subjects' embeddings; `None` when nobody
    /// opted out.
    pub subjects: Option<String>,
}

impl PrivacyView {
    /// The view of `p`, whose subjects are in the object `subjects`.
    pub fn of(p: &Project, subjects: Option<String>) -> Self {
        PrivacyView {
            project: p.id,
            tenant: p.tenant.clone(),
            subjects_rev: p.subjects_rev,
            opted_out: p.opted_out,
            match_threshold: p.match_threshold,
            blur_expand: p.blur_expand,
            keep_metadata: p.keep_metadata,
            upload_retention_days: p.upload_retention_days,
            subjects,
        }
    }
}

/// The shard of `project`'s view that `photo` reads and checks.
pub fn shard_of(photo: PhotoId) -> u32 {
    records::due_shard(&photo.to_string()) % VIEW_SHARDS
}

/// Key of one shard of a project's view.
pub fn key(project: ProjectId, shard: u32) -> ItemKey {
    ItemKey::new(format!("PROJECT#{project}#VIEW#{shard:02}"), "VIEW")
}

/// Key of the shard `photo` reads.
pub fn key_for(project: ProjectId, photo: PhotoId) -> ItemKey {
    key(project, shard_of(photo))
}

/// Writes that put `view` into every shard (with the change that made it, or
/// conditioned on the project when first made).
pub fn put_all(view: &PrivacyView) -> Vec<Write> {
    let body = serde_json::to_value(view).expect("a view serializes");
    (0..VIEW_SHARDS)
        .map(|s| Write::Put {
            item: Item::new(key(view.project, s), body.clone()),
            condition: Condition::None,
        })
        .collect()
}

/// Writes that delete every shard of `project`'s view (with the project).
pub fn delete_all(project: ProjectId) -> Vec<Write> {
    (0..VIEW_SHARDS)
        .map(|s| Write::Delete {
            key: key(project, s),
            condition: Condition::None,
        })
        .collect()
}

/// Writes that set `fields` in every shard of `project`'s view, which must exist (for a
/// change of the project that is not a privacy change, made with it).
pub fn set_all(project: ProjectId, fields: Vec<(String, serde_json::Value)>) -> Vec<Write> {
    (0..VIEW_SHARDS)
        .map(|s| Write::Set {
            key: key(project, s),
            fields: fields.clone(),
            condition: Condition::None,
        })
        .collect()
}

/// A check that `project` has no view yet (its shards are always written together, so
/// the first one tells): what a change of the project alone must be conditioned on.
pub fn none_yet(project: ProjectId) -> Write {
    Write::Check {
        key: key(project, 0),
        condition: Condition::Absent,
    }
}

/// The publication condition: the project's subjects are still at `subjects_rev`, read
/// from `photo`'s shard (equivalent to the project record, by the first invariant).
pub fn still_at(project: ProjectId, photo: PhotoId, subjects_rev: u64) -> Write {
    Write::Check {
        key: key_for(project, photo),
        condition: Condition::field_eq("subjects_rev", subjects_rev),
    }
}

/// A shard's view.
pub fn decode(item: &Item) -> Result<PrivacyView, StoreError> {
    records::decode(item)
}

/// Prefix of a project's subject set objects.
pub fn subject_sets_prefix(project: ProjectId) -> String {
    format!("privacy/{project}/")
}

/// What a subject set object holds: each opted-out subject's reference embeddings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SubjectSet {
    format: String,
    project: ProjectId,
    subjects: Vec<SubjectEmbeddings>,
}

const FORMAT: &str = "tessera.subject_set.v1";

/// The key and bytes of the subject set object of `subjects` (named by its content, so
/// the same set is the same object and a changed set never overwrites one a view names).
pub fn pack(project: ProjectId, subjects: &[Subject]) -> (String, Vec<u8>) {
    let mut sorted: Vec<&Subject> = subjects.iter().collect();
    sorted.sort_by_key(|s| s.id);
    let set = SubjectSet {
        format: FORMAT.into(),
        project,
        subjects: sorted
            .into_iter()
            .map(|s| SubjectEmbeddings {
                subject: s.id,
                embeddings: s.embeddings.clone(),
            })
            .collect(),
    };
    let bytes = serde_json::to_vec(&set).expect("a subject set serializes");
    let sha = hex::encode(Sha256::digest(&bytes));
    (
        format!("{}subjects-{sha}.json", subject_sets_prefix(project)),
        bytes,
    )
}

/// Why a subject set object cannot be used (a decision then fails closed: its task
/// fails and the photo stays unpublished).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("subject set `{key}`: {why}")]
pub struct Malformed {
    key: String,
    why: String,
}

/// The subjects in the object `key` of `project`, checked: the right project and
/// format, its content matching its name, and every embedding non-empty, finite and of
/// one length.
pub fn unpack(
    project: ProjectId,
    key: &str,
    bytes: &[u8],
) -> Result<Vec<SubjectEmbeddings>, Malformed> {
    let bad = |why: String| Malformed {
        key: key.to_string(),
        why,
    };
    let sha = hex::encode(Sha256::digest(bytes));
    if !key.ends_with(&format!("subjects-{sha}.json")) {
        return Err(bad("its content does not match its name".into()));
    }
    let set: SubjectSet = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    if set.format != FORMAT {
        return Err(bad(format!("format `{}` is not {FORMAT}", set.format)));
    }
    if set.project != project {
        return Err(bad(format!("it belongs to project {}", set.project)));
    }
    let mut dim = None;
    for s in &set.subjects {
        check_subject(s.subject, &s.embeddings, &mut dim).map_err(bad)?;
    }
    Ok(set.subjects)
}

fn check_subject(
    id: SubjectId,
    embeddings: &[Vec<f32>],
    dim: &mut Option<usize>,
) -> Result<(), String> {
    if embeddings.is_empty() {
        return Err(format!("subject {id} has no embedding"));
    }
    for e in embeddings {
        if e.is_empty() || e.iter().any(|x| !x.is_finite()) {
            return Err(format!("subject {id} has an empty or non-finite embedding"));
        }
        match dim {
            Some(d) if *d != e.len() => {
                return Err(format!(
                    "subject {id} has an embedding of {} numbers where others have {d}",
                    e.len()
                ));
            }
            _ => *dim = Some(e.len()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Millis;

    fn subject(project: ProjectId, e: Vec<f32>) -> Subject {
        Subject {
            id: SubjectId::new(),
            project,
            label: "a".into(),
            embeddings: vec![e],
            references: vec!["r".into()],
            created_at: Millis(0),
        }
    }

    #[test]
    fn a_subject_set_round_trips_is_named_by_content_and_refuses_damage() {
        let p = ProjectId::new();
        let subjects = vec![subject(p, vec![0.6, 0.8]), subject(p, vec![1.0, 0.0])];
        let (key, bytes) = pack(p, &subjects);
        assert!(key.starts_with(&subject_sets_prefix(p)), "{key}");
        let back = unpack(p, &key, &bytes).unwrap();
        assert_eq!(back.len(), 2);
        // The same subjects in another order are the same object.
        let (again, _) = pack(p, &[subjects[1].clone(), subjects[0].clone()]);
        assert_eq!(again, key);
        // Another project, changed bytes, or a NaN: refused, never half-used.
        assert!(unpack(ProjectId::new(), &key, &bytes).is_err());
        let mut changed = bytes.clone();
        let last = changed.len() - 3;
        changed[last] ^= 1;
        assert!(unpack(p, &key, &changed).is_err());
        // (JSON has no NaN: serde writes it as null, which is refused as not a number.)
        let (k, b) = pack(p, &[subject(p, vec![f32::NAN, 1.0])]);
        assert!(unpack(p, &k, &b).is_err());
        let (k, b) = pack(p, &[subject(p, vec![1.0]), subject(p, vec![1.0, 0.0])]);
        assert!(unpack(p, &k, &b).is_err());
    }

    #[test]
    fn every_shard_is_written_and_photos_spread_over_them() {
        let p = ProjectId::new();
        let mut per_shard = vec![0u32; VIEW_SHARDS as usize];
        for _ in 0..3200 {
            per_shard[shard_of(PhotoId::new()) as usize] += 1;
        }
        assert!(
            per_shard.iter().all(|&n| (100..400).contains(&n)),
            "{per_shard:?}"
        );
        let project = Project {
            id: p,
            tenant: TenantId::local(),
            name: "n".into(),
            description: None,
            match_threshold: Some(0.4),
            blur_expand: 0.35,
            subjects_rev: 3,
            opted_out: 1,
            keep_metadata: KeepMetadata::default(),
            upload_retention_days: None,
            sweep_stalled: None,
            created_at: Millis(0),
        };
        let writes = put_all(&PrivacyView::of(&project, Some("k".into())));
        let keys: std::collections::BTreeSet<_> =
            writes.iter().map(|w| w.key().pk.clone()).collect();
        assert_eq!(keys.len(), VIEW_SHARDS as usize);
        assert_eq!(delete_all(p).len(), VIEW_SHARDS as usize);
    }
}
