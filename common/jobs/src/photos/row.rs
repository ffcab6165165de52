//! Reading and writing photo rows.
//!
//! Processing never puts a whole row back: it *sets* the fields it owns, on the
//! condition that the row's variant version is still the one it is writing, so an
//! edit made meanwhile (blur regions) is never lost and a newer processing run always
//! wins over an older one.

use serde_json::Value;
use tessera_core::embeddings;
use tessera_core::photo::{Face, Photo};
use tessera_core::ports::state_store::{Condition, StateStore, Write};
use tessera_core::ports::{ObjectStore, ObjectStoreError};
use tessera_core::task::Task;
use tessera_core::{PhotoId, records};
use tessera_engine::TaskError;

/// The photo's row, or `None` when there is none. A task of a photo's own jobs
/// (processing, re-blur, cleanup) only runs after ingest wrote the row, so for those
/// `None` means the photo was erased meanwhile: there is nothing left to act on, and
/// the task ends without producing anything (an erasure is never undone by a late task).
pub async fn find(store: &dyn StateStore, id: PhotoId) -> Result<Option<Photo>, TaskError> {
    match store.get(&records::photo_key(id)).await? {
        Some(item) => Ok(Some(records::decode(&item)?)),
        None => Ok(None),
    }
}

/// What a task of an erased photo answers.
pub fn erased(id: PhotoId) -> tessera_engine::TaskOutput {
    tracing::info!(photo = %id, "the photo was erased; nothing to do");
    tessera_engine::TaskOutput::result(serde_json::json!({
        "photo": id, "skipped": "the photo was erased",
    }))
}

/// How a run that owns `version` of photo `id` (staged it, or publishes it again as it
/// is) tells that a newer run took the photo over: the row holds a higher version,
/// staged by a run that decides the photo from what is stored at least as late as this
/// one read it, and publishes only under the same conditions. That run publishes the
/// photo or its failure says why, so this one stands down instead of staging a version
/// of its own over it ([`tessera_engine::TakenOver`]; only processing raises the version).
pub fn taken_over(id: PhotoId, version: u64) -> tessera_engine::TakenOver {
    tessera_engine::TakenOver {
        key: records::photo_key(id),
        field: "variant_version".into(),
        mine: version,
        result: serde_json::json!({
            "photo": id,
            "taken_over": format!("a newer run of the photo staged a version above {version}; that run publishes it"),
        }),
    }
}

/// Set `fields` of the row while its variant version is `version`.
pub fn set(id: PhotoId, version: u64, fields: Vec<(&str, Value)>) -> Write {
    set_if(id, fields, Condition::field_eq("variant_version", version))
}

fn set_if(id: PhotoId, fields: Vec<(&str, Value)>, condition: Condition) -> Write {
    Write::Set {
        key: records::photo_key(id),
        fields: fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        condition,
    }
}

/// The publishing write: `fields` set while the variant version is `version` *and* the
/// blur regions are still those of `edits_rev`. Regions saved while a render runs bump
/// `edits_rev`, so the render that lacks them can never publish.
pub fn publish(id: PhotoId, version: u64, edits_rev: u64, fields: Vec<(&str, Value)>) -> Write {
    at_version_and_edits(id, version, edits_rev, fields)
}

/// Stage a new version: set `fields` (the new `variant_version` among them) while the
/// row is still at the `version` and `edits_rev` the run read, so that a run staging
/// over another is always the one that read the row later, regions included.
pub fn stage(id: PhotoId, version: u64, edits_rev: u64, fields: Vec<(&str, Value)>) -> Write {
    at_version_and_edits(id, version, edits_rev, fields)
}

fn at_version_and_edits(
    id: PhotoId,
    version: u64,
    edits_rev: u64,
    fields: Vec<(&str, Value)>,
) -> Write {
    set_if(
        id,
        fields,
        Condition::All(vec![
            Condition::field_eq("variant_version", version),
            Condition::field_eq("edits_rev", edits_rev),
        ]),
    )
}

/// Unpublish, whatever the version: what a final failure commits with the job's end.
pub fn unpublish(id: PhotoId) -> Write {
    Write::Set {
        key: records::photo_key(id),
        fields: vec![("published_at".into(), Value::Null)],
        condition: Condition::None,
    }
}

/// Say why a withheld photo stays withheld: what a run of its processing cancelled by a
/// person commits, whether or not it got to stage. A photo is withheld when it is
/// unpublished (a run that staged unpublished it, saving regions unpublished it, a first
/// processing never published it), when it was decided before the subjects the run
/// was asked to decide it at (an opt-out came since: its files are not served, though
/// `published_at` is still set), or when its files follow older rules. Either way, with the run cancelled, nobody is left to
/// publish it or say why. A photo decided at those subjects and published is left as it
/// is (what was cancelled had changed nothing), and so is a photo a run submitted later
/// staged since, or whose regions were saved again since a re-decision of regions was
/// asked for: each of those has a run of its own that publishes the photo or fails it.
pub fn fail_cancelled(id: PhotoId, task: &Task, reason: &str) -> Write {
    // Files decided under older rules are withheld too ([`Photo::needs_reprocess`]); a
    // row older than the `rules` field has none.
    let mut withheld = vec![
        Condition::field_null("published_at"),
        Condition::field_null("rules"),
        Condition::field_at_most("rules", i64::from(tessera_core::photo::RULES) - 1),
    ];
    let asked_at = task.payload.get("subjects_rev").and_then(Value::as_u64);
    if let Some(rev) = asked_at
        .and_then(|r| i64::try_from(r).ok())
        .filter(|r| *r > 0)
    {
        withheld.push(Condition::field_at_most("subjects_rev", rev - 1));
    }
    let mut all = vec![
        Condition::Any(withheld),
        Condition::field_at_most(STAGED_BY_SUBMITTED, task.created_at.0),
    ];
    if let Some(rev) = task.payload.get("edits_rev").and_then(Value::as_u64) {
        all.push(Condition::field_eq("edits_rev", rev));
    }
    fail_if(id, reason, Condition::All(all))
}

/// The row field naming the task whose run staged the version the row holds; written
/// with each staging, for whoever reads the row to find the run.
pub const STAGED_BY: &str = "staged_by";

/// The row field holding when the task whose run staged the row's version was
/// submitted (its [`tessera_core::Millis`], in ms): written with each staging beside
/// [`STAGED_BY`], read only by [`fail`]'s condition.
pub const STAGED_BY_SUBMITTED: &str = "staged_by_submitted_ms";

/// Unpublish and say why: what a final failure (failed or dead) of `task`, a run of the
/// photo's processing, commits with the job's end, unless a run submitted after it has
/// staged a version since. That run was submitted after whatever this one was submitted
/// for (an upload, an opt-out, regions saved), read the row and the subjects later, and
/// publishes the photo or fails it itself; failing the photo here would only withhold
/// its publication. Every other row fails closed: one never staged, staged by this run
/// or by one submitted no later (its version may be the decision this run was to
/// replace), and rows staged before the submission time was kept. The refused write
/// ends the task without it ([`tessera_engine::Engine::commit_compensated`]).
pub fn fail(id: PhotoId, task: &Task, reason: &str) -> Write {
    fail_if(
        id,
        reason,
        Condition::field_at_most(STAGED_BY_SUBMITTED, task.created_at.0),
    )
}

/// Unpublish and say why, while `condition` holds.
fn fail_if(id: PhotoId, reason: &str, condition: Condition) -> Write {
    set_if(
        id,
        vec![
            ("published_at", Value::Null),
            ("failure", Value::String(reason.to_string())),
        ],
        condition,
    )
}

/// JSON of a field value.
pub fn json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("row fields serialize")
}

/// The row's faces with their embeddings, read from the object the row points at
/// ([`embeddings`]); rows from before keep them inline. `None` when the faces must be
/// detected again: never detected, or an embeddings object that is gone or damaged
/// (fail closed: a fresh detection, never a decision without embeddings).
pub async fn faces(
    objects: &dyn ObjectStore,
    photo: &Photo,
) -> Result<Option<Vec<Face>>, TaskError> {
    let Some(mut faces) = photo.faces.clone() else {
        return Ok(None);
    };
    let Some(key) = &photo.embeddings_key else {
        return Ok(Some(faces));
    };
    let bytes = match objects.get(key).await {
        Ok(b) => b,
        Err(ObjectStoreError::NotFound(_)) => {
            tracing::warn!(photo = %photo.id, key, "the faces' embeddings object is gone; detecting again");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    match embeddings::unpack(&bytes, &mut faces) {
        Ok(()) => Ok(Some(faces)),
        Err(e) => {
            tracing::warn!(photo = %photo.id, key, error = %e, "the faces' embeddings object is damaged; detecting again");
            Ok(None)
        }
    }
}

/// Embeddings to store once the row that points at them is committed.
#[must_use = "the row points at an object that must be stored"]
pub struct PendingEmbeddings(Option<(String, Vec<u8>)>);

impl PendingEmbeddings {
    /// Nothing to store: the row already points at these embeddings.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Store them (after the row pointing at them is committed). In that order, a
    /// cleanup listing the photo's objects meanwhile finds the key referenced and keeps
    /// the object; a crash in between leaves a row pointing at nothing, which the next
    /// run detects again (see [`faces`]).
    pub async fn store(self, objects: &dyn ObjectStore) -> Result<(), TaskError> {
        if let Some((key, bytes)) = self.0 {
            objects.put(&key, bytes.into()).await?;
        }
        Ok(())
    }
}

/// The row fields that hold `faces` without their embeddings, and the embeddings object
/// to store after they are committed (nothing when the row already points at the same
/// object).
pub fn face_fields(
    photo: &Photo,
    faces: &[Face],
) -> (Vec<(&'static str, Value)>, PendingEmbeddings) {
    // No face embedded (none found, or found in a project that recognises nobody): no
    // embeddings object, and the row's faces are all there is.
    if faces
        .iter()
        .all(|f| f.embedding.is_empty() && f.views.is_empty())
    {
        return (
            vec![
                ("faces", json(&embeddings::stripped(faces))),
                ("embeddings_key", Value::Null),
            ],
            PendingEmbeddings(None),
        );
    }
    let bytes = embeddings::pack(faces);
    let key = embeddings::key(photo.project, photo.id, &bytes);
    let pending = if photo.embeddings_key.as_deref() == Some(key.as_str()) {
        None
    } else {
        Some((key.clone(), bytes))
    };
    (
        vec![
            ("faces", json(&embeddings::stripped(faces))),
            ("embeddings_key", json(&key)),
        ],
        PendingEmbeddings(pending),
    )
}
