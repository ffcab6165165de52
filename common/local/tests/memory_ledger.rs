//! Two processes on one state directory share one memory budget through the ledger:
//! each has its own gate (its own count of what it admitted), and neither admits what
//! would overcommit the other's reservations. A process that dies holds nothing once
//! its lease lapses.

use std::time::Duration;
use tessera_local::{FixedMemory, MemoryGate, MemoryLedger};
use tokio_util::sync::CancellationToken;

const GIB: u64 = 1 << 30;

/// A gate as one process builds it: its own state, the directory's ledger file.
fn process_gate(path: &std::path::Path, owner: &str, lease: Duration) -> MemoryGate {
    let gate = MemoryGate::new(FixedMemory(8 * GIB), 4 * GIB, 0, 4);
    gate.share_through(MemoryLedger::open(path, owner, lease).unwrap());
    gate
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_process_waits_for_the_room_the_first_holds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let a = process_gate(&path, "a", Duration::from_secs(30));
    let b = process_gate(&path, "b", Duration::from_secs(30));
    let held = a.admit(3 * GIB, &CancellationToken::new()).await.unwrap();
    let waiting = tokio::time::timeout(
        Duration::from_millis(600),
        b.admit(3 * GIB, &CancellationToken::new()),
    )
    .await;
    assert!(
        waiting.is_err(),
        "3 + 3 GiB in a 4-GiB budget: the second process must wait"
    );
    let small = b.admit(GIB, &CancellationToken::new()).await;
    assert!(small.is_ok(), "1 GiB still fits beside the first's 3");
    drop(small);
    drop(held);
    let admitted = tokio::time::timeout(
        Duration::from_secs(5),
        b.admit(3 * GIB, &CancellationToken::new()),
    )
    .await;
    assert!(
        admitted.is_ok(),
        "released room is taken by the other process"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_processs_reservation_stops_counting_when_its_lease_lapses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    // A process that reserved and died: nobody renews its row.
    let dead = MemoryLedger::open(&path, "dead", Duration::from_millis(400)).unwrap();
    assert!(dead.try_reserve(3 * GIB, 4 * GIB).unwrap().is_some());
    let live = process_gate(&path, "live", Duration::from_secs(30));
    let started = std::time::Instant::now();
    let permit = tokio::time::timeout(
        Duration::from_secs(5),
        live.admit(3 * GIB, &CancellationToken::new()),
    )
    .await
    .expect("admitted once the dead reservation lapsed")
    .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    drop(permit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_reservation_is_renewed_past_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let a = process_gate(&path, "a", Duration::from_millis(300));
    let held = a.admit(3 * GIB, &CancellationToken::new()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    let ledger = MemoryLedger::open(&path, "probe", Duration::from_secs(1)).unwrap();
    assert_eq!(
        ledger.reserved().unwrap(),
        3 * GIB,
        "still held after three leases"
    );
    drop(held);
    assert_eq!(ledger.reserved().unwrap(), 0, "released on drop");
}

/// Where the child process writes when it held its reservation, and the ledger it uses.
const CHILD_ENV: &str = "TESSERA_TEST_LEDGER_CHILD";

/// One worker process of [`two_processes_on_one_budget_run_their_heavy_stages_in_turn`]:
/// that test run again with [`CHILD_ENV`] set (`spec` is its value).
fn child_process_holds_a_heavy_stage(spec: &str) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(hold_a_heavy_stage(spec));
}

async fn hold_a_heavy_stage(spec: &str) {
    let (ledger, out) = spec.split_once('|').unwrap();
    let out = std::path::Path::new(out);
    let owner = format!("pid-{}", std::process::id());
    // The process's gate as embedded mode builds it: its own count, the shared ledger
    // with the lease a worker uses.
    let gate = process_gate(
        std::path::Path::new(ledger),
        &owner,
        tessera_local::memory_ledger::RESERVATION_LEASE,
    );
    // Both processes ask at once: ready, then wait for the parent's go.
    std::fs::write(out.with_extension("ready"), b"").unwrap();
    let go = out.parent().unwrap().join("go");
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let asked = std::time::SystemTime::now();
    let permit = gate
        .admit(3 * GIB, &CancellationToken::new())
        .await
        .unwrap();
    let from = std::time::SystemTime::now();
    // The stage: hold the room a while.
    std::thread::sleep(Duration::from_millis(1500));
    let to = std::time::SystemTime::now();
    drop(permit);
    let ms =
        |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    std::fs::write(out, format!("{} {} {}", ms(asked), ms(from), ms(to))).unwrap();
}

#[test]
fn two_processes_on_one_budget_run_their_heavy_stages_in_turn() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child_process_holds_a_heavy_stage(&spec);
    }
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("memory.db");
    let me = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|i| {
            let out = dir.path().join(format!("held-{i}"));
            let child = std::process::Command::new(&me)
                .args([
                    "--exact",
                    "two_processes_on_one_budget_run_their_heavy_stages_in_turn",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, format!("{}|{}", ledger.display(), out.display()))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (child, out)
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !(0..2).all(|i| dir.path().join(format!("held-{i}.ready")).exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker processes never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(dir.path().join("go"), b"").unwrap();
    let mut held = Vec::new();
    for (child, out) in children {
        let done = child.wait_with_output().unwrap();
        assert!(
            done.status.success(),
            "a worker process failed or was killed: {:?}\n{}",
            done.status,
            String::from_utf8_lossy(&done.stdout)
        );
        let text = std::fs::read_to_string(&out).expect("the child ran its stage");
        let t: Vec<u128> = text.split(' ').map(|n| n.parse().unwrap()).collect();
        held.push((t[1], t[2], t[0]));
    }
    held.sort();
    assert!(
        held[1].2 < held[0].1,
        "the second process asked only after the first released: no contention tested {held:?}"
    );
    assert!(
        held[0].1 <= held[1].0,
        "3 + 3 GiB in a 4-GiB budget ran at once in two processes: {held:?}"
    );
}
