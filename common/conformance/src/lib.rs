//! The port conformance suite.
//!
//! Written once against the traits in `tessera_core::ports`; every adapter set (the
//! embedded one here, the AWS one against a local AWS-compatible server) runs it
//! unchanged. Each function panics with a message naming the broken rule.

pub mod moto;

use bytes::Bytes;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tessera_core::event::EventKind;
use tessera_core::ids::{JobId, TaskId};
use tessera_core::ports::event_log::{EventLog, EventLogError, Fence};
use tessera_core::ports::object_store::{ObjectStore, ObjectStoreError};
use tessera_core::ports::queue::{Queue, QueueError, QueueSettings};
use tessera_core::ports::state_store::{
    Condition, Index, Item, ItemKey, Query, StateStore, StoreError, Write,
};
use tessera_core::records;

fn unique(prefix: &str) -> String {
    format!("{prefix}{}", ulid_like())
}

fn ulid_like() -> String {
    TaskId::new().to_string()
}

/// Every state-store rule the engine relies on.
pub async fn state_store(store: Arc<dyn StateStore>) {
    let k = ItemKey::new(unique("conf#"), "A");
    let item = |v: i64| Item::new(k.clone(), json!({"v": v, "state": "queued"}));

    // Put-if-absent, revisions, optimistic concurrency.
    store
        .put(item(1), Condition::Absent)
        .await
        .expect("first put-if-absent succeeds");
    let e = store
        .put(item(2), Condition::Absent)
        .await
        .expect_err("second put-if-absent must conflict");
    assert!(
        e.is_conflict(),
        "put-if-absent on an existing item must be a Conflict, got {e}"
    );
    let got = store.get(&k).await.unwrap().expect("item exists");
    assert_eq!(got.rev, 1, "a new item has revision 1");
    assert_eq!(
        got.body["v"], 1,
        "a failed conditional put must not change the item"
    );
    store
        .put(item(3), Condition::Rev(1))
        .await
        .expect("put at the current revision succeeds");
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().rev,
        2,
        "each write bumps the revision"
    );
    assert!(
        store
            .put(item(4), Condition::Rev(1))
            .await
            .unwrap_err()
            .is_conflict(),
        "a stale revision conflicts"
    );

    // Field conditions.
    store
        .put(item(5), Condition::field_eq("state", "queued"))
        .await
        .expect("FieldEq that holds");
    assert!(
        store
            .put(item(6), Condition::field_eq("state", "running"))
            .await
            .unwrap_err()
            .is_conflict()
    );
    assert!(
        store
            .put(
                Item::new(ItemKey::new(unique("conf#"), "A"), json!({})),
                Condition::field_eq("state", "queued")
            )
            .await
            .unwrap_err()
            .is_conflict(),
        "FieldEq on a missing item fails"
    );

    // All or nothing, and the conflict names the failing write.
    let (a, b) = (
        ItemKey::new(unique("conf#"), "A"),
        ItemKey::new(unique("conf#"), "A"),
    );
    let err = store
        .transact(vec![
            Write::Put {
                item: Item::new(a.clone(), json!({"n": 1})),
                condition: Condition::Absent,
            },
            Write::Put {
                item: Item::new(b.clone(), json!({"n": 1})),
                condition: Condition::Absent,
            },
            Write::Check {
                key: k.clone(),
                condition: Condition::Rev(999),
            },
        ])
        .await
        .expect_err("the failing check must fail the transaction");
    assert!(
        matches!(err, StoreError::Conflict { index: 2, .. }),
        "conflict must name write 2, got {err}"
    );
    assert!(
        store.get(&a).await.unwrap().is_none(),
        "no write of a failed transaction may be applied"
    );
    assert!(
        store.get(&b).await.unwrap().is_none(),
        "no write of a failed transaction may be applied"
    );

    // Counters need no read and never conflict; they need the item to exist.
    store
        .put(Item::new(a.clone(), json!({"n": 1})), Condition::Absent)
        .await
        .unwrap();
    store
        .transact(vec![Write::add(a.clone(), "n", 4)])
        .await
        .unwrap();
    store
        .transact(vec![Write::Add {
            key: a.clone(),
            deltas: vec![("fresh".into(), -2), ("n".into(), 10)],
        }])
        .await
        .unwrap();
    let got = store.get(&a).await.unwrap().unwrap();
    assert_eq!(
        (got.body["n"].as_i64(), got.body["fresh"].as_i64()),
        (Some(15), Some(-2))
    );
    assert!(
        store
            .transact(vec![Write::add(b.clone(), "n", 1)])
            .await
            .unwrap_err()
            .is_conflict()
    );

    // Set changes named fields of an existing item, keeps the rest, bumps the revision,
    // and refuses a missing item or a failed condition.
    let rev = store.get(&a).await.unwrap().unwrap().rev;
    store
        .transact(vec![Write::Set {
            key: a.clone(),
            fields: vec![("label".into(), json!("x")), ("fresh".into(), json!(null))],
            condition: Condition::field_eq("n", 15),
        }])
        .await
        .unwrap();
    let got = store.get(&a).await.unwrap().unwrap();
    assert_eq!(got.body["label"], json!("x"));
    assert_eq!(got.body["fresh"], json!(null));
    assert_eq!(got.body["n"], json!(15));
    assert!(got.rev > rev);
    for (key, condition) in [
        (a.clone(), Condition::field_eq("n", 16)),
        (b.clone(), Condition::None),
    ] {
        assert!(
            store
                .transact(vec![Write::Set {
                    key,
                    fields: vec![("label".into(), json!("y"))],
                    condition,
                }])
                .await
                .unwrap_err()
                .is_conflict()
        );
    }
    assert_eq!(
        store.get(&a).await.unwrap().unwrap().body["label"],
        json!("x")
    );

    // Delete with a condition; deleting a missing item is fine.
    assert!(
        store
            .transact(vec![Write::Delete {
                key: a.clone(),
                condition: Condition::Rev(1)
            }])
            .await
            .unwrap_err()
            .is_conflict()
    );
    store
        .transact(vec![Write::Delete {
            key: a.clone(),
            condition: Condition::Exists,
        }])
        .await
        .unwrap();
    assert!(store.get(&a).await.unwrap().is_none());
    store
        .transact(vec![Write::Delete {
            key: a.clone(),
            condition: Condition::None,
        }])
        .await
        .unwrap();

    // Limits of a transaction.
    let many: Vec<_> = (0..101)
        .map(|i| Write::Put {
            item: Item::new(ItemKey::new(unique("conf#"), format!("{i}")), json!({})),
            condition: Condition::None,
        })
        .collect();
    assert!(
        matches!(store.transact(many).await, Err(StoreError::Invalid(_))),
        "more than 100 writes is invalid"
    );
    let twice = vec![
        Write::Check {
            key: k.clone(),
            condition: Condition::None,
        },
        Write::Check {
            key: k.clone(),
            condition: Condition::None,
        },
    ];
    assert!(
        matches!(store.transact(twice).await, Err(StoreError::Invalid(_))),
        "one key twice is invalid"
    );

    state_store_queries(&*store).await;
    state_store_races(store).await;
}

async fn state_store_queries(store: &dyn StateStore) {
    let pk = unique("confq#");
    let parent = unique("confp#");
    let due = unique("confd#");
    for i in 0..25 {
        let mut it = Item::new(ItemKey::new(pk.clone(), format!("{i:03}")), json!({"i": i}));
        it.by_parent = Some(ItemKey::new(parent.clone(), format!("c{i:03}")));
        if i % 2 == 0 {
            it.by_due = Some(ItemKey::new(due.clone(), format!("{:03}", 100 - i)));
        }
        store.put(it, Condition::Absent).await.unwrap();
    }
    // Pages of 10: 10, 10, 5, in order, each item once.
    let mut q = Query::partition(Index::Table, pk.clone(), 10);
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = store.query(&q).await.unwrap();
        pages += 1;
        seen.extend(page.items.iter().map(|i| i.body["i"].as_i64().unwrap()));
        match page.next {
            Some(c) => q.after = Some(c),
            None => break,
        }
    }
    assert_eq!(
        seen,
        (0..25).collect::<Vec<_>>(),
        "pages return every item once, in sort-key order"
    );
    assert_eq!(pages, 3);

    let mut q = Query::partition(Index::Table, pk.clone(), 100);
    q.sk_prefix = Some("01".into());
    assert_eq!(
        store.query(&q).await.unwrap().items.len(),
        10,
        "sort-key prefix 01 matches 010..019"
    );
    let mut q = Query::partition(Index::Table, pk.clone(), 3);
    q.descending = true;
    let page = store.query(&q).await.unwrap();
    assert_eq!(
        page.items
            .iter()
            .map(|i| i.body["i"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [24, 23, 22]
    );
    q.after = page.next;
    assert_eq!(
        store.query(&q).await.unwrap().items[0].body["i"],
        21,
        "descending pages continue downwards"
    );

    let q = Query::partition(Index::ByParent, parent.clone(), 100);
    assert_eq!(
        store.query(&q).await.unwrap().items.len(),
        25,
        "the by-parent index holds every child"
    );
    let mut q = Query::partition(Index::ByDue, due.clone(), 100);
    q.sk_max = Some("090".into());
    let due_items = store.query(&q).await.unwrap().items;
    assert_eq!(
        due_items
            .iter()
            .map(|i| i.body["i"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [24, 22, 20, 18, 16, 14, 12, 10],
        "the by-due index is sparse and ordered by its sort key, bounded by sk_max"
    );
    // Rewriting an item without an index entry removes it from that index.
    let mut moved = due_items[0].clone();
    moved.by_due = None;
    store.put(moved, Condition::Exists).await.unwrap();
    let q = Query::partition(Index::ByDue, due.clone(), 100);
    assert_eq!(
        store.query(&q).await.unwrap().items.len(),
        12,
        "an item leaves an index when its entry is removed"
    );
}

async fn state_store_races(store: Arc<dyn StateStore>) {
    // Racing put-if-absent: exactly one winner.
    let k = ItemKey::new(unique("race#"), "A");
    let mut handles = Vec::new();
    for w in 0..8 {
        let (s, k) = (store.clone(), k.clone());
        handles.push(tokio::spawn(async move {
            s.put(Item::new(k, json!({"w": w})), Condition::Absent)
                .await
                .is_ok()
        }));
    }
    let mut wins = 0;
    for h in handles {
        wins += h.await.unwrap() as i32;
    }
    assert_eq!(
        wins, 1,
        "exactly one of eight racing put-if-absent writers wins"
    );

    // Read-modify-write with revisions: no lost update.
    let k = ItemKey::new(unique("race#"), "B");
    store
        .put(Item::new(k.clone(), json!({"n": 0})), Condition::Absent)
        .await
        .unwrap();
    let mut handles = Vec::new();
    for _ in 0..4 {
        let (s, k) = (store.clone(), k.clone());
        handles.push(tokio::spawn(async move {
            for _ in 0..15 {
                loop {
                    let cur = s.get(&k).await.unwrap().unwrap();
                    let n = cur.body["n"].as_i64().unwrap();
                    match s
                        .put(
                            Item::new(k.clone(), json!({"n": n + 1})),
                            Condition::Rev(cur.rev),
                        )
                        .await
                    {
                        Ok(()) => break,
                        Err(e) if e.is_conflict() => continue,
                        Err(e) => panic!("unexpected store error {e}"),
                    }
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().body["n"],
        60,
        "optimistic updates lose nothing"
    );
}

/// Every queue rule the engine relies on. `settle` is how long to wait for a visibility
/// timeout of one second to pass (a little over one second).
pub async fn queue(queue: Arc<dyn Queue>) {
    let name = format!("conf-{}", ulid_like().to_lowercase());
    let wait = Duration::from_millis(0);
    assert!(
        matches!(
            queue.send(&name, "x", Duration::ZERO).await,
            Err(QueueError::NoSuchQueue(_))
        ),
        "sending to a missing queue fails clearly"
    );
    queue
        .ensure(
            &name,
            QueueSettings {
                visibility: Duration::from_secs(1),
                max_receives: 2,
            },
        )
        .await
        .unwrap();
    queue
        .ensure(
            &name,
            QueueSettings {
                visibility: Duration::from_secs(1),
                max_receives: 2,
            },
        )
        .await
        .expect("ensure is idempotent");

    // Send, receive, delete.
    queue.send(&name, "one", Duration::ZERO).await.unwrap();
    let got = queue
        .receive(&name, 10, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].body.as_str(), got[0].receive_count), ("one", 1));
    assert!(
        queue.receive(&name, 10, wait).await.unwrap().is_empty(),
        "a received message is invisible"
    );
    queue.delete(&name, &got[0].receipt).await.unwrap();

    // A message in a tenant's lane, with a priority, is accepted and delivered as sent
    // (on SQS the lane is a fair queue's message group).
    let turn = tessera_core::ports::queue::Turn {
        lane: "tenant-a".into(),
        priority: 3,
    };
    queue
        .send_in_turn(&name, "in turn", Duration::ZERO, &turn)
        .await
        .unwrap();
    let got = queue
        .receive(&name, 10, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, "in turn");
    queue.delete(&name, &got[0].receipt).await.unwrap();

    // Visibility timeout: redelivered with a new receipt; the old receipt is stale.
    queue.send(&name, "two", Duration::ZERO).await.unwrap();
    let first = queue
        .receive(&name, 1, Duration::from_secs(2))
        .await
        .unwrap()
        .remove(0);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let again = queue
        .receive(&name, 1, Duration::from_secs(2))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        (again.message_id.as_str(), again.receive_count),
        (first.message_id.as_str(), 2),
        "redelivery after the visibility timeout counts"
    );
    assert_ne!(again.receipt, first.receipt);
    // Received twice already (max_receives = 2): the next receive dead-letters it.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        queue
            .receive(&name, 1, Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty(),
        "past max_receives a message is not delivered"
    );
    assert_eq!(
        queue.depth(&name).await.unwrap().dead,
        1,
        "it is in the dead-letter queue"
    );
    // An old receipt is refused (embedded: StaleReceipt) or ignored (SQS answers
    // success); it never touches the dead-letter queue.
    assert!(
        matches!(
            queue.delete(&name, &first.receipt).await,
            Ok(()) | Err(QueueError::StaleReceipt(_))
        ),
        "deleting with an old receipt is refused or ignored"
    );
    assert_eq!(queue.depth(&name).await.unwrap().dead, 1);

    // Delay and extend.
    queue
        .send(&name, "later", Duration::from_millis(800))
        .await
        .unwrap();
    assert!(
        queue.receive(&name, 1, wait).await.unwrap().is_empty(),
        "a delayed message is not visible yet"
    );
    let d = queue
        .receive(&name, 1, Duration::from_secs(3))
        .await
        .unwrap()
        .remove(0);
    queue
        .extend(&name, &d.receipt, Duration::from_secs(3))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        queue.receive(&name, 1, wait).await.unwrap().is_empty(),
        "an extended message stays hidden"
    );
    queue
        .extend(&name, &d.receipt, Duration::ZERO)
        .await
        .unwrap();
    let d2 = queue
        .receive(&name, 1, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(d2.len(), 1, "visibility zero makes it visible again");

    // Archive: to the dead-letter queue at once.
    queue.archive(&name, &d2[0], "unparsable").await.unwrap();
    assert_eq!(queue.depth(&name).await.unwrap().dead, 2);
    assert_eq!(
        queue.depth(&name).await.unwrap().visible + queue.depth(&name).await.unwrap().hidden,
        0
    );

    // Competing receivers: every message delivered once.
    let name2 = format!("conf-{}", ulid_like().to_lowercase());
    queue
        .ensure(
            &name2,
            QueueSettings {
                visibility: Duration::from_secs(60),
                max_receives: 5,
            },
        )
        .await
        .unwrap();
    for i in 0..40 {
        queue
            .send(&name2, &i.to_string(), Duration::ZERO)
            .await
            .unwrap();
    }
    let mut handles = Vec::new();
    for _ in 0..4 {
        let (q, n) = (queue.clone(), name2.clone());
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = q.receive(&n, 3, Duration::from_millis(200)).await.unwrap();
                if batch.is_empty() {
                    return got;
                }
                for d in batch {
                    got.push(d.body.clone());
                    q.delete(&n, &d.receipt).await.unwrap();
                }
            }
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all.sort_by_key(|s| s.parse::<i32>().unwrap());
    let delivered = all.len();
    all.dedup();
    // SQS standard queues deliver at least once: two competing receivers may, rarely,
    // get the same message (moto does under load), and the engine's claims are
    // idempotent for that reason. What no queue may do is lose one.
    assert_eq!(
        all,
        (0..40).map(|i| i.to_string()).collect::<Vec<_>>(),
        "competing receivers get every message"
    );
    assert!(
        delivered <= 44,
        "duplicates are rare, not the rule: {delivered} deliveries of 40 messages"
    );
}

/// Every object-store rule.
pub async fn object_store(store: Arc<dyn ObjectStore>) {
    let p = format!("conf/{}", ulid_like());
    let k = format!("{p}/a/b.bin");
    assert!(matches!(
        store.get(&k).await,
        Err(ObjectStoreError::NotFound(_))
    ));
    assert!(store.head(&k).await.unwrap().is_none());
    let m1 = store
        .put(&k, Bytes::from_static(b"hello world"))
        .await
        .unwrap();
    assert_eq!(m1.size, 11);
    assert_eq!(
        store.get(&k).await.unwrap(),
        Bytes::from_static(b"hello world")
    );
    assert_eq!(
        store.get_range(&k, 6..11).await.unwrap(),
        Bytes::from_static(b"world")
    );
    assert!(matches!(
        store.get_range(&k, 6..12).await,
        Err(ObjectStoreError::BadRange { .. })
    ));
    let m2 = store
        .put(&k, Bytes::from_static(b"HELLO WORLD"))
        .await
        .unwrap();
    assert_ne!(m1.etag, m2.etag, "the etag changes with the content");
    assert!(matches!(
        store.put_if_absent(&k, Bytes::from_static(b"x")).await,
        Err(ObjectStoreError::AlreadyExists(_))
    ));
    assert_eq!(
        store.get(&k).await.unwrap(),
        Bytes::from_static(b"HELLO WORLD"),
        "a refused put-if-absent changes nothing"
    );
    store
        .put_if_absent(&format!("{p}/new"), Bytes::from_static(b"n"))
        .await
        .unwrap();

    // Files both ways.
    let dir = std::env::temp_dir().join(format!("tessera-conf-{}", ulid_like()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("src.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    store.put_file(&format!("{p}/big.bin"), &src).await.unwrap();
    let dst = dir.join("dst.bin");
    let meta = store
        .get_to_file(&format!("{p}/big.bin"), &dst)
        .await
        .unwrap();
    assert_eq!(meta.size, data.len() as u64);
    assert_eq!(std::fs::read(&dst).unwrap(), data);
    let _ = std::fs::remove_dir_all(&dir);

    // Listing with pages.
    for i in 0..7 {
        store
            .put(&format!("{p}/list/{i}"), Bytes::from(vec![i as u8]))
            .await
            .unwrap();
    }
    let (page1, next) = store.list(&format!("{p}/list/"), None, 4).await.unwrap();
    assert_eq!(page1.len(), 4);
    let (page2, end) = store
        .list(&format!("{p}/list/"), next.as_deref(), 4)
        .await
        .unwrap();
    assert_eq!(page2.len(), 3);
    assert!(end.is_none());
    let keys: BTreeSet<_> = page1.iter().chain(&page2).map(|m| m.key.clone()).collect();
    assert_eq!(keys.len(), 7, "pages do not overlap");

    // Hostile keys fail the same way everywhere, touching nothing.
    for bad in ["", "/abs", "a/../../etc/passwd", "a//b", "a\0b"] {
        assert!(
            matches!(
                store.put(bad, Bytes::from_static(b"x")).await,
                Err(ObjectStoreError::InvalidKey { .. })
            ),
            "key {bad:?} must be refused"
        );
        assert!(
            matches!(
                store.get(bad).await,
                Err(ObjectStoreError::InvalidKey { .. })
            ),
            "key {bad:?} must be refused"
        );
    }
    store.delete(&k).await.unwrap();
    store
        .delete(&k)
        .await
        .expect("deleting a missing object is fine");
    assert!(store.head(&k).await.unwrap().is_none());
}

/// Every event-log rule: gap-free numbering under concurrency, read-after, fencing.
pub async fn event_log(log: Arc<dyn EventLog>, store: Arc<dyn StateStore>) {
    let job = JobId::new();
    assert_eq!(log.last_seq(job).await.unwrap(), 0);
    let line = |s: &str| EventKind::LogLine {
        line: s.to_string(),
    };
    let mut handles = Vec::new();
    for w in 0..6 {
        let log = log.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..20 {
                log.append(job, None, line(&format!("{w}-{i}")), None)
                    .await
                    .unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let all = log.read_after(job, 0, 1000).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=120).collect::<Vec<_>>(),
        "sequence numbers are unique and gap-free"
    );
    assert_eq!(log.last_seq(job).await.unwrap(), 120);
    let tail = log.read_after(job, 115, 3).await.unwrap();
    assert_eq!(
        tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [116, 117, 118],
        "read after N returns the next ones, limited"
    );

    // Fencing: a task running at epoch 3.
    let task = TaskId::new();
    store
        .put(
            Item::new(
                records::task_key(task),
                json!({"state": "running", "epoch": 3}),
            ),
            Condition::Absent,
        )
        .await
        .unwrap();
    let ok = log
        .append(
            job,
            Some(task),
            line("current"),
            Some(Fence { task, epoch: 3 }),
        )
        .await
        .unwrap();
    assert_eq!(ok.seq, 121);
    let stale = log
        .append(
            job,
            Some(task),
            line("stale"),
            Some(Fence { task, epoch: 2 }),
        )
        .await;
    assert!(
        matches!(stale, Err(EventLogError::Fenced(t)) if t == task),
        "a stale epoch is refused"
    );
    assert_eq!(
        log.last_seq(job).await.unwrap(),
        121,
        "a refused event is not stored"
    );
}
