//! Claims take turns between tenants: a tenant with one job waits behind at most one
//! batch of another tenant's backlog, not all of it; within a tenant, higher priority
//! goes first.

mod support;

use async_trait::async_trait;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{Harness, plan, run_until_done};
use tessera_core::TenantId;
use tessera_engine::{
    JobPlan, Registry, TaskContext, TaskError, TaskHandler, TaskOutput, TaskPlan,
};

/// Records the label of each job it runs, in the order they ran.
struct Records(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl TaskHandler for Records {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.0.lock().unwrap().push(ctx.job().label.clone());
        Ok(TaskOutput::result(json!(null)))
    }
}

fn job(tenant: &str, label: &str, priority: i32) -> JobPlan {
    let mut p = plan(label, vec![TaskPlan::new("t", "record", json!(null))]);
    p.tenant = tenant.parse::<TenantId>().unwrap();
    p.priority = priority;
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tenants_job_waits_one_batch_not_the_others_backlog() {
    let h = Harness::new();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let mut registry = Registry::new();
    registry.register("record", Records(ran.clone()));
    let engine = h.engine(registry, Duration::from_secs(5)).await;
    const BACKLOG: usize = 60;
    for i in 0..BACKLOG {
        engine
            .submit(job("tenant-a", &format!("a{i}"), 0))
            .await
            .unwrap();
    }
    let b = engine.submit(job("tenant-b", "b", 0)).await.unwrap();
    // Two at once: the worker receives at most three messages per poll.
    let concurrency = 2;
    let j = run_until_done(&engine, b.job_id, Duration::from_secs(60)).await;
    assert!(j.finished() >= 1);
    let order = ran.lock().unwrap().clone();
    let at = order.iter().position(|l| l == "b").expect("b ran");
    assert!(
        at <= concurrency + 1,
        "tenant B's one job ran after {at} of A's {BACKLOG}: {order:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn within_a_tenant_the_higher_priority_job_goes_first() {
    let h = Harness::new();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let mut registry = Registry::new();
    registry.register("record", Records(ran.clone()));
    let engine = h.engine(registry, Duration::from_secs(5)).await;
    for i in 0..30 {
        engine
            .submit(job("tenant-a", &format!("a{i}"), 0))
            .await
            .unwrap();
    }
    let urgent = engine.submit(job("tenant-a", "urgent", 5)).await.unwrap();
    run_until_done(&engine, urgent.job_id, Duration::from_secs(60)).await;
    let order = ran.lock().unwrap().clone();
    let at = order.iter().position(|l| l == "urgent").expect("ran");
    assert!(
        at <= 3,
        "the priority-5 job ran after {at} others: {order:?}"
    );
}
