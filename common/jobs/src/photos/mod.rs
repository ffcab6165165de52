//! The photo privacy jobs: an upload becomes a published photo in which the project's
//! opted-out people are blurred beyond recovery.
//!
//! ```text
//! object created ──► photo_ingest ─┬─► photo_face_process: face_process ─► cleanup
//!                                  └─► photo_thumbnail_dims: thumbnail_dims ─► cleanup
//! subjects or settings change ──► photo_reblur: sweep ─► photo_reprocess (each photo
//!                                  not at the new subject revision): reprocess ─► cleanup
//! blur regions change ──► photo_reprocess: reprocess ─► cleanup
//! ```
//!
//! Ingest chooses the follow-up job once and records it on the photo row; the two
//! follow-ups never both act on one upload (`thumbnail_dims` only acts on a row whose
//! variant version is 0, and `face_process` bumps it first). A subject change and its
//! sweep are one transaction ([`project`]), and every publication is conditioned on the
//! project's subject revision being the one the decision used ([`process`]). The row's
//! invariants (versioned keys, staged before upload, published last) are in
//! [`tessera_core::photo`].

mod against;
pub mod cleanup;
pub mod clusters;
pub mod decide;
pub mod erase;
pub mod faces;
pub mod fault;
pub mod ingest;
pub mod intake;
mod notices;
pub mod privacy_status;
pub mod process;
pub mod project;
pub mod reblur;
pub mod regions;
pub mod render;
mod republish;
pub mod row;
pub mod scenes;
pub mod status;
pub mod trial;
pub mod upload;
pub mod view;
pub mod withdraw;

pub use intake::submit_upload;

use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};
use tessera_core::{PhotoId, ProjectId, TenantId};
use tessera_engine::{JobPlan, Registry, TaskError, TaskPlan};
use tessera_faces::{DetectorKind, FaceModels, ModelFiles, OnnxRuntime};

/// Job kinds.
pub mod kinds {
    /// An object-created event for an upload.
    pub const INGEST_JOB: &str = "photo_ingest";
    /// Detect, match, blur, publish.
    pub const FACE_PROCESS_JOB: &str = "photo_face_process";
    /// Publish as is, with a thumbnail.
    pub const THUMBNAIL_DIMS_JOB: &str = "photo_thumbnail_dims";
    /// Re-blur from stored faces after subjects or regions changed.
    pub const REPROCESS_JOB: &str = "photo_reprocess";
    /// Re-decide every photo of a project after its subjects or settings changed.
    pub const REBLUR_JOB: &str = "photo_reblur";

    /// Task kinds.
    pub const INGEST: &str = "photo.ingest";
    /// See [`FACE_PROCESS_JOB`].
    pub const FACE_PROCESS: &str = "photo.face_process";
    /// See [`THUMBNAIL_DIMS_JOB`].
    pub const THUMBNAIL_DIMS: &str = "photo.thumbnail_dims";
    /// See [`REPROCESS_JOB`].
    pub const REPROCESS: &str = "photo.reprocess";
    /// Deletes replaced and orphaned objects of a photo.
    pub const CLEANUP: &str = "photo.cleanup";
    /// See [`REBLUR_JOB`].
    pub const REBLUR: &str = "photo.reblur";
}

/// The face models a process uses, loaded on first use and then shared: a worker that
/// never sees a photo task never loads ONNX Runtime, and one that does loads each model
/// once, never per job.
pub struct FaceService {
    loaded: OnceLock<Result<Arc<FaceModels>, TaskError>>,
    detector: DetectorKind,
    threads: usize,
}

impl FaceService {
    /// Load from `ORT_DYLIB_PATH` and `TESSERA_MODELS` when first needed; the detector
    /// from `TESSERA_DETECTOR` (`yunet`, the default, or `centerface`), intra-op
    /// threads from `TESSERA_ORT_THREADS` (default 1).
    pub fn from_env() -> Self {
        let detector = std::env::var("TESSERA_DETECTOR")
            .ok()
            .and_then(|d| d.parse().ok())
            .unwrap_or(DetectorKind::Yunet);
        let threads = std::env::var("TESSERA_ORT_THREADS")
            .ok()
            .and_then(|t| t.parse().ok())
            .filter(|t| *t >= 1)
            .unwrap_or(1);
        FaceService {
            loaded: OnceLock::new(),
            detector,
            threads,
        }
    }

    /// Use models loaded already.
    pub fn with_models(models: Arc<FaceModels>) -> Self {
        let s = FaceService {
            loaded: OnceLock::new(),
            detector: models.detector_kind(),
            threads: 1,
        };
        let _ = s.loaded.set(Ok(models));
        s
    }

    /// Load now (from the environment), reporting what is missing.
    pub fn load_from_env(
        detector: DetectorKind,
        threads: usize,
    ) -> Result<Arc<FaceModels>, tessera_faces::FaceError> {
        let rt = OnnxRuntime::from_env()?;
        Ok(Arc::new(FaceModels::load(
            &rt,
            &ModelFiles::from_env()?,
            detector,
            threads,
        )?))
    }

    /// The models, loading them on first use.
    pub fn models(&self) -> Result<Arc<FaceModels>, TaskError> {
        self.loaded
            .get_or_init(|| {
                Self::load_from_env(self.detector, self.threads).map_err(TaskError::from_classified)
            })
            .clone()
    }
}

/// An S3-style object-created notification for one upload: what ingest is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectCreated {
    /// Bucket (informational in embedded mode).
    pub bucket: String,
    /// The key *as it appears in the event*: URL-encoded, `+` for spaces.
    pub key: String,
    /// Size in bytes, as notified.
    pub size: u64,
    /// Orders events for one key (hex, compared after left-padding).
    pub sequencer: String,
}

impl ObjectCreated {
    /// The decoded object key.
    pub fn object_key(&self) -> Result<String, String> {
        let plus = self.key.replace('+', " ");
        percent_encoding::percent_decode_str(&plus)
            .decode_utf8()
            .map(|k| k.into_owned())
            .map_err(|_| format!("event key `{}` is not valid URL-encoded UTF-8", self.key))
    }

    /// The event S3 would send for a new object at `key` (the key URL-encoded the way S3
    /// encodes it: `+` for spaces, UTF-8 percent-escapes for the rest).
    pub fn for_key(bucket: &str, key: &str, size: u64, sequencer: &str) -> ObjectCreated {
        const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
            .remove(b'/')
            .remove(b'-')
            .remove(b'_')
            .remove(b'.')
            .remove(b'~')
            .remove(b' ');
        let encoded = percent_encoding::utf8_percent_encode(key, KEEP)
            .to_string()
            .replace(' ', "+");
        ObjectCreated {
            bucket: bucket.to_string(),
            key: encoded,
            size,
            sequencer: sequencer.to_string(),
        }
    }

    /// The object-created records of an S3 event notification (the `Records` array of
    /// the JSON S3 sends, directly or inside an SQS message body).
    pub fn from_s3_event(event: &serde_json::Value) -> Result<Vec<ObjectCreated>, String> {
        let records = event
            .get("Records")
            .and_then(|r| r.as_array())
            .ok_or("the event has no `Records` array")?;
        let mut out = Vec::new();
        for (i, r) in records.iter().enumerate() {
            let name = r.get("eventName").and_then(|n| n.as_str()).unwrap_or("");
            if !name.starts_with("ObjectCreated:") {
                continue;
            }
            let s3 = r.get("s3").ok_or(format!("Records[{i}] has no `s3`"))?;
            let field = |path: &[&str]| -> Option<&serde_json::Value> {
                path.iter().try_fold(s3, |v, p| v.get(p))
            };
            out.push(ObjectCreated {
                bucket: field(&["bucket", "name"])
                    .and_then(|v| v.as_str())
                    .ok_or(format!("Records[{i}].s3.bucket.name is missing"))?
                    .to_string(),
                key: field(&["object", "key"])
                    .and_then(|v| v.as_str())
                    .ok_or(format!("Records[{i}].s3.object.key is missing"))?
                    .to_string(),
                size: field(&["object", "size"])
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0),
                sequencer: field(&["object", "sequencer"])
                    .and_then(|v| v.as_str())
                    .unwrap_or("0")
                    .to_string(),
            });
        }
        Ok(out)
    }
}

/// Whether sequencer `a` is older than `b` (S3 sequencers are hex strings of varying
/// length, compared after left-padding with zeros).
pub fn sequencer_older(a: &str, b: &str) -> bool {
    let n = a.len().max(b.len());
    format!("{a:0>n$}") < format!("{b:0>n$}")
}

fn job(
    tenant: TenantId,
    project: ProjectId,
    kind: &str,
    label: String,
    spec: serde_json::Value,
    tasks: Vec<TaskPlan>,
) -> JobPlan {
    JobPlan {
        tenant,
        project: Some(project),
        kind: kind.into(),
        label,
        spec,
        priority: 0,
        tasks,
    }
}

/// The ingest job for one event (identical events are one job).
pub fn ingest_plan(tenant: TenantId, project: ProjectId, event: &ObjectCreated) -> JobPlan {
    let spec = serde_json::to_value(event).expect("serializable");
    job(
        tenant,
        project,
        kinds::INGEST_JOB,
        format!("ingest {}", event.key),
        spec.clone(),
        vec![TaskPlan::new("ingest", kinds::INGEST, spec)],
    )
}

/// The follow-up job ingest chose, for one upload (by its content hash): one task. A
/// photo's first processing replaces no file, and what a run cut off had staged is
/// deleted by the run after it, so no cleanup follows it: each photo used to pay for a
/// task (its records, its index entries, its message, an invocation and a listing of
/// its prefix) that found nothing to do. A re-blur replaces files and keeps its cleanup
/// ([`reprocess_plan`]).
pub fn follow_up_plan(
    tenant: TenantId,
    project: ProjectId,
    photo: PhotoId,
    sha256: &str,
    pipeline: tessera_core::photo::Pipeline,
) -> JobPlan {
    let spec = serde_json::json!({ "photo": photo, "sha256": sha256 });
    match pipeline {
        tessera_core::photo::Pipeline::FaceProcess => job(
            tenant,
            project,
            kinds::FACE_PROCESS_JOB,
            format!("face_process {photo}"),
            spec.clone(),
            vec![TaskPlan::new("face_process", kinds::FACE_PROCESS, spec)],
        ),
        tessera_core::photo::Pipeline::ThumbnailDims => job(
            tenant,
            project,
            kinds::THUMBNAIL_DIMS_JOB,
            format!("thumbnail_dims {photo}"),
            spec.clone(),
            vec![TaskPlan::new("thumbnail_dims", kinds::THUMBNAIL_DIMS, spec)],
        ),
    }
}

/// Re-blur one photo after its project's subjects (`subjects_rev`) or its regions
/// (`edits_rev`) changed; each change is a new job.
pub fn reprocess_plan(
    tenant: TenantId,
    project: ProjectId,
    photo: PhotoId,
    subjects_rev: u64,
    edits_rev: u64,
) -> JobPlan {
    let spec = serde_json::json!({
        "photo": photo, "subjects_rev": subjects_rev, "edits_rev": edits_rev,
    });
    job(
        tenant,
        project,
        kinds::REPROCESS_JOB,
        format!("reprocess {photo}"),
        spec.clone(),
        vec![
            TaskPlan::new("reprocess", kinds::REPROCESS, spec.clone()),
            TaskPlan::new("cleanup", kinds::CLEANUP, spec).after(["reprocess"]),
        ],
    )
}

/// The photo a task's payload names.
pub(crate) fn payload_photo(task: &tessera_core::task::Task) -> Result<PhotoId, TaskError> {
    task.payload
        .get("photo")
        .and_then(|p| p.as_str())
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| TaskError::poison(format!("task {} payload names no photo", task.id)))
}

/// The project a task's payload names.
pub(crate) fn payload_project(task: &tessera_core::task::Task) -> Result<ProjectId, TaskError> {
    task.payload
        .get("project")
        .and_then(|p| p.as_str())
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| TaskError::poison(format!("task {} payload names no project", task.id)))
}

/// Register the photo task kinds.
pub fn register(r: &mut Registry, faces: Arc<FaceService>) {
    r.register(kinds::INGEST, ingest::Ingest);
    r.register(
        kinds::THUMBNAIL_DIMS,
        process::Process {
            faces: faces.clone(),
            mode: process::Mode::ThumbnailDims,
        },
    );
    r.register(kinds::REBLUR, reblur::Sweep::default());
    r.register(
        kinds::FACE_PROCESS,
        process::Process {
            faces: faces.clone(),
            mode: process::Mode::FaceProcess,
        },
    );
    r.register(
        kinds::REPROCESS,
        process::Process {
            faces,
            mode: process::Mode::Reprocess,
        },
    );
    r.register(kinds::CLEANUP, cleanup::Cleanup);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s3_event() -> serde_json::Value {
        serde_json::json!({"Records": [
            {"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "b"},
             "object": {"key": "uploads/01JDZQ0000000000000000000P/01JDZQ0000000000000000PH0T/a+b.jpg", "size": 5, "sequencer": "0A"}}}
        ]})
    }

    fn any_value() -> impl Strategy<Value = Option<serde_json::Value>> {
        prop_oneof![
            Just(None),
            Just(Some(serde_json::Value::Null)),
            any::<i64>().prop_map(|n| Some(serde_json::json!(n))),
            "\\PC{0,30}".prop_map(|s| Some(serde_json::json!(s))),
            "[%+/.a-zA-Z0-9]{0,40}".prop_map(|s| Some(serde_json::json!(s))),
            Just(Some(serde_json::json!([]))),
            Just(Some(serde_json::json!({}))),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// An S3 notification mangled anywhere decodes, or is refused naming what is
        /// wrong; its keys decode or are refused; nothing panics.
        #[test]
        fn a_mangled_s3_event_is_refused_not_a_panic(path in proptest::collection::vec(0usize..8, 1..7), with in any_value()) {
            let mut v = s3_event();
            tessera_core::testing::mutate(&mut v, &path, with);
            match ObjectCreated::from_s3_event(&v) {
                Ok(events) => {
                    for e in events {
                        if let Ok(k) = e.object_key() {
                            let _ = tessera_core::photo::keys::parse_upload(&k);
                        }
                    }
                }
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }

        #[test]
        fn any_key_text_decodes_or_is_refused(k in "[%+/.a-zA-Z0-9]{0,60}|\\PC{0,60}") {
            let e = ObjectCreated { bucket: "b".into(), key: k, size: 0, sequencer: "0".into() };
            if let Ok(key) = e.object_key() {
                let _ = tessera_core::photo::keys::parse_upload(&key);
            }
        }
    }

    #[test]
    fn s3_events_decode_url_encoded_keys() {
        let event = serde_json::json!({"Records": [
            {"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "b"},
             "object": {"key": "uploads/p/x/My+Photo%C3%A9%2B1.jpg", "size": 5, "sequencer": "0A"}}},
            {"eventName": "ObjectRemoved:Delete", "s3": {"bucket": {"name": "b"},
             "object": {"key": "gone.jpg"}}}
        ]});
        let recs = ObjectCreated::from_s3_event(&event).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].object_key().unwrap(), "uploads/p/x/My Photoé+1.jpg");
        assert!(ObjectCreated::from_s3_event(&serde_json::json!({})).is_err());
        let e = ObjectCreated::for_key("b", "uploads/p/x/My Photoé+1.jpg", 5, "0A");
        assert_eq!(e.key, "uploads/p/x/My+Photo%C3%A9%2B1.jpg");
        assert_eq!(e.object_key().unwrap(), "uploads/p/x/My Photoé+1.jpg");
        assert!(sequencer_older("9", "0A"));
        assert!(!sequencer_older("0B", "0A"));
    }
}
