//! The event-log rules.

use super::*;
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
