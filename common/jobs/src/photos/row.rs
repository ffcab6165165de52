//! Reading and writing photo rows.
//!
//! Processing never puts a whole row back: it *sets* the fields it owns, on the
//! condition that the row's variant version is still the one it is writing, so an
//! edit made meanwhile (blur regions) is never lost and a newer processing run always
//! wins over an older one.

use serde_json::Value;
use tessera_core::photo::Photo;
use tessera_core::ports::state_store::{Condition, StateStore, Write};
use tessera_core::{PhotoId, records};
use tessera_engine::TaskError;

/// The photo's row.
pub async fn load(store: &dyn StateStore, id: PhotoId) -> Result<Photo, TaskError> {
    let item = store
        .get(&records::photo_key(id))
        .await?
        .ok_or_else(|| TaskError::permanent(format!("photo {id} has no row; ingest it first")))?;
    Ok(records::decode(&item)?)
}

/// Set `fields` of the row while its variant version is `version`.
pub fn set(id: PhotoId, version: u64, fields: Vec<(&str, Value)>) -> Write {
    Write::Set {
        key: records::photo_key(id),
        fields: fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        condition: Condition::field_eq("variant_version", version),
    }
}

/// The publishing write: `fields` set while the variant version is `version` *and* the
/// blur regions are still those of `edits_rev`. Regions saved while a render runs bump
/// `edits_rev`, so the render that lacks them can never publish.
pub fn publish(id: PhotoId, version: u64, edits_rev: u64, fields: Vec<(&str, Value)>) -> Write {
    Write::Set {
        key: records::photo_key(id),
        fields: fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        condition: Condition::All(vec![
            Condition::field_eq("variant_version", version),
            Condition::field_eq("edits_rev", edits_rev),
        ]),
    }
}

/// Unpublish, whatever the version: what a final failure commits with the job's end.
pub fn unpublish(id: PhotoId) -> Write {
    Write::Set {
        key: records::photo_key(id),
        fields: vec![("published_at".into(), Value::Null)],
        condition: Condition::None,
    }
}

/// Unpublish and say why, whatever the version: what a final failure of the photo's
/// processing commits with the job's end.
pub fn fail(id: PhotoId, reason: &str) -> Write {
    Write::Set {
        key: records::photo_key(id),
        fields: vec![
            ("published_at".into(), Value::Null),
            ("failure".into(), Value::String(reason.to_string())),
        ],
        condition: Condition::None,
    }
}

/// JSON of a field value.
pub fn json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("row fields serialize")
}
