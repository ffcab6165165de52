//! The embedded queue takes turns between lanes (tenants) and, within a lane, takes
//! higher priority first: one tenant's backlog does not hold up another's message.

use std::collections::HashSet;
use std::time::Duration;
use tessera_core::ports::queue::{Queue, QueueSettings, Turn};
use tessera_local::SqliteQueue;

fn turn(lane: &str, priority: i32) -> Turn {
    Turn {
        lane: lane.into(),
        priority,
    }
}

/// The bodies of up to `max` messages received now, in the order received.
async fn bodies(q: &SqliteQueue, max: usize) -> Vec<String> {
    q.receive("tasks", max, Duration::ZERO)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.body)
        .collect()
}

async fn queue() -> (tempfile::TempDir, SqliteQueue) {
    let dir = tempfile::tempdir().unwrap();
    let q = SqliteQueue::open(&dir.path().join("queue.db")).unwrap();
    q.ensure("tasks", QueueSettings::default()).await.unwrap();
    (dir, q)
}

#[tokio::test]
async fn a_single_message_waits_one_round_not_behind_a_backlog() {
    let (_dir, q) = queue().await;
    for i in 0..500 {
        q.send_in_turn(
            "tasks",
            &format!("a{i}"),
            Duration::ZERO,
            &turn("tenant-a", 0),
        )
        .await
        .unwrap();
    }
    q.send_in_turn("tasks", "b0", Duration::ZERO, &turn("tenant-b", 0))
        .await
        .unwrap();
    q.send("tasks", "none0", Duration::ZERO).await.unwrap();
    let got = bodies(&q, 4).await;
    // One from each lane, oldest lane first, then A's second.
    assert_eq!(got, ["a0", "b0", "none0", "a1"]);
    let rest: HashSet<String> = bodies(&q, 10).await.into_iter().collect();
    assert_eq!(rest.len(), 10);
    assert!(rest.iter().all(|b| b.starts_with('a')), "{rest:?}");
}

#[tokio::test]
async fn within_a_lane_higher_priority_goes_first_and_then_the_oldest() {
    let (_dir, q) = queue().await;
    for i in 0..5 {
        q.send_in_turn("tasks", &format!("low{i}"), Duration::ZERO, &turn("t", 0))
            .await
            .unwrap();
    }
    q.send_in_turn("tasks", "urgent", Duration::ZERO, &turn("t", 10))
        .await
        .unwrap();
    let got = bodies(&q, 3).await;
    assert_eq!(got, ["urgent", "low0", "low1"]);
}

#[tokio::test]
async fn a_delayed_message_takes_no_turn_before_it_is_due() {
    let (_dir, q) = queue().await;
    q.send_in_turn("tasks", "later", Duration::from_secs(60), &turn("b", 99))
        .await
        .unwrap();
    q.send_in_turn("tasks", "now", Duration::ZERO, &turn("a", 0))
        .await
        .unwrap();
    let got = bodies(&q, 5).await;
    assert_eq!(got, ["now"]);
}

/// A queue database from before lanes opens, keeps its messages, and takes lanes.
#[tokio::test]
async fn a_queue_from_before_lanes_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE queues (name TEXT PRIMARY KEY, visibility_ms INTEGER NOT NULL,
               max_receives INTEGER NOT NULL, dead_letter TEXT);
             CREATE TABLE messages (id TEXT PRIMARY KEY, queue TEXT NOT NULL, body TEXT NOT NULL,
               visible_at INTEGER NOT NULL, receive_count INTEGER NOT NULL DEFAULT 0,
               receipt TEXT, sent_at INTEGER NOT NULL, dead_reason TEXT);
             INSERT INTO queues VALUES ('tasks', 30000, 10, 'tasks-dlq');
             INSERT INTO messages (id, queue, body, visible_at, sent_at) VALUES ('m1', 'tasks', 'old', 0, 0);",
        )
        .unwrap();
    }
    let q = SqliteQueue::open(&path).unwrap();
    q.send_in_turn("tasks", "new", Duration::ZERO, &turn("a", 0))
        .await
        .unwrap();
    let got = bodies(&q, 5).await;
    assert_eq!(got, ["old", "new"]);
}
