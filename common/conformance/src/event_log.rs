//! The event-log rules.

use super::*;
use tessera_core::clock::Millis;
use tessera_core::event::ProgressEvent;

/// Every event-log rule: gap-free numbering under concurrency, read-after, fencing,
/// events staged together and stored in fewer items.
pub async fn event_log(log: Arc<dyn EventLog>, store: Arc<dyn StateStore>) {
    numbered_under_concurrency(log.clone(), store.clone()).await;
    staged_together(log, store).await;
}

async fn numbered_under_concurrency(log: Arc<dyn EventLog>, store: Arc<dyn StateStore>) {
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

fn lines(prefix: &str, n: usize) -> Vec<(EventKind, Millis)> {
    (0..n)
        .map(|i| {
            (
                EventKind::LogLine {
                    line: format!("{prefix}-{i}"),
                },
                Millis(1_000 + i as i64),
            )
        })
        .collect()
}

fn seqs(events: &[ProgressEvent]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

/// A task's deferred events, staged at once and stored by the caller's transaction:
/// packed into fewer writes, read back one by one from anywhere, numbered on after them,
/// and raced like single events.
async fn staged_together(log: Arc<dyn EventLog>, store: Arc<dyn StateStore>) {
    let job = JobId::new();
    let task = TaskId::new();
    log.append(job, None, EventKind::LogLine { line: "one".into() }, None)
        .await
        .unwrap();

    let five = log
        .stage_all(job, Some(task), lines("end", 5))
        .await
        .unwrap();
    assert_eq!(seqs(&five.events), [2, 3, 4, 5, 6]);
    assert_eq!(
        five.writes.len(),
        2,
        "five events staged together are stored in two items (a pack and the last)"
    );
    store.transact(five.writes.clone()).await.unwrap();
    assert_eq!(log.last_seq(job).await.unwrap(), 6);

    // A writer that read the same last number collides on its first write.
    let rival = Write::Put {
        item: Item::new(records::event_key(job, 2), json!({})),
        condition: Condition::Absent,
    };
    assert!(
        store.transact(vec![rival]).await.is_err(),
        "a pack holds the number it is keyed by"
    );
    assert!(
        store.transact(five.writes).await.is_err(),
        "staging the same numbers twice conflicts"
    );

    // Forty more: packs of at most PACK_MAX, then the last alone.
    let forty = log
        .stage_all(job, Some(task), lines("big", 40))
        .await
        .unwrap();
    assert_eq!(seqs(&forty.events), (7..=46).collect::<Vec<_>>());
    let packs = 39_u64.div_ceil(tessera_core::ports::event_log::PACK_MAX) as usize;
    assert_eq!(forty.writes.len(), packs + 1);
    store.transact(forty.writes).await.unwrap();
    log.append(
        job,
        None,
        EventKind::LogLine {
            line: "after".into(),
        },
        None,
    )
    .await
    .unwrap();
    assert_eq!(log.last_seq(job).await.unwrap(), 47);

    let all = log.read_after(job, 0, 1000).await.unwrap();
    assert_eq!(
        seqs(&all),
        (1..=47).collect::<Vec<_>>(),
        "every event, in order"
    );
    let four = &all[3];
    assert_eq!(
        (four.task_id, four.at, &four.kind),
        (
            Some(task),
            Millis(1_002),
            &EventKind::LogLine {
                line: "end-2".into()
            }
        ),
        "an event inside a pack keeps its task, time and kind"
    );
    for after in 0..47 {
        for limit in [1, 3, 20] {
            let page = log.read_after(job, after, limit).await.unwrap();
            let want: Vec<u64> = (after + 1..=47).take(limit).collect();
            assert_eq!(
                seqs(&page),
                want,
                "resuming after {after}, {limit} at a time"
            );
        }
    }

    let all_at_once = log.read_after(job, 40, usize::MAX).await.unwrap();
    assert_eq!(
        seqs(&all_at_once),
        (41..=47).collect::<Vec<_>>(),
        "no limit"
    );

    // A pack longer than any build writes is refused, not read past: a reader resuming
    // inside it would start too late and miss events.
    let other = JobId::new();
    let later: Vec<_> = (0..tessera_core::ports::event_log::PACK_MAX)
        .map(|i| json!({"at": i, "type": "log_line", "line": "x"}))
        .collect();
    let mut body = json!({"job_id": other, "seq": 1, "task_id": null, "at": 0,
        "type": "log_line", "line": "x"});
    body["then"] = json!(later);
    store
        .put(
            Item::new(records::event_key(other, 1), body),
            Condition::Absent,
        )
        .await
        .unwrap();
    assert!(
        log.read_after(other, 0, 10).await.is_err(),
        "an oversized pack is refused"
    );
    // The last number comes from the key and the pack's length alone.
    assert_eq!(
        log.last_seq(other).await.unwrap(),
        1 + tessera_core::ports::event_log::PACK_MAX
    );

    // A reader built before packing decodes each item as one event: it sees every
    // item's first event, and the last key is the last number, so a writer of that
    // build claims the right successor.
    let mut q = Query::partition(Index::Table, records::events_partition(job), 1);
    q.descending = true;
    let last = store.query(&q).await.unwrap();
    assert_eq!(last.items[0].key.sk, format!("{:012}", 47));
    let mut q = Query::partition(Index::Table, records::events_partition(job), 100);
    q.after = Some(format!("{:012}", 1));
    for item in store.query(&q).await.unwrap().items {
        let old: ProgressEvent = records::decode(&item).unwrap();
        assert_eq!(format!("{:012}", old.seq), item.key.sk);
    }
}
