//! A reconstruction on AWS's code paths, against moto: light stages run in the
//! stage-runner function; heavy ones go to the orchestrator, which launches them once
//! per claim epoch. Batch itself is not offered locally, so the launcher here starts
//! what the Batch job definition runs, the real `tessera stage --task ID` binary with
//! the container's environment, and reports its end to the orchestrator queue as the
//! EventBridge "Batch Job State Change" event would. The job ends with a model.

mod support;

use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::Deployment;
use tessera_core::TenantId;
use tessera_core::ports::ObjectStore;
use tessera_core::ports::queue::Queue;
use tessera_core::spec::{
    BaMode, BackendSpec, ExportFormat, Georef, MapperKind, PairStrategy, ReconstructionSpec,
};
use tessera_core::task::{ResourceClass, Task, TaskState};
use tessera_engine::TaskError;
use tessera_engine::remote::Launcher;
use tessera_lambda::{Function, Role, routes};

/// `target/<profile>/tessera`, next to this test's directory.
fn tessera_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(Path::parent).unwrap().join("tessera");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p tessera-cli` first",
        bin.display()
    );
    bin
}

/// Starts `tessera stage --task ID` as the Batch job would, and when it exits sends
/// the state-change event EventBridge would send.
struct ProcessLauncher {
    env: Vec<(String, String)>,
    queue: Arc<dyn Queue>,
    launched: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl Launcher for ProcessLauncher {
    async fn launch(&self, task: &Task) -> Result<String, TaskError> {
        let job_id = format!("local-{}", self.launched.lock().unwrap().len() + 1);
        let mut cmd = tokio::process::Command::new(tessera_bin());
        cmd.args(["--json", "stage", "--task", &task.id.to_string()])
            .envs(self.env.iter().cloned())
            .env("AWS_BATCH_JOB_ID", &job_id)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| TaskError::transient(e.to_string()))?;
        self.launched
            .lock()
            .unwrap()
            .push((job_id.clone(), task.name.clone()));
        let (queue, job, task_id) = (self.queue.clone(), job_id.clone(), task.id);
        tokio::spawn(async move {
            let out = child.wait_with_output().await.unwrap();
            let status = if out.status.success() {
                "SUCCEEDED"
            } else {
                "FAILED"
            };
            let event = serde_json::json!({
                "version": "0", "detail-type": "Batch Job State Change", "source": "aws.batch",
                "detail": {
                    "jobId": job, "jobName": format!("tessera-{task_id}"), "status": status,
                    "statusReason": "Essential container in task exited",
                    "container": {"exitCode": out.status.code().unwrap_or(-1)},
                },
            });
            queue
                .send(routes::ORCHESTRATOR, &event.to_string(), Duration::ZERO)
                .await
                .unwrap();
        });
        Ok(job_id)
    }
}

/// A small exhaustive reconstruction of the photos under `image_set`.
fn small_spec(image_set: &str) -> ReconstructionSpec {
    ReconstructionSpec {
        project: tessera_core::ProjectId::new().to_string(),
        image_set: image_set.into(),
        backend: BackendSpec {
            name: "colmap".into(),
            version: None,
        },
        camera_model: serde_json::from_value(serde_json::json!("SIMPLE_RADIAL")).unwrap(),
        max_features: 2048,
        max_image_size: 1000,
        sift_native_scale: false,
        pairs: PairStrategy::Exhaustive,
        mapper: MapperKind::Incremental,
        ba: BaMode::Standard,
        georef: Georef::None,
        respect_exif_orientation: false,
        per_image_intrinsics: false,
        image_set_digest: None,
        georef_if_possible: false,
        crs: None,
        split: None,
        exports: vec![ExportFormat::PointsBin],
        priority: 0,
    }
}

/// Six sample photos reconstructed by `spec` on moto, the tasks `heavy` names in the
/// Large class (so they take the Batch path) and the rest in the stage-runner: the job's
/// tasks when it ended, the Batch launches (job id, task name) and the objects' keys.
async fn run_on_moto(
    spec: ReconstructionSpec,
    heavy: impl Fn(&str) -> bool,
) -> (Vec<Task>, Vec<(String, String)>, Vec<String>) {
    let mut d = Deployment::start(Duration::from_secs(60), 5).await;
    let launcher = Arc::new(ProcessLauncher {
        env: vec![
            ("TESSERA_TABLE".into(), d.settings.table.clone()),
            ("TESSERA_BUCKET".into(), d.settings.bucket.clone()),
            (
                "TESSERA_QUEUE_PREFIX".into(),
                d.settings.queue_prefix.clone(),
            ),
            ("AWS_ENDPOINT_URL".into(), d.moto.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
            ("AWS_REGION".into(), "us-east-1".into()),
        ],
        queue: Arc::new(d.adapters.queue.clone()),
        launched: Mutex::new(Vec::new()),
    });
    let orchestrator = Function::connect(
        &d.settings,
        routes::ORCHESTRATOR,
        tessera_jobs::registry(),
        Role::Launch(launcher.clone()),
    )
    .await;
    d.functions.insert(routes::ORCHESTRATOR, orchestrator);

    // Six of the sample photos, in S3.
    let samples = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs tests"),
    )
    .join("../../sample/images");
    let mut files: Vec<_> = std::fs::read_dir(&samples)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("jpg")))
        .collect();
    files.sort();
    for f in files.iter().take(6) {
        let name = f.file_name().unwrap().to_str().unwrap();
        d.adapters
            .objects
            .put(
                &format!("{}/{name}", spec.image_set),
                std::fs::read(f).unwrap().into(),
            )
            .await
            .unwrap();
    }
    let mut plan =
        tessera_jobs::reconstruct::plan(&spec, TenantId::local(), None, "on moto", 6, 0.5).unwrap();
    for t in plan.tasks.iter_mut() {
        t.resource_class = if heavy(&t.name) {
            ResourceClass::Large
        } else {
            ResourceClass::Small
        };
    }
    let engine = d.functions[routes::STAGE_RUNNER].engine.clone();
    let job = engine.submit(plan).await.unwrap().job_id;

    d.pump_until(Duration::from_secs(300), || async {
        let j = engine.job(job).await.unwrap();
        j.is_over()
    })
    .await;
    let tasks = engine.job_tasks(job).await.unwrap();
    for t in &tasks {
        assert_eq!(
            t.state,
            TaskState::Succeeded,
            "{} {:?}",
            t.name,
            t.last_error
        );
        assert_eq!(
            t.lease.as_ref().map(|l| l.owner.as_str()),
            None,
            "{} finished and released its lease",
            t.name
        );
    }
    let launched = launcher.launched.lock().unwrap().clone();
    let (objects, _) = d.adapters.objects.list("", None, 1000).await.unwrap();
    let keys = objects
        .into_iter()
        .map(|o| o.key)
        .filter(|k| k.contains(&job.to_string()))
        .collect();
    (tasks, launched, keys)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heavy_stages_run_through_the_batch_entrypoint_and_the_job_ends_with_a_model() {
    // Feature extraction and mapping are the heavy stages of a large job: give them a
    // heavy class so they take the Batch path (their memory estimate stays small).
    let (_, launched, keys) = run_on_moto(small_spec("images/on-moto"), |name| {
        matches!(name, "extract" | "map")
    })
    .await;
    let mut names: Vec<&str> = launched.iter().map(|(_, n)| n.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["extract", "map"],
        "exactly the heavy stages went to Batch, once each"
    );
    // The export is in S3.
    assert!(keys.iter().any(|k| k.ends_with("points.bin")), "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_split_runs_one_batch_job_per_cluster_and_the_merge_in_the_stage_runner() {
    // Six photos in clusters of five: two clusters, each its own Batch job; the merge
    // (the map task) runs in the stage-runner's sandbox.
    let mut spec = small_spec("images/split-on-moto");
    spec.split = Some(tessera_core::spec::SplitSpec {
        cluster_size: 5,
        overlap: 3,
    });
    let (tasks, launched, keys) = run_on_moto(spec, |name| name.starts_with("map_cluster_")).await;
    let mut names: Vec<&str> = launched.iter().map(|(_, n)| n.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["map_cluster_0", "map_cluster_1"],
        "one Batch job per cluster, once each"
    );
    let map = tasks.iter().find(|t| t.name == "map").unwrap();
    let split = &map.result.as_ref().unwrap()["split"];
    assert_eq!(split["clusters"].as_array().unwrap().len(), 2, "{split}");
    assert!(
        map.result.as_ref().unwrap()["model"]["registered_images"]
            .as_u64()
            .unwrap()
            >= 5,
        "{map:?}"
    );
    assert!(keys.iter().any(|k| k.ends_with("points.bin")), "{keys:?}");
}

/// The orchestrator's Batch settings as `infra/template.yaml` deploys them when
/// `WorkerImage` keeps its default (a stack for photos only): every queue and definition
/// is `""`.
fn batch_env_without_a_worker() -> std::collections::BTreeMap<String, String> {
    let template = std::fs::read_to_string(
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap())
            .join("../../infra/template.yaml"),
    )
    .unwrap();
    let worker = template.split("\n  WorkerImage:").nth(1).unwrap();
    let default = worker
        .lines()
        .find_map(|l| l.trim().strip_prefix("Default: "))
        .unwrap();
    assert_eq!(
        default, "\"\"",
        "the template's WorkerImage default changed"
    );
    let orchestrator = template.split("\n  OrchestratorFunction:").nth(1).unwrap();
    orchestrator
        .lines()
        .filter_map(|l| l.trim().split_once(": !If [HasWorker, "))
        .filter(|(name, _)| name.starts_with("TESSERA_BATCH_"))
        .map(|(name, rest)| {
            // Without a worker, HasWorker is false: the second branch.
            let value = rest.trim_end_matches(']').rsplit(", ").next().unwrap();
            (name.to_string(), value.trim_matches('"').to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_worker_a_heavy_stage_fails_at_once_naming_why() {
    let env = batch_env_without_a_worker();
    assert_eq!(env.len(), 4, "{env:?}");
    let mut d = Deployment::start(Duration::from_secs(60), 5).await;
    let sdk = d.settings.sdk_config().await;
    let launcher = tessera_lambda::launch::BatchLaunch(tessera_aws::BatchLauncher::new(
        tessera_aws::batch::client(&sdk),
        tessera_aws::BatchLauncher::targets_from(|name| env.get(name).cloned()),
    ));
    let orchestrator = Function::connect(
        &d.settings,
        routes::ORCHESTRATOR,
        tessera_jobs::registry(),
        Role::Launch(Arc::new(launcher)),
    )
    .await;
    d.functions.insert(routes::ORCHESTRATOR, orchestrator);
    let spec = small_spec("images/no-worker");
    let mut plan =
        tessera_jobs::reconstruct::plan(&spec, TenantId::local(), None, "no worker", 600, 24.0)
            .unwrap();
    for t in plan.tasks.iter_mut() {
        t.resource_class = ResourceClass::Large;
    }
    let engine = d.functions[routes::STAGE_RUNNER].engine.clone();
    let job = engine.submit(plan).await.unwrap().job_id;
    // One pass of the orchestrator is enough: the first launch fails the task, its
    // message is acknowledged (never redelivered to the dead-letter queue) and the job
    // ends.
    d.pump_until(Duration::from_secs(60), || async {
        let j = engine.job(job).await.unwrap();
        j.is_over()
    })
    .await;
    let tasks = engine.job_tasks(job).await.unwrap();
    let first = tasks
        .iter()
        .find(|t| t.state == TaskState::Failed)
        .unwrap_or_else(|| {
            panic!(
                "no task failed: {:?}",
                tasks
                    .iter()
                    .map(|t| (&t.name, t.state, &t.last_error))
                    .collect::<Vec<_>>()
            )
        });
    // Failed at its first launch: never claimed, never retried; the rest cancelled.
    assert_eq!(
        (first.attempts, first.name.as_str()),
        (0, "ingest"),
        "{first:?}"
    );
    assert!(
        tasks.iter().all(|t| t.state.is_terminal()),
        "{:?}",
        tasks.iter().map(|t| (&t.name, t.state)).collect::<Vec<_>>()
    );
    let why = &first.last_error.as_ref().unwrap().message;
    assert!(
        why.contains("no Batch worker") && why.contains("WorkerImage"),
        "{why}"
    );
    let depth = d.adapters.queue.depth(routes::ORCHESTRATOR).await.unwrap();
    assert_eq!(
        depth.dead, 0,
        "nothing went to the dead-letter queue: {depth:?}"
    );
}
