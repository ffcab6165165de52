//! The quick start's main job end to end, and the same job run by separate worker
//! processes with events followed live.

use std::process::{Command, Stdio};
use tessera_tests::{json, repo_root, stderr, stdout, tessera, tessera_bin};

#[test]
fn the_demo_job_on_the_sample_writes_a_manifest_and_replayable_events() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("state");
    let out = dir.path().join("out");
    let sample = repo_root().join("sample/images");
    let n = std::fs::read_dir(&sample).unwrap().count();
    let o = tessera(
        &s,
        &[
            "--json",
            "demo",
            sample.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "demo failed: {}", stderr(&o));
    let summary = json(&o);
    assert_eq!(summary["status"], "succeeded");
    assert_eq!(summary["existing"], false);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let images = manifest["images"].as_array().unwrap();
    assert_eq!(images.len(), n);
    for i in images {
        assert_eq!(i["format"], "jpeg");
        assert!(i["width"].as_u64().unwrap() > 100 && i["height"].as_u64().unwrap() > 100);
        assert_eq!(i["sha256"].as_str().unwrap().len(), 64);
    }

    // Events replay in order with no gaps, and `--after` resumes exactly.
    let job = summary["job_id"].as_str().unwrap();
    let all = stdout(&tessera(&s, &["--json", "events", job]));
    let seqs: Vec<u64> = all
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(seqs.len() >= 2 * n, "each inspect reports its phase");
    let tail = stdout(&tessera(&s, &["--json", "events", job, "--after", "3"]));
    assert_eq!(tail.lines().count(), seqs.len() - 3);

    // The same photos again: the same job, not a new one.
    let again = json(&tessera(
        &s,
        &[
            "--json",
            "demo",
            sample.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    ));
    assert_eq!(again["job_id"], summary["job_id"]);
    assert_eq!(again["existing"], true);
    let list = json(&tessera(&s, &["--json", "jobs", "list"]));
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1);
}

#[test]
fn worker_processes_run_a_submitted_job_while_events_are_followed() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("state");
    let sample = repo_root().join("sample/images");
    let o = tessera(
        &s,
        &["--json", "demo", sample.to_str().unwrap(), "--submit-only"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let job = json(&o)["job_id"].as_str().unwrap().to_string();
    let show = json(&tessera(&s, &["--json", "jobs", "show", &job]));
    assert_eq!(show["status"], "queued");

    let follower = Command::new(tessera_bin())
        .args([
            "--state",
            s.to_str().unwrap(),
            "--json",
            "events",
            &job,
            "--follow",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut workers: Vec<_> = (0..2)
        .map(|_| {
            Command::new(tessera_bin())
                .args([
                    "--state",
                    s.to_str().unwrap(),
                    "worker",
                    "--concurrency",
                    "2",
                    "--lease-ms",
                    "2000",
                ])
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let followed = follower.wait_with_output().unwrap();
    for w in &mut workers {
        // SIGTERM: finish in-flight work and exit cleanly.
        unsafe_term(w.id());
        assert!(
            w.wait().unwrap().success(),
            "a worker stops cleanly on SIGTERM"
        );
    }
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&followed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = lines.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "followed events arrive once each, in order"
    );
    assert!(
        lines
            .iter()
            .any(|e| e["type"] == "phase_completed" && e["phase"] == "summarize")
    );
    assert_eq!(
        json(&tessera(&s, &["--json", "jobs", "show", &job]))["status"],
        "succeeded"
    );
}

fn unsafe_term(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}
