//! The chaos run as a test: worker processes SIGKILLed and frozen at random while tasks
//! run; every invariant must hold afterwards.

use tessera_tests::{json, stderr, tessera};

#[test]
fn chaos_keeps_every_invariant() {
    let dir = tempfile::tempdir().unwrap();
    let o = tessera(
        dir.path(),
        &[
            "--json",
            "bench",
            "chaos",
            "--workers",
            "3",
            "--tasks",
            "80",
            "--kills",
            "15",
            "--pauses",
            "3",
            "--max-task-ms",
            "800",
        ],
    );
    let r = json(&o);
    assert!(
        o.status.success(),
        "invariants violated: {r}\n{}",
        stderr(&o)
    );
    assert_eq!(r["tasks"], 80);
    assert_eq!(r["lost"], 0);
    assert_eq!(r["concurrent_overlaps"], 0);
    assert_eq!(r["event_gaps"], 0);
    assert!(r["max_attempts"].as_u64().unwrap() <= r["ceiling"].as_u64().unwrap());
    assert_eq!(
        r["succeeded"].as_u64().unwrap() + r["dead"].as_u64().unwrap(),
        80
    );
    assert!(
        r["reclaimed"].as_u64().unwrap() > 0,
        "the kills must actually interrupt running tasks: {r}"
    );
}

#[test]
fn the_engine_bench_prints_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let o = tessera(
        dir.path(),
        &[
            "--json",
            "bench",
            "engine",
            "--tasks",
            "300",
            "--workers",
            "2",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = json(&o);
    assert_eq!(r["succeeded"], 300);
    for field in [
        "tasks_per_sec",
        "p99_claim_ms",
        "p50_claim_ms",
        "baseline_writes_per_sec",
    ] {
        assert!(r[field].as_f64().unwrap() > 0.0, "{field} in {r}");
    }
}
