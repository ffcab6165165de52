//! The jobs Tessera really plans get the attempt policy table's ceilings: three tries for
//! photo tasks (the photo worker's rule), the stages' own for a reconstruction, with
//! nothing set per planner.

mod support;

use std::collections::BTreeMap;
use tessera_core::attempts::attempt_policy;
use tessera_core::{ProjectId, TenantId};
use tessera_engine::JobPlan;
use tessera_jobs::photos::{ObjectCreated, ingest_plan};

async fn planned_ceilings(plan: JobPlan) -> BTreeMap<String, (String, u32)> {
    let rig = support::rig().await;
    let job = rig.engine.submit(plan).await.unwrap();
    rig.engine
        .job_tasks(job.job_id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.name, (t.kind, t.max_attempts)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_upload_is_tried_three_times() {
    let project = ProjectId::new();
    let event = ObjectCreated {
        bucket: "photos".into(),
        key: format!("uploads/{project}/01JA0000000000000000000001/photo.jpg"),
        size: 1000,
        sequencer: "01".into(),
    };
    let tasks = planned_ceilings(ingest_plan(TenantId::local(), project, &event)).await;
    assert_eq!(
        tasks["ingest"],
        ("photo.ingest".to_string(), 3),
        "{tasks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_reconstruction_stage_gets_the_stage_policy() {
    let spec = support::small_spec();
    let plan = tessera_jobs::reconstruct::plan(&spec, TenantId::local(), None, "stages", 12, 12.0)
        .unwrap();
    let tasks = planned_ceilings(plan).await;
    assert!(tasks.len() >= 4, "{tasks:?}");
    for (name, (kind, ceiling)) in &tasks {
        assert!(kind.starts_with("sfm."), "{name}: {kind}");
        assert_eq!(*ceiling, attempt_policy(kind).max_attempts, "{name}");
        assert_eq!(*ceiling, 4, "{name}");
    }
}
