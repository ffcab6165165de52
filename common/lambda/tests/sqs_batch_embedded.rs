//! SQS batch handling over the ports, on the embedded adapters (SQLite queue and store),
//! fed the sample event `events/sqs-batch-with-poison.json` as the Lambda event source
//! delivers it — with the receipts of real deliveries from the embedded queue. Poison is
//! archived on its first receive; a message for a task that is not due yet is kept (a
//! batch item failure); everything else is acknowledged.

use aws_lambda_events::event::sqs::SqsEvent;
use std::time::Duration;
use tessera_core::ports::queue::QueueSettings;
use tessera_core::ports::state_store::{Condition, Write};
use tessera_core::{Millis, TenantId, records};
use tessera_engine::plan::{JobPlan, TaskPlan};
use tessera_engine::{Engine, EngineConfig};
use tessera_lambda::Role;
use tessera_lambda::sqs_batch::SqsBatch;
use tessera_local::StateDir;
use tessera_local::embedded::{self, Memory};

const QUEUE: &str = "face-process";

#[tokio::test]
async fn poison_is_archived_not_yet_due_is_kept_and_the_rest_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    let ports = embedded::ports(&state, Memory::Fixed { bytes: 8 << 30 }).unwrap();
    let (store, queue) = (ports.store.clone(), ports.queue.clone());
    let engine = Engine::new(
        ports,
        EngineConfig {
            queue: QUEUE.into(),
            scratch: state.work(),
            ..EngineConfig::default()
        },
        tessera_jobs::registry(),
    );
    queue
        .ensure(
            QUEUE,
            QueueSettings {
                visibility: Duration::from_secs(60),
                max_receives: 5,
            },
        )
        .await
        .unwrap();
    // A real task that is not due for an hour.
    let job = engine
        .submit(JobPlan {
            tenant: TenantId::local(),
            project: None,
            kind: "test".into(),
            label: "later".into(),
            spec: serde_json::json!({"n": 1}),
            priority: 0,
            tasks: vec![TaskPlan::new("t", "noop", serde_json::json!(null))],
        })
        .await
        .unwrap();
    let task = engine.job_tasks(job.job_id).await.unwrap().remove(0);
    store
        .transact(vec![Write::Set {
            key: records::task_key(task.id),
            fields: vec![(
                "not_before".into(),
                serde_json::to_value(Millis::now().plus(Duration::from_secs(3600))).unwrap(),
            )],
            condition: Condition::Exists,
        }])
        .await
        .unwrap();
    // Drain what submitting offered, so only this test's messages are on the queue.
    for d in queue.receive(QUEUE, 10, Duration::ZERO).await.unwrap() {
        queue.delete(QUEUE, &d.receipt).await.unwrap();
    }

    // The sample batch (two tasks that do not exist, one body that is not a task), plus
    // a message for the task that is not due.
    let path = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../../events/sqs-batch-with-poison.json");
    let mut event: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut later = event["Records"][0].clone();
    later["body"] = serde_json::json!({"task": task.id, "job": job.job_id})
        .to_string()
        .into();
    later["messageId"] = "later".into();
    event["Records"].as_array_mut().unwrap().push(later);
    // Each record becomes a real message of the embedded queue, delivered with its
    // receipt, as SQS delivers one to the event source.
    for r in event["Records"].as_array().unwrap() {
        queue
            .send(QUEUE, r["body"].as_str().unwrap(), Duration::ZERO)
            .await
            .unwrap();
    }
    let deliveries = queue.receive(QUEUE, 10, Duration::ZERO).await.unwrap();
    assert_eq!(deliveries.len(), 4);
    for r in event["Records"].as_array_mut().unwrap() {
        let d = deliveries
            .iter()
            .find(|d| d.body == r["body"].as_str().unwrap())
            .unwrap();
        r["receiptHandle"] = d.receipt.clone().into();
    }
    let event: SqsEvent = serde_json::from_value(event).unwrap();

    let batch = SqsBatch {
        engine: engine.clone(),
        queue: QUEUE.into(),
        queue_prefix: "tessera-".into(),
        role: Role::Run,
    };
    let response = batch.handle_sqs(event).await;
    let kept: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(kept, ["later"], "only the task that is not due comes back");
    let depth = queue.depth(QUEUE).await.unwrap();
    assert_eq!(
        depth.dead, 3,
        "the HTML body and the two tasks that do not exist are archived on their first receive: {depth:?}"
    );
    assert_eq!(
        depth.hidden, 1,
        "the not-due message waits, hidden: {depth:?}"
    );
}
