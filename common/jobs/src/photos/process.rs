//! `face_process`, `reprocess` and `thumbnail_dims`: decide every face, blur, write the
//! files of a new version, publish last.
//!
//! Order of writes (each row write is conditional on the variant version, and fenced):
//! 1. faces, if the photo has none yet (detection happens once per photo; reprocess of
//!    a photo that was never detected detects for the first time), decided, and joined to
//!    their clusters;
//! 2. the new version: `variant_version + 1`, `published_at = null`, the faces (their
//!    embeddings in an object named by its content, stored right after the row points
//!    at it: [`tessera_core::embeddings`]), and every key of the new version *staged*
//!    before any upload (a row under older [`RULES`] is migrated here, in the same
//!    write);
//! 3. per rendition: upload the file and its thumbnail (under keys staged in 2);
//! 4. with the task's success, in one transaction: the row pointed at every new file
//!    (the keys they replace go to `replaced_keys`), `published_at = now`, nothing
//!    staged, the `subjects_rev` the decision used — on the condition that it is still
//!    the project's, and that the row's `edits_rev` is still the one whose blur regions
//!    were rendered. A subject change or a region edit that lands while a photo is being
//!    decided makes that transaction fail, and the retry decides again with the new
//!    subjects and regions.
//!
//! A crash anywhere leaves the row unpublished or pointing at complete files; a retry
//! starts a newer version, so no object a row points at is ever overwritten. The files
//! of a version cut off are staged, never pointed at, and cleanup deletes them. Files are
//! not pointed at one by one as they are stored: a retry never resumes a version, so
//! those writes bought nothing, and each rewrote the whole row (billed by its size, twice
//! in a transaction: tens of KB for a crowd).
//!
//! The upload is read back and checked against the hash ingest recorded before it is
//! used: bytes swapped under an ingested key are never blurred with another photo's face
//! boxes, the task fails permanently and the photo is unpublished.

use super::against::Against;
use super::render::{self, FileMeta, VariantPlan};
use super::{
    FaceService, clusters, decide, faces, fault, notices, payload_photo, republish, row, upload,
    view,
};
use async_trait::async_trait;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use tessera_core::Millis;
use tessera_core::event::Phase;
use tessera_core::geometry::FracRect;
use tessera_core::job::Job;
use tessera_core::notify::{Notice, NoticeType};
use tessera_core::photo::{Face, Photo, RULES, Rendition, keys};
use tessera_core::ports::state_store::Write;
use tessera_core::privacy::MatchPolicy;
use tessera_core::privacy_view;
use tessera_core::task::{Task, TaskState};
use tessera_engine::{Need, TaskContext, TaskError, TaskHandler, TaskOutput};
use tessera_imaging::Orientation;

/// Which job this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// First processing after ingest.
    FaceProcess,
    /// Subjects, regions or rules changed: re-decide and re-blur from stored faces.
    Reprocess,
    /// First processing of a photo in a project where nobody opted out and a threshold
    /// is set: no detection, one public file. Acts only on a row at variant version 0,
    /// and detects after all if the project has changed since ingest chose it.
    ThumbnailDims,
}

/// The handler of every mode.
pub struct Process {
    /// The face models (loaded once per process).
    pub faces: Arc<FaceService>,
    /// Which job.
    pub mode: Mode,
}

fn blocking_err(e: tokio::task::JoinError) -> TaskError {
    TaskError::transient(format!("worker thread: {e}"))
}

/// What a row under older [`RULES`] becomes: regions mapped from stored to displayed
/// pixels, faces dropped (detected again) when the photo is not stored upright.
struct Migration {
    regions: Vec<FracRect>,
    redetect: bool,
}

fn migration(photo: &Photo, orientation: Orientation) -> Option<Migration> {
    (photo.rules < RULES).then(|| Migration {
        regions: photo
            .blur_regions
            .iter()
            .map(|r| orientation.map_rect(*r))
            .collect(),
        redetect: !orientation.is_upright(),
    })
}

#[async_trait]
impl TaskHandler for Process {
    /// A run of a second or two: its events go with its end.
    fn defers_events(&self) -> bool {
        true
    }

    /// Every mode may detect: a publish without detection detects after all when someone
    /// opted out meanwhile, and a re-blur re-detects photos whose orientation rules changed.
    fn needs(&self) -> &'static [Need] {
        &[Need::FaceRuntime]
    }

    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let id = payload_photo(ctx.task())?;
        let ports = ctx.ports();
        let store = ports.store.as_ref();
        let Some(mut photo) = row::find(store, id).await? else {
            return Ok(row::erased(id));
        };
        let proj = view::for_photo(store, ports.objects.as_ref(), photo.project, id)
            .await
            .map_err(TaskError::from_classified)?;
        // A thumbnail_dims message re-sent after the photo was processed (and is current)
        // acts on nothing; one whose own earlier attempt bumped the version goes on.
        if self.mode == Mode::ThumbnailDims
            && photo.variant_version != 0
            && photo.servable(proj.subjects_rev)
        {
            tracing::info!(photo = %id, version = photo.variant_version, "thumbnail_dims: the photo is published and current; nothing to do");
            return Ok(TaskOutput::result(serde_json::json!({
                "photo": id, "skipped": "the photo is published and current",
            })));
        }
        // The subjects are the set the view names (immutable, named by its content), so
        // they are the ones of the view's revision; a change since is caught by the
        // publishing condition on the same view.
        let subjects = view::subjects(store, ports.objects.as_ref(), &proj)
            .await
            .map_err(TaskError::from_classified)?;
        let policy = MatchPolicy::from_threshold(proj.match_threshold);

        if let Some(at) = photo.original_deleted_at {
            return Err(TaskError::permanent(format!(
                "the original of photo {id} was deleted on {} under the project's retention, so it cannot be decided again; it stays unpublished — upload it again to publish it",
                at.to_rfc3339()
            )));
        }
        if self.mode == Mode::Reprocess {
            let against = Against {
                view: proj.clone(),
                subjects: subjects.clone(),
                policy,
            };
            if let Some(out) = republish::unchanged(ctx, &photo, against).await? {
                return Ok(out);
            }
        }
        let bytes = ports.objects.get(&photo.upload_key).await?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        if sha256 != photo.sha256 {
            return Err(TaskError::permanent(format!(
                "upload `{}` of photo {id} changed after ingest (sha256 {} is now {}); the photo stays unpublished",
                photo.upload_key,
                &photo.sha256[..12],
                &sha256[..12]
            )));
        }
        let name = photo.file_name.clone();
        let decoded = tokio::task::spawn_blocking(move || upload::decode(&name, &bytes))
            .await
            .map_err(blocking_err)?
            .map_err(TaskError::from_classified)?;
        let meta = FileMeta {
            icc: decoded.icc.clone(),
            exif: decoded
                .exif
                .as_deref()
                .and_then(|raw| tessera_imaging::metadata::kept_exif(raw, proj.keep_metadata)),
        };
        let migrate = migration(&photo, decoded.orientation);
        let img = Arc::new(decoded.rgb);
        let mut regions = photo.blur_regions.clone();
        let mut known = row::faces(ports.objects.as_ref(), &photo).await?;
        if known.is_none() {
            // Never detected, or its embeddings object is lost: nothing stored to reuse,
            // so what detection finds now is stored again (under the same key, if the
            // same faces are found).
            photo.embeddings_key = None;
        }
        if let Some(m) = &migrate {
            regions = m.regions.clone();
            if m.redetect {
                known = None;
            }
            tracing::info!(photo = %id, orientation = decoded.orientation.exif(), redetect = m.redetect, "migrating the row to the current privacy rules");
        }
        // The subjects as read, not the counter: nobody to hide only if none exists.
        let nobody_to_hide = subjects.is_empty() && proj.match_threshold.is_some();

        // 1. Faces: detected once per photo, kept for every later re-blur.
        let mut detected_by = None;
        let mut faces = match known {
            Some(f) => f,
            // Nothing to hide and nobody opted out: no detection (a later enrolment
            // re-decides the photo and detects then). Never for a photo that was
            // detected and whose embeddings are lost: its faces are found again, so a
            // row that had faces never ends with none.
            None if self.mode == Mode::ThumbnailDims && nobody_to_hide && photo.faces.is_none() => {
                Vec::new()
            }
            None => {
                let started = ctx.phase_started(Phase::FaceDetection).await?;
                let models = self.faces.models()?;
                let detector = models.detector_kind().as_str();
                let pixels = img.clone();
                let found =
                    tokio::task::spawn_blocking(move || faces::faces_in(&models, &pixels, policy))
                        .await
                        .map_err(blocking_err)?
                        .map_err(TaskError::from_classified)?;
                // The faces are written with the version bump (2.), which comes next: a
                // write of its own here bought only the detection of a run that dies in
                // between, and rewrote the whole row (billed by its size).
                ctx.metric("faces", found.len() as f64, None).await?;
                ctx.phase_completed(Phase::FaceDetection, started).await?;
                tracing::info!(photo = %id, faces = found.len(), detector, "faces detected");
                detected_by = Some(detector);
                found
            }
        };
        // Faces found while the project had no threshold were not embedded; they are
        // now that it recognises someone (from their stored landmarks, no detection).
        if faces.iter().any(|f| faces::needs_embedding(f, policy)) {
            let models = self.faces.models()?;
            let pixels = img.clone();
            let (embedded, n) = tokio::task::spawn_blocking(move || {
                let n = faces::embed_missing(&models, &pixels, &mut faces, policy);
                (faces, n)
            })
            .await
            .map_err(blocking_err)?;
            faces = embedded;
            let n = n.map_err(TaskError::from_classified)?;
            tracing::info!(photo = %id, embedded = n, "faces found without a threshold embedded now that one is set");
        }
        // Decided, looking again at the close calls (which needs the detector and the
        // pixels; a project with nobody opted out never does).
        if decide::may_look_again(&faces, &subjects, policy) {
            let models = self.faces.models()?;
            let (pixels, subjects) = (img.clone(), subjects.clone());
            let (decided, how) = tokio::task::spawn_blocking(move || {
                let how = decide::decide(&models, &pixels, &mut faces, &subjects, policy);
                (faces, how)
            })
            .await
            .map_err(blocking_err)?;
            faces = decided;
            let how = how.map_err(TaskError::from_classified)?;
            if how.looked_again > 0 {
                tracing::info!(photo = %id, looked_again = how.looked_again, changed = how.changed, "close calls looked at again");
            }
        } else {
            for f in &mut faces {
                f.redecide(&subjects, policy);
            }
        }
        // Faces found again replace the ones the row had: those leave their clusters
        // first (the records of which cluster each joined are by index).
        if detected_by.is_some() && photo.faces.is_some() {
            clusters::forget_photo(ctx.engine(), &photo)
                .await
                .map_err(TaskError::from_classified)?;
        }
        let mut against = Against {
            view: proj,
            subjects,
            policy,
        };
        let (joined, ruled) = against.clustered(ctx, &photo, &mut faces).await?;
        let proj = against.view;
        let decided_rev = proj.subjects_rev;
        let plans = render::plan(&faces, &regions, proj.blur_expand);
        let rendered = render::fingerprint(&plans, proj.keep_metadata);
        ctx.checkpoint().await?;

        // 2. A new version, unpublished, with every key staged before any upload.
        let version = photo.variant_version + 1;
        let mut replaced = photo.replaced_keys.clone();
        let mut renditions = photo.renditions.clone();
        let staged: Vec<String> = plans
            .iter()
            .flat_map(|p| {
                let (k, t) = keys::rendition(photo.project, id, version, p.variant);
                [k, t]
            })
            .collect();
        let mut bump = vec![
            ("variant_version", row::json(&version)),
            (row::STAGED_BY, row::json(&ctx.task().id)),
            (row::STAGED_BY_SUBMITTED, row::json(&ctx.task().created_at)),
            ("published_at", serde_json::Value::Null),
            ("failure", serde_json::Value::Null),
            ("staged_keys", row::json(&staged)),
        ];
        // Faces are stored once detected (a thumbnail_dims photo has none yet).
        let mut pending = None;
        if known_or_detected(&photo, detected_by, migrate.as_ref()) {
            let (fields, p) = row::face_fields(&photo, &faces);
            bump.extend(fields);
            pending = Some(p);
        } else if migrate.is_some() {
            bump.push(("faces", serde_json::Value::Null));
            bump.push(("embeddings_key", serde_json::Value::Null));
        }
        if let Some(d) = detected_by {
            bump.push(("detector", row::json(&d)));
        }
        if migrate.is_some() {
            bump.extend([
                ("blur_regions", row::json(&regions)),
                ("width", row::json(&img.width())),
                ("height", row::json(&img.height())),
                ("orientation", row::json(&decoded.orientation.exif())),
                ("rules", row::json(&RULES)),
            ]);
        }
        // Regions edited since the row was read are not in this decision (and a migrated
        // row's were drawn on the old frame): staged only while they are the ones read.
        let bump_write = row::stage(id, photo.variant_version, photo.edits_rev, bump);
        let started = ctx.phase_started(Phase::Blur).await?;
        if photo.published_at.is_some() {
            // Whoever copied the served version should take it down now, not after
            // the new one is ready (or never, if deciding again fails). Raised before
            // the write that unpublishes: a crash between the two must not lose it (a
            // repeat is the same notice, delivered once).
            ctx.raise(&[notices::unpublished(
                &photo,
                &ctx.job().tenant,
                "it is being decided again (subjects, settings or regions changed)",
            )])
            .await?;
        }
        fault::pause_point(fault::BEFORE_STAGING).await?;
        if ctx.try_commit(vec![bump_write]).await?.is_some() {
            // Staged over by a newer run since this one read the row: the same stand-down
            // as at publication, found out one write earlier. Otherwise regions were saved
            // meanwhile (or the photo erased): tried again, reading them.
            let taken = row::taken_over(id, photo.variant_version);
            if taken.shown_by(store.get(&taken.key).await?.as_ref()) {
                tracing::info!(photo = %id, version = photo.variant_version, "a newer run staged a version first; it publishes the photo");
                return Ok(TaskOutput::result(taken.result));
            }
            // Nothing failed: the run that reads them is this one, again, with its
            // attempt given back (a user saving regions ten times must not kill it).
            return Err(TaskError::moved_on(format!(
                "photo {id} changed after it was read (regions saved, or erased); it is decided again"
            )));
        }
        if let Some(p) = pending {
            p.store(ports.objects.as_ref()).await?;
        }
        // Files a run cut off had staged (and maybe stored) for its version, which was
        // never pointed at: nothing refers to them now that this version is staged in
        // their place. Deleted here, because a photo's first processing has no cleanup
        // after it (`super::follow_up_plan`); what a run still going past its lease
        // stores after this stays under the photo's prefix until the photo is erased
        // or a later cleanup lists it, never served.
        for key in photo
            .staged_keys
            .iter()
            .filter(|k| !staged.contains(*k) && !photo.is_protected(k))
        {
            if let Err(e) = ports.objects.delete(key).await {
                tracing::warn!(photo = %id, key, error = %e, "a cut-off run's file was not deleted; it is never served");
            }
        }

        // 3. Files, stored under the staged keys; the row points at them when it publishes.
        for VariantPlan { variant, blur } in &plans {
            let pixels = img.clone();
            let blur = blur.clone();
            let meta = meta.clone();
            let out = tokio::task::spawn_blocking(move || render::render(&pixels, &blur, &meta))
                .await
                .map_err(blocking_err)?
                .map_err(TaskError::permanent)?;
            let (key, thumb_key) = keys::rendition(photo.project, id, version, *variant);
            let byte_size = Some(out.file.len() as u64);
            ports.objects.put(&key, out.file.into()).await?;
            ports.objects.put(&thumb_key, out.thumb.into()).await?;
            fault::crash_point(fault::AFTER_VARIANT_UPLOAD);
            replace(
                &photo,
                &mut renditions,
                &mut replaced,
                Rendition {
                    variant: *variant,
                    key,
                    thumb_key,
                    byte_size,
                },
            );
            ctx.checkpoint().await?;
        }
        // Renditions for subjects no longer in the photo go.
        let wanted: Vec<_> = plans.iter().map(|p| p.variant).collect();
        renditions.retain(|r| {
            let keep = wanted.contains(&r.variant);
            if !keep {
                retire(&photo, &mut replaced, r);
            }
            keep
        });
        ctx.phase_completed(Phase::Blur, started).await?;
        fault::pause_point(fault::BEFORE_PUBLISH).await?;

        // 4. Publish: with the task's success, after every file is stored, while the
        //    project's subjects are still the ones decided against.
        let published_at = Millis::now();
        tracing::info!(photo = %id, version, subjects_rev = decided_rev, files = renditions.len(), faces = faces.len(), "publishing");
        let mut summary = summary(&photo, version, &faces, &renditions, self.mode);
        summary["clusters"] = serde_json::json!({
            "joined": joined.joined, "started": joined.started,
            "transactions": joined.transactions, "ruled": ruled,
        });
        Ok(TaskOutput {
            result: summary,
            writes: vec![
                row::publish(
                    id,
                    version,
                    photo.edits_rev,
                    vec![
                        ("renditions", row::json(&renditions)),
                        ("replaced_keys", row::json(&replaced)),
                        ("staged_keys", row::json(&Vec::<String>::new())),
                        ("subjects_rev", row::json(&decided_rev)),
                        ("published_at", row::json(&published_at)),
                        ("rendered", row::json(&rendered)),
                        // A cancelled re-decision may have failed the row after this run
                        // staged ([`row::fail_cancelled`]): what is published has no failure.
                        ("failure", serde_json::Value::Null),
                    ],
                ),
                privacy_view::still_at(photo.project, id, decided_rev),
            ],
            moved_on: DECIDED_FROM.to_vec(),
            taken_over: Some(row::taken_over(id, version)),
        })
    }

    fn raises_notices(&self) -> bool {
        true
    }

    /// Published when the task succeeded (its success wrote `published_at`), failed
    /// when it ended failed or dead and its compensation wrote the reason.
    fn notices(&self, task: &Task, job: &Job) -> Vec<Notice> {
        let Ok(id) = payload_photo(task) else {
            return Vec::new();
        };
        let Some(project) = job.project else {
            return Vec::new();
        };
        let at = task.finished_at.unwrap_or_else(Millis::now);
        let (kind, about, data) = match task.state {
            TaskState::Succeeded => {
                // Only a run that published says which version it published (an erased
                // photo or a skipped run publishes nothing).
                let Some(version) = task
                    .result
                    .as_ref()
                    .and_then(|r| r.get("variant_version"))
                    .and_then(|v| v.as_u64())
                else {
                    return Vec::new();
                };
                (
                    NoticeType::PhotoPublished,
                    format!("photo/{id}/published/{version}"),
                    serde_json::json!({ "photo_id": id, "variant_version": version }),
                )
            }
            // A failure whose compensation was refused failed nothing: a run submitted
            // later staged the photo and says how it ends ([`row::fail`]).
            TaskState::Failed | TaskState::Dead if task.compensation_refused => {
                return Vec::new();
            }
            TaskState::Failed | TaskState::Dead => {
                return vec![notices::failed(
                    id,
                    project,
                    task,
                    job,
                    task.failure_message("processing ended without success"),
                    None,
                )];
            }
            _ => return Vec::new(),
        };
        vec![Notice::new(
            kind,
            &about,
            job.tenant.clone(),
            Some(project),
            at,
            data,
        )]
    }

    /// A run cancelled leaves the photo unpublished (it staged a version, or it was the
    /// re-decision that saved regions waited for, or the first processing), and an
    /// older run of the photo may have stood down to it: the photo is failed with the
    /// reason, so that it is not left withheld with nobody to publish it or say why.
    fn compensates_cancellation(&self) -> bool {
        true
    }

    /// At a final failure the photo is failed unless a run submitted later has staged
    /// a version since ([`row::fail`]): that run publishes it or fails it itself. At a
    /// cancellation the same, whether or not the run got to stage, but only a photo that
    /// is withheld, and for a re-decision of regions only while the regions are still
    /// the ones it was for ([`row::fail_cancelled`]).
    fn compensate(&self, task: &Task) -> Vec<Write> {
        let reason = task.failure_message(&format!("task `{}` ended without success", task.name));
        let Ok(id) = payload_photo(task) else {
            return Vec::new();
        };
        if task.state == TaskState::Cancelled {
            return vec![row::fail_cancelled(id, task, &reason)];
        }
        vec![row::fail(id, task, &reason)]
    }
}

/// The write of a publishing run's output that checks the subjects it decided against
/// ([`privacy_view::still_at`], its second). When it conflicts, a subject change (an
/// opt-out, a cluster's change) committed while the run decided: the run holds an old
/// decision, and running it again (after the usual back-off) decides at the new
/// revision, with no attempt spent. A burst with an opt-out and cluster changes in it moved the revision three
/// times under one photo, which ended dead: its attempts went to the world changing.
///
/// A conflict on the row ([`row::publish`], its first) has two causes. A newer run of
/// the photo staged a version over this one's (its first processing and an opt-out's
/// re-decision at once): the engine ends the run stood down ([`row::taken_over`]),
/// before it looks here, since running it again only staged a third version over the
/// other's, and the two undid each other until one ended dead. Otherwise the version is
/// still this run's and regions were saved meanwhile (or the photo erased): what it
/// decided from moved on as well, and the run that reads them is this one, again.
pub(super) const DECIDED_FROM: [usize; 2] = [0, 1];

/// Whether the row should hold `faces` after this run: it had faces and keeps them, or
/// detection ran now.
fn known_or_detected(
    photo: &Photo,
    detected_by: Option<&str>,
    migrate: Option<&Migration>,
) -> bool {
    detected_by.is_some() || (photo.faces.is_some() && !migrate.is_some_and(|m| m.redetect))
}

/// Queue a rendition's objects for deletion (never the upload or its thumbnail).
fn retire(photo: &Photo, replaced: &mut Vec<String>, old: &Rendition) {
    for k in [&old.key, &old.thumb_key] {
        if !photo.is_protected(k) && !replaced.contains(k) {
            replaced.push(k.clone());
        }
    }
}

/// Point the renditions at `new`, retiring what it replaces.
fn replace(
    photo: &Photo,
    renditions: &mut Vec<Rendition>,
    replaced: &mut Vec<String>,
    new: Rendition,
) {
    match renditions.iter_mut().find(|r| r.variant == new.variant) {
        Some(old) => {
            retire(photo, replaced, old);
            *old = new;
        }
        None => renditions.push(new),
    }
}

fn summary(
    photo: &Photo,
    version: u64,
    faces: &[Face],
    renditions: &[Rendition],
    mode: Mode,
) -> serde_json::Value {
    serde_json::json!({
        "photo": photo.id,
        "mode": format!("{mode:?}"),
        "variant_version": version,
        "faces": faces.len(),
        "blurred_in_public": faces.iter().filter(|f| f.decision.blurred_in(None)).count(),
        "files": renditions.len(),
    })
}
