//! The rig the photo job tests share: the real embedded adapters (SQLite, a folder)
//! and the real face models, with helpers to upload, ingest, settle and look.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tessera_core::domain::Project;
use tessera_core::event::EventKind;
use tessera_core::geometry::FracRect;
use tessera_core::photo::{Photo, keys};
use tessera_core::ports::state_store::StateStore;
use tessera_core::{JobId, PhotoId, TenantId, records};
use tessera_engine::{Engine, EngineConfig, RetryPolicy, Worker};
use tessera_faces::{DetectorKind, FaceModels, ModelFiles, OnnxRuntime};
use tessera_jobs::photos::{self, FaceService, ObjectCreated, project};
use tessera_local::StateDir;
use tessera_local::embedded::{self, Memory};
use tokio_util::sync::CancellationToken;

/// A small reconstruction spec for planning (nothing runs it: no COLMAP needed).
#[allow(dead_code)]
pub fn small_spec() -> tessera_core::spec::ReconstructionSpec {
    serde_json::from_value(serde_json::json!({
        "project": "01JA0000000000000000000000", "image_set": "images/x",
        "backend": {"name": "colmap"}, "camera_model": "SIMPLE_RADIAL",
        "max_features": 2048, "max_image_size": 1000, "pairs": {"strategy": "exhaustive"},
        "mapper": "incremental", "ba": "standard", "georef": {"mode": "none"},
        "exports": ["points-bin"], "respect_exif_orientation": true, "priority": 0
    }))
    .unwrap()
}

/// How many events a job has (its first page).
#[allow(dead_code)]
pub async fn events_of(engine: &Engine, job: JobId) -> usize {
    engine
        .ports()
        .events
        .read_after(job, 0, 100)
        .await
        .unwrap()
        .len()
}

pub fn shared() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../../shared")
}

pub fn models() -> Arc<FaceModels> {
    static M: std::sync::OnceLock<Arc<FaceModels>> = std::sync::OnceLock::new();
    M.get_or_init(|| {
        let rt = OnnxRuntime::from_env().expect("ORT_DYLIB_PATH (scripts/env.sh)");
        Arc::new(
            FaceModels::load(
                &rt,
                &ModelFiles::in_dir(shared().join("models")),
                DetectorKind::Yunet,
                1,
            )
            .unwrap(),
        )
    })
    .clone()
}

pub struct Rig {
    pub _dir: tempfile::TempDir,
    pub engine: Engine,
}

pub async fn rig() -> Rig {
    rig_with(|_| {}).await
}

/// A rig whose registry `change` adjusts (a handler with other settings).
pub async fn rig_with(change: impl FnOnce(&mut tessera_engine::Registry)) -> Rig {
    rig_over(change, |s| s).await
}

/// A rig whose state store is the SQLite one as `wrap` returns it (one that counts the
/// requests it passes on, say).
pub async fn rig_over(
    change: impl FnOnce(&mut tessera_engine::Registry),
    wrap: impl FnOnce(Arc<dyn StateStore>) -> Arc<dyn StateStore>,
) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let ports =
        embedded::ports_wrapped(&state, Memory::Fixed { bytes: 8 << 30 }, wrap, |o| o).unwrap();
    let mut config = EngineConfig {
        scratch: state.work(),
        ..EngineConfig::default()
    }
    .with_lease(Duration::from_secs(5));
    config.retry = Some(RetryPolicy {
        base: Duration::from_millis(20),
        cap: Duration::from_millis(100),
    });
    let mut registry = tessera_jobs::registry_with(Arc::new(FaceService::with_models(models())));
    change(&mut registry);
    let engine = Engine::new(ports, config, registry);
    engine.ensure_queue().await.unwrap();
    Rig { _dir: dir, engine }
}

impl Rig {
    pub fn store(&self) -> &dyn StateStore {
        self.engine.ports().store.as_ref()
    }

    pub async fn project(&self, threshold: Option<f32>) -> Project {
        project::create(self.store(), TenantId::local(), "p", threshold, 0.35)
            .await
            .unwrap()
    }

    /// Enrol `label` from one shared test photo (the sweep it commits runs on the next
    /// settle).
    pub async fn enrol(
        &self,
        p: &Project,
        label: &str,
        file: &str,
    ) -> (tessera_core::photo::Subject, project::SubjectChange) {
        let bytes = std::fs::read(shared().join("testdata/faces").join(file)).unwrap();
        project::enrol(
            &self.engine,
            models(),
            p.id,
            label,
            vec![(file.into(), bytes)],
            &tessera_core::audit::Actor::cli(p.tenant.clone()),
        )
        .await
        .unwrap()
    }

    /// A row's faces with their embeddings (read from the object it points at).
    pub async fn faces(&self, row: &Photo) -> Vec<tessera_core::photo::Face> {
        photos::row::faces(self.engine.ports().objects.as_ref(), row)
            .await
            .unwrap()
            .expect("the row has faces")
    }

    /// Replace a photo's blur regions as the operator; the new edit revision.
    pub async fn set_regions(&self, photo: PhotoId, regions: &[FracRect]) -> u64 {
        photos::regions::set_regions(
            &self.engine,
            photo,
            regions,
            &tessera_core::audit::Actor::cli(TenantId::local()),
        )
        .await
        .unwrap()
    }

    /// Upload a shared test photo; the event S3 would send for it.
    pub async fn upload(&self, p: &Project, file: &str) -> (PhotoId, ObjectCreated) {
        let bytes = std::fs::read(shared().join("testdata/faces").join(file)).unwrap();
        self.upload_bytes(p, &format!("my {file}"), bytes).await
    }

    /// Upload `bytes` as a new photo named `name`; the event S3 would send for it.
    pub async fn upload_bytes(
        &self,
        p: &Project,
        name: &str,
        bytes: Vec<u8>,
    ) -> (PhotoId, ObjectCreated) {
        let photo = PhotoId::new();
        let key = keys::upload(p.id, photo, name);
        let size = bytes.len() as u64;
        self.engine
            .ports()
            .objects
            .put(&key, bytes.into())
            .await
            .unwrap();
        (
            photo,
            ObjectCreated::for_key("local", &key, size, "00000000000000A0"),
        )
    }

    pub async fn ingest(&self, p: &Project, event: &ObjectCreated) -> JobId {
        self.engine
            .submit(photos::ingest_plan(p.tenant.clone(), p.id, event))
            .await
            .unwrap()
            .job_id
    }

    /// Submit a re-decision of `photo` at its project's subjects and its own regions as
    /// they are now (what the API's reprocess action submits).
    pub async fn redecide(&self, photo: PhotoId) -> JobId {
        let row = self.photo(photo).await;
        let p = photos::project::load(self.store(), row.project)
            .await
            .unwrap();
        self.engine
            .submit(photos::reprocess_plan(
                p.tenant.clone(),
                p.id,
                photo,
                p.subjects_rev,
                row.edits_rev,
            ))
            .await
            .unwrap()
            .job_id
    }

    /// Wait (at most a minute, while a worker runs elsewhere) until `job` has ended.
    pub async fn wait_over(&self, job: JobId) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !self.engine.job(job).await.unwrap().is_over() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {job} did not end"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Run workers until every job in the store has ended.
    pub async fn settle(&self) {
        let stop = CancellationToken::new();
        let worker = Worker::new(self.engine.clone(), 2, Some(Duration::from_millis(200)));
        let s = stop.clone();
        let h = tokio::spawn(async move { worker.run(s).await });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let mut seen = None;
        loop {
            if self
                .engine
                .all_jobs_over(&TenantId::local(), &mut seen)
                .await
                .unwrap()
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "jobs did not settle"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.cancel();
        h.await.unwrap();
    }

    /// Every run of `photo`'s jobs, for a failure message: which job, how each task ended,
    /// after how many runs, with what result or error.
    pub async fn story(&self, photo: PhotoId) -> String {
        let jobs = self
            .engine
            .list_jobs(&TenantId::local(), None, 1000)
            .await
            .unwrap()
            .0;
        let mut lines = Vec::new();
        for job in jobs.iter().filter(|j| j.spec["photo"] == photo.to_string()) {
            for t in self.engine.job_tasks(job.id).await.unwrap() {
                lines.push(format!(
                    "{} {} {:?}: {:?} attempts {} moved_on {} result {:?} error {:?}",
                    job.kind,
                    t.name,
                    job.spec.get("subjects_rev"),
                    t.state,
                    t.attempts,
                    t.moved_on,
                    t.result,
                    t.last_error.map(|e| e.message)
                ));
            }
        }
        lines.join("\n")
    }

    pub async fn photo(&self, id: PhotoId) -> Photo {
        records::decode(
            &self
                .store()
                .get(&records::photo_key(id))
                .await
                .unwrap()
                .unwrap(),
        )
        .unwrap()
    }

    pub async fn objects(&self, prefix: &str) -> Vec<String> {
        let (page, _) = self
            .engine
            .ports()
            .objects
            .list(prefix, None, 1000)
            .await
            .unwrap();
        page.into_iter().map(|m| m.key).collect()
    }

    pub async fn jobs_of_kind(&self, kind: &str) -> Vec<tessera_core::job::Job> {
        let jobs = self
            .engine
            .list_jobs(&TenantId::local(), None, 1000)
            .await
            .unwrap()
            .0;
        jobs.into_iter().filter(|j| j.kind == kind).collect()
    }

    pub async fn detections_in(&self, job: JobId) -> usize {
        self.engine
            .ports()
            .events
            .read_after(job, 0, 1000)
            .await
            .unwrap()
            .iter()
            .filter(|e| matches!(&e.kind, EventKind::PhaseStarted { phase } if phase.as_str() == "face_detection"))
            .count()
    }

    pub async fn image(&self, key: &str) -> image::RgbImage {
        image::load_from_memory(&self.engine.ports().objects.get(key).await.unwrap())
            .unwrap()
            .to_rgb8()
    }
}

pub fn derived(p: &Photo) -> Vec<String> {
    let mut k: Vec<String> = p
        .referenced_keys()
        .into_iter()
        .filter(|k| k.starts_with("photos/"))
        .map(String::from)
        .collect();
    k.sort();
    k
}

/// Fine detail inside a region: the mean absolute difference between horizontally
/// neighbouring pixels (green channel), which blur removes.
pub fn detail(img: &image::RgbImage, r: &FracRect) -> f64 {
    let [x1, y1, x2, y2] = r.to_pixels(img.width(), img.height());
    let (mut sum, mut n) = (0f64, 0f64);
    for y in y1 as u32..y2 as u32 {
        for x in x1 as u32..(x2 as u32).saturating_sub(1) {
            sum += (img.get_pixel(x + 1, y)[1] as f64 - img.get_pixel(x, y)[1] as f64).abs();
            n += 1.0;
        }
    }
    sum / n.max(1.0)
}
