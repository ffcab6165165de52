//! The memory gate's admission policy: a small task passes a large one that could not
//! start anyway, and the large one is not starved by a stream of small ones.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_local::{FixedMemory, MemoryGate};
use tokio_util::sync::CancellationToken;

fn spawn_admit(
    gate: &MemoryGate,
    bytes: u64,
    hold: Duration,
    log: &Arc<Mutex<Vec<String>>>,
    name: String,
) -> tokio::task::JoinHandle<()> {
    let (gate, log) = (gate.clone(), log.clone());
    tokio::spawn(async move {
        let permit = gate.admit(bytes, &CancellationToken::new()).await.unwrap();
        log.lock().unwrap().push(name);
        tokio::time::sleep(hold).await;
        drop(permit);
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_small_task_passes_a_large_one_that_cannot_start() {
    let gate = MemoryGate::new(FixedMemory(1000), 100, 0, 3);
    let log = Arc::new(Mutex::new(Vec::new()));
    let big_running = gate.admit(60, &CancellationToken::new()).await.unwrap();
    let large = spawn_admit(&gate, 80, Duration::ZERO, &log, "large".into());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let small = spawn_admit(&gate, 30, Duration::ZERO, &log, "small".into());
    tokio::time::timeout(Duration::from_secs(2), small)
        .await
        .expect("the small task must not wait behind the large one")
        .unwrap();
    assert_eq!(*log.lock().unwrap(), ["small"]);
    drop(big_running);
    tokio::time::timeout(Duration::from_secs(2), large)
        .await
        .expect("the large task starts once memory is free")
        .unwrap();
    assert_eq!(*log.lock().unwrap(), ["small", "large"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_of_small_tasks_cannot_starve_a_large_one() {
    let max_bypass = 3;
    let gate = MemoryGate::new(FixedMemory(1000), 100, 0, max_bypass);
    let log = Arc::new(Mutex::new(Vec::new()));
    // Small tasks keep 40 of 100 bytes busy at all times, so an 80-byte task could
    // never start if they were always allowed to pass it.
    let mut handles = vec![spawn_admit(
        &gate,
        40,
        Duration::from_millis(150),
        &log,
        "s0".into(),
    )];
    tokio::time::sleep(Duration::from_millis(20)).await;
    handles.push(spawn_admit(
        &gate,
        80,
        Duration::from_millis(10),
        &log,
        "large".into(),
    ));
    for i in 1..=12 {
        tokio::time::sleep(Duration::from_millis(40)).await;
        handles.push(spawn_admit(
            &gate,
            40,
            Duration::from_millis(150),
            &log,
            format!("s{i}"),
        ));
    }
    for h in handles {
        tokio::time::timeout(Duration::from_secs(10), h)
            .await
            .expect("everyone is admitted eventually")
            .unwrap();
    }
    let order = log.lock().unwrap().clone();
    let large_at = order.iter().position(|n| n == "large").unwrap();
    assert!(
        large_at <= 1 + max_bypass as usize,
        "the large task was passed more than {max_bypass} times: {order:?}"
    );
    assert!(
        large_at >= 1,
        "small tasks may pass while the large one cannot fit: {order:?}"
    );
    assert_eq!(order.len(), 14);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_can_be_cancelled_and_frees_the_line() {
    let gate = MemoryGate::new(FixedMemory(1000), 100, 0, 0);
    let held = gate.admit(90, &CancellationToken::new()).await.unwrap();
    let cancel = CancellationToken::new();
    let g = gate.clone();
    let c = cancel.clone();
    let waiting = tokio::spawn(async move { g.admit(50, &c).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancel.cancel();
    assert!(waiting.await.unwrap().is_err());
    // With max_bypass 0 a waiter blocks everyone behind it: the cancelled one must be gone.
    let small = gate.admit(10, &CancellationToken::new()).await.unwrap();
    drop((held, small));
    assert_eq!(gate.admitted(), 0);
}

/// A wait given up by dropping it (a timeout around `admit`) leaves the queue: it must
/// not block the waiters after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_wait_leaves_the_queue() {
    let gate = MemoryGate::new(FixedMemory(1000), 100, 0, 1);
    let running = gate.admit(60, &CancellationToken::new()).await.unwrap();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(200),
        gate.admit(40 + 30, &CancellationToken::new()),
    )
    .await;
    assert!(gave_up.is_err(), "70 does not fit beside 60");
    drop(running);
    // With the dropped 70 still queued, 50 could not pass it (70 fits now).
    let next = tokio::time::timeout(
        Duration::from_secs(2),
        gate.admit(50, &CancellationToken::new()),
    )
    .await;
    assert!(next.is_ok(), "the dropped waiter no longer blocks");
}
