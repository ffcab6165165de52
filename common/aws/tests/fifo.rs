//! A FIFO queue keeps one message group per photo in order: while a photo's message is
//! being handled, the next one for that photo waits, and other photos go on.

use std::time::Duration;
use tessera_aws::{AwsAdapters, AwsSettings};
use tessera_conformance::moto::MotoServer;
use tessera_core::ports::queue::{Queue, QueueSettings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_photos_messages_are_delivered_in_order_one_at_a_time() {
    let moto = MotoServer::start();
    let a = AwsAdapters::connect(&AwsSettings::local(&moto.endpoint, "t", "b", "f-")).await;
    let q = a.queue;
    let name = "photos.fifo";
    q.ensure(
        name,
        QueueSettings {
            visibility: Duration::from_secs(30),
            max_receives: 5,
        },
    )
    .await
    .unwrap();
    assert!(
        q.url("photos-dlq.fifo").await.is_ok(),
        "a FIFO queue's dead-letter queue is FIFO"
    );
    let msg = |n: u32, photo: &str| {
        serde_json::json!({"task": format!("t{n}"), "group": photo}).to_string()
    };
    q.send(name, &msg(1, "A"), Duration::ZERO).await.unwrap();
    q.send(name, &msg(2, "A"), Duration::ZERO).await.unwrap();
    q.send(name, &msg(3, "B"), Duration::ZERO).await.unwrap();

    let first = q.receive(name, 1, Duration::ZERO).await.unwrap();
    assert_eq!(first.len(), 1);
    assert!(first[0].body.contains("t1"), "{}", first[0].body);
    // A's second message waits while its first is in flight; B is delivered.
    let next = q.receive(name, 10, Duration::ZERO).await.unwrap();
    let bodies: Vec<&str> = next.iter().map(|d| d.body.as_str()).collect();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert!(bodies[0].contains("t3"), "{bodies:?}");
    q.delete(name, &first[0].receipt).await.unwrap();
    let then = q.receive(name, 10, Duration::ZERO).await.unwrap();
    assert_eq!(then.len(), 1);
    assert!(then[0].body.contains("t2"), "{}", then[0].body);
}
