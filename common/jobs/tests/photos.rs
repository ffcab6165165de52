//! Photo jobs on the real embedded adapters and the real models: duplicate and
//! reordered events, thumbnail_dims versus face_process, reprocess without
//! re-detection, replaced files deleted, and unpublishing on a final failure.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tessera_core::domain::Project;
use tessera_core::event::EventKind;
use tessera_core::geometry::FracRect;
use tessera_core::photo::{Photo, Pipeline, keys};
use tessera_core::ports::event_log::StoreEventLog;
use tessera_core::ports::state_store::StateStore;
use tessera_core::{JobId, PhotoId, TenantId, records};
use tessera_engine::{Engine, EngineConfig, Ports, RetryPolicy, Worker};
use tessera_faces::{DetectorKind, FaceModels, ModelFiles, OnnxRuntime};
use tessera_jobs::photos::{self, FaceService, ObjectCreated, project};
use tessera_local::{
    FixedMemory, FolderObjectStore, LocalCompute, MemoryGate, SqliteQueue, SqliteStateStore,
    StateDir,
};
use tokio_util::sync::CancellationToken;

fn shared() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../../shared")
}

fn models() -> Arc<FaceModels> {
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

struct Rig {
    _dir: tempfile::TempDir,
    engine: Engine,
}

async fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(&state.state_db()).unwrap());
    let ports = Ports {
        store: store.clone(),
        queue: Arc::new(SqliteQueue::open(&state.queue_db()).unwrap()),
        events: Arc::new(StoreEventLog::new(store)),
        objects: Arc::new(FolderObjectStore::new(state.objects(), state.tmp()).unwrap()),
        compute: Arc::new(LocalCompute::new(MemoryGate::new(
            FixedMemory(8 << 30),
            8 << 30,
            0,
            4,
        ))),
    };
    let mut config = EngineConfig {
        scratch: state.work(),
        ..EngineConfig::default()
    }
    .with_lease(Duration::from_secs(5));
    config.retry = RetryPolicy {
        base: Duration::from_millis(20),
        cap: Duration::from_millis(100),
    };
    let registry = tessera_jobs::registry_with(Arc::new(FaceService::with_models(models())));
    let engine = Engine::new(ports, config, registry);
    engine.ensure_queue().await.unwrap();
    Rig { _dir: dir, engine }
}

impl Rig {
    fn store(&self) -> &dyn StateStore {
        self.engine.ports().store.as_ref()
    }

    async fn project(&self, threshold: Option<f32>) -> Project {
        project::create(self.store(), TenantId::local(), "p", threshold, 0.35)
            .await
            .unwrap()
    }

    async fn enrol(&self, p: &Project, label: &str, file: &str) {
        let bytes = std::fs::read(shared().join("testdata/faces").join(file)).unwrap();
        project::enrol(
            self.store(),
            models(),
            p.id,
            label,
            vec![(file.into(), bytes)],
        )
        .await
        .unwrap();
    }

    /// Upload a test photo; the event S3 would send for it.
    async fn upload(&self, p: &Project, file: &str) -> (PhotoId, ObjectCreated) {
        let bytes = std::fs::read(shared().join("testdata/faces").join(file)).unwrap();
        let photo = PhotoId::new();
        let key = keys::upload(p.id, photo, &format!("my {file}"));
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

    async fn ingest(&self, p: &Project, event: &ObjectCreated) -> JobId {
        self.engine
            .submit(photos::ingest_plan(p.tenant.clone(), p.id, event))
            .await
            .unwrap()
            .job_id
    }

    /// Run workers until every job in the store has ended.
    async fn settle(&self) {
        let stop = CancellationToken::new();
        let worker = Worker::new(self.engine.clone(), 2, Some(Duration::from_millis(200)));
        let s = stop.clone();
        let h = tokio::spawn(async move { worker.run(s).await });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let jobs = self
                .engine
                .list_jobs(&TenantId::local(), None, 1000)
                .await
                .unwrap()
                .0;
            if jobs
                .iter()
                .all(|j| j.sealed && j.finished() >= j.tasks_total)
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

    async fn photo(&self, id: PhotoId) -> Photo {
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

    async fn objects(&self, prefix: &str) -> Vec<String> {
        let (page, _) = self
            .engine
            .ports()
            .objects
            .list(prefix, None, 1000)
            .await
            .unwrap();
        page.into_iter().map(|m| m.key).collect()
    }

    async fn jobs_of_kind(&self, kind: &str) -> Vec<tessera_core::job::Job> {
        let jobs = self
            .engine
            .list_jobs(&TenantId::local(), None, 1000)
            .await
            .unwrap()
            .0;
        jobs.into_iter().filter(|j| j.kind == kind).collect()
    }

    async fn detections_in(&self, job: JobId) -> usize {
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

    async fn image(&self, key: &str) -> image::RgbImage {
        image::load_from_memory(&self.engine.ports().objects.get(key).await.unwrap())
            .unwrap()
            .to_rgb8()
    }
}

fn derived(p: &Photo) -> Vec<String> {
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
fn detail(img: &image::RgbImage, r: &FracRect) -> f64 {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_reordered_events_are_harmless() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    r.enrol(&p, "astronaut", "astronaut.png").await;
    let (photo, event) = r.upload(&p, "composite_pd_1280x896.jpg").await;
    assert!(
        event.key.contains("my+composite"),
        "the event key is URL-encoded: {}",
        event.key
    );
    // The same event twice is one job; a later duplicate with a newer sequencer is a
    // second ingest that finds the row; an older one arriving last is ignored.
    let a = r.ingest(&p, &event).await;
    let b = r.ingest(&p, &event).await;
    assert_eq!(a, b);
    let newer = ObjectCreated {
        sequencer: "00000000000000B0".into(),
        ..event.clone()
    };
    let older = ObjectCreated {
        sequencer: "0000000000000090".into(),
        ..event.clone()
    };
    r.ingest(&p, &newer).await;
    r.settle().await;
    r.ingest(&p, &older).await;
    r.settle().await;

    let row = r.photo(photo).await;
    assert_eq!(row.pipeline, Pipeline::FaceProcess);
    assert_eq!(row.variant_version, 1, "processed once");
    assert!(row.published_at.is_some());
    assert_eq!(row.renditions.len(), 2);
    assert_eq!(
        r.jobs_of_kind(photos::kinds::FACE_PROCESS_JOB).await.len(),
        1
    );
    let ingests = r.jobs_of_kind(photos::kinds::INGEST_JOB).await;
    assert_eq!(ingests.len(), 3);
    assert!(
        ingests
            .iter()
            .all(|j| j.status() == tessera_core::job::JobStatus::Succeeded)
    );
    assert_eq!(
        r.objects(&keys::derived_prefix(p.id, photo)).await,
        derived(&row)
    );
    let faces = row.faces.as_ref().unwrap();
    assert_eq!(faces.len(), 8);
    assert!(
        faces
            .iter()
            .all(|f| (0.0..=1.0).contains(&f.bbox.x) && f.bbox.w < 0.2 && f.embedding.len() == 128)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_opted_out_publishes_the_upload_and_thumbnail_dims_never_undoes_face_process() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    let (photo, event) = r.upload(&p, "grace_hopper.jpg").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let row = r.photo(photo).await;
    assert_eq!(row.pipeline, Pipeline::ThumbnailDims);
    assert_eq!(row.variant_version, 0);
    assert!(row.faces.is_none(), "thumbnail_dims does not detect");
    let public = row.public().unwrap();
    assert_eq!(
        public.key, row.upload_key,
        "the public key points at the upload"
    );
    assert_eq!(Some(&public.thumb_key), row.upload_thumb_key.as_ref());
    assert_eq!((row.width, row.height), (512, 600));

    // Someone opts out: the photo is detected for the first time and re-blurred.
    r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    let p = project::load(r.store(), p.id).await.unwrap();
    r.engine
        .submit(photos::reprocess_plan(
            p.tenant.clone(),
            p.id,
            photo,
            p.subjects_rev,
            0,
        ))
        .await
        .unwrap();
    r.settle().await;
    let after = r.photo(photo).await;
    assert_eq!(after.variant_version, 1);
    assert_eq!(after.renditions.len(), 2);
    assert!(after.published_at.is_some());
    assert_eq!(
        after.upload_thumb_key, row.upload_thumb_key,
        "the upload thumbnail is kept"
    );

    // A thumbnail_dims message re-sent from the archive acts on nothing.
    r.engine
        .submit(photos::follow_up_plan(
            p.tenant.clone(),
            p.id,
            photo,
            &format!("{}-resent", row.sha256),
            Pipeline::ThumbnailDims,
        ))
        .await
        .unwrap();
    r.settle().await;
    assert_eq!(r.photo(photo).await, after);
    assert!(
        r.engine
            .ports()
            .objects
            .head(&after.upload_key)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        r.engine
            .ports()
            .objects
            .head(row.upload_thumb_key.as_ref().unwrap())
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reprocess_reblurs_from_stored_faces_and_deletes_what_it_replaced() {
    let r = rig().await;
    let p = r.project(Some(0.363)).await;
    r.enrol(&p, "astronaut", "astronaut.png").await;
    let (photo, event) = r.upload(&p, "composite_pd_1280x896.jpg").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let first = r.photo(photo).await;
    assert_eq!((first.variant_version, first.renditions.len()), (1, 2));
    let first_keys = derived(&first);
    let face_job = r.jobs_of_kind(photos::kinds::FACE_PROCESS_JOB).await[0].id;
    assert_eq!(r.detections_in(face_job).await, 1);

    // A second person opts out and a region is drawn: one more file, the region in all.
    r.enrol(&p, "hopper", "grace_hopper.jpg").await;
    let region = FracRect {
        x: 0.0,
        y: 0.68,
        w: 0.3,
        h: 0.3,
    };
    let edits = project::set_regions(r.store(), photo, &[region])
        .await
        .unwrap();
    let p = project::load(r.store(), p.id).await.unwrap();
    let job = r
        .engine
        .submit(photos::reprocess_plan(
            p.tenant.clone(),
            p.id,
            photo,
            p.subjects_rev,
            edits,
        ))
        .await
        .unwrap()
        .job_id;
    r.settle().await;
    let second = r.photo(photo).await;
    assert_eq!(second.variant_version, 2);
    assert_eq!(second.renditions.len(), 3, "N = 2 → 3 files");
    // Faces were not detected again: identical boxes and embeddings, no detection phase.
    let strip = |p: &Photo| {
        p.faces
            .as_ref()
            .unwrap()
            .iter()
            .map(|f| (f.bbox, f.embedding.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&first), strip(&second));
    assert_eq!(r.detections_in(job).await, 0);
    // Old files are gone, new ones are all there, nothing else under the prefix.
    let now = r.objects(&keys::derived_prefix(p.id, photo)).await;
    assert_eq!(now, derived(&second));
    assert!(first_keys.iter().all(|k| !now.contains(k)));
    assert!(second.replaced_keys.is_empty() && second.staged_keys.is_empty());
    // Every file and thumbnail applies the region (the cameraman's photo is there).
    let upload = r.image(&second.upload_key).await;
    let before = detail(&upload, &region);
    assert!(before > 4.0, "the region has detail to lose: {before}");
    for rendition in &second.renditions {
        for key in [&rendition.key, &rendition.thumb_key] {
            let d = detail(&r.image(key).await, &region);
            assert!(d < before / 4.0, "{key}: detail {d} vs {before}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_failure_unpublishes_in_the_same_transaction() {
    let r = rig().await;
    let p = r.project(None).await;
    let (photo, event) = r.upload(&p, "astronaut.png").await;
    r.ingest(&p, &event).await;
    r.settle().await;
    let row = r.photo(photo).await;
    assert!(row.published_at.is_some());
    assert_eq!(
        row.pipeline,
        Pipeline::FaceProcess,
        "no threshold → face processing (fail closed)"
    );
    assert!(
        row.faces
            .as_ref()
            .unwrap()
            .iter()
            .all(|f| f.decision == tessera_core::privacy::FaceDecision::FailClosed)
    );

    // The upload disappears behind the pipeline's back; a reprocess cannot finish.
    r.engine
        .ports()
        .objects
        .delete(&row.upload_key)
        .await
        .unwrap();
    let job = r
        .engine
        .submit(photos::reprocess_plan(p.tenant.clone(), p.id, photo, 0, 1))
        .await
        .unwrap()
        .job_id;
    r.settle().await;
    let j = r.engine.job(job).await.unwrap();
    assert_eq!(j.status(), tessera_core::job::JobStatus::Failed);
    let after = r.photo(photo).await;
    assert!(
        after.published_at.is_none(),
        "a failed photo must not stay published"
    );
    assert_eq!(
        after.variant_version, row.variant_version,
        "nothing new was started"
    );
}
