//! Bad input to every command gives a clear error naming what is wrong, and exits
//! non-zero; nothing already stored is lost.

use tessera_tests::{json, stderr, tessera};

fn fails_with(state: &std::path::Path, args: &[&str], code: i32, needle: &str) {
    let o = tessera(state, args);
    assert_eq!(
        o.status.code(),
        Some(code),
        "`tessera {}` exit code; stderr: {}",
        args.join(" "),
        stderr(&o)
    );
    assert!(
        stderr(&o).contains(needle),
        "`tessera {}` should say {needle:?}, said: {}",
        args.join(" "),
        stderr(&o)
    );
}

#[test]
fn job_ids_are_checked_and_unknown_jobs_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path();
    let unknown = "01JA0000000000000000000000";
    for cmd in [
        &["jobs", "show"][..],
        &["jobs", "cancel"],
        &["jobs", "resume"],
        &["events"],
    ] {
        let mut bad = cmd.to_vec();
        bad.push("not-a-job");
        fails_with(s, &bad, 1, "`not-a-job` is not a valid job id");
        let mut missing = cmd.to_vec();
        missing.push(unknown);
        fails_with(s, &missing, 1, &format!("job {unknown} does not exist"));
    }
    fails_with(
        s,
        &["jobs", "cancel", "--force", "'; DROP TABLE items; --"],
        1,
        "is not a valid job id",
    );
}

#[test]
fn serving_everyone_as_the_local_admin_needs_insecure() {
    let dir = tempfile::tempdir().unwrap();
    for addr in ["0.0.0.0:0", "[::]:0"] {
        fails_with(
            dir.path(),
            &["serve", "--addr", addr, "--auth", "none"],
            1,
            "--insecure",
        );
    }
    // Any web page acting as the local admin.
    fails_with(
        dir.path(),
        &["serve", "--addr", "127.0.0.1:0", "--cors-origin", "*"],
        1,
        "--insecure",
    );
    // Every interface, even with keys or --insecure: its names must be given.
    for extra in [&["--auth", "api_key"][..], &["--insecure"][..]] {
        let mut args = vec!["serve", "--addr", "0.0.0.0:0"];
        args.extend_from_slice(extra);
        fails_with(dir.path(), &args, 1, "--host-name");
    }
}

#[test]
fn usage_errors_exit_2_with_clap_help() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path();
    fails_with(s, &["jobs", "list", "--limit", "0"], 2, "--limit");
    fails_with(s, &["bench", "engine", "--tasks", "0"], 2, "--tasks");
    fails_with(s, &["bench", "chaos", "--workers", "0"], 2, "--workers");
    fails_with(s, &["worker", "--lease-ms", "5"], 2, "--lease-ms");
    fails_with(
        s,
        &["events", "01JA0000000000000000000000", "--after=-1"],
        2,
        "--after",
    );
    fails_with(s, &["frobnicate"], 2, "unrecognized subcommand");
}

#[test]
fn a_state_directory_that_is_a_file_or_unreadable_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    fails_with(&file, &["jobs", "list"], 1, "is a file; pass --state DIR");
    let garbage = dir.path().join("garbage");
    std::fs::create_dir(&garbage).unwrap();
    std::fs::write(
        garbage.join("state.db"),
        b"this is not a database, just some bytes that are long enough",
    )
    .unwrap();
    fails_with(&garbage, &["jobs", "list"], 1, "state.db");
}

#[test]
fn demo_input_folders_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("state");
    fails_with(
        &s,
        &["demo", "/definitely/not/here"],
        1,
        "folder /definitely/not/here does not exist",
    );
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("notes.txt"), b"no photos here").unwrap();
    fails_with(&s, &["demo", empty.to_str().unwrap()], 1, "holds no photos");
}

#[test]
fn hostile_photos_fail_their_task_with_a_named_reason_and_keep_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("state");
    let photos = dir.path().join("photos");
    std::fs::create_dir(&photos).unwrap();
    let good = tessera_tests::repo_root().join("sample/images");
    let first = std::fs::read_dir(&good)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::copy(&first, photos.join("good.jpg")).unwrap();
    std::fs::write(photos.join("empty.jpg"), b"").unwrap();
    std::fs::write(
        photos.join("text.jpg"),
        b"I am a text file wearing a .jpg name",
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = tessera(
        &s,
        &[
            "--json",
            "demo",
            photos.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "a job with bad photos fails: {}",
        stderr(&o)
    );
    let summary = json(&o);
    assert_eq!(summary["status"], "failed");
    let job = summary["job_id"].as_str().unwrap();
    let show = json(&tessera(&s, &["--json", "jobs", "show", job]));
    let tasks = show["tasks"].as_array().unwrap();
    let failed: Vec<_> = tasks.iter().filter(|t| t["state"] == "failed").collect();
    assert_eq!(
        failed.len(),
        2,
        "the empty and the text file fail: {tasks:#?}"
    );
    for t in failed {
        let msg = t["last_error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("empty.jpg") || msg.contains("text.jpg"),
            "the error names the file: {msg}"
        );
        assert!(
            msg.contains("remove it") || msg.contains("re-export"),
            "the error says what to do: {msg}"
        );
        assert_eq!(t["attempts"], 1, "bad input is permanent: no retry");
    }
    assert!(
        tasks.iter().any(|t| t["state"] == "succeeded"),
        "the good photo was still inspected"
    );
    assert!(
        !out.join("manifest.json").exists(),
        "no manifest for a failed job"
    );
}

#[test]
fn a_photo_whose_file_name_no_key_can_hold_is_refused_by_name_as_the_api_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("state");
    let o = tessera(&s, &["projects", "create", "p"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bad = dir.path().join("bell\u{7}.jpg");
    std::fs::copy(
        tessera_tests::repo_root().join("../shared/testdata/faces/astronaut.png"),
        &bad,
    )
    .unwrap();
    let good = dir.path().join("good.png");
    std::fs::copy(
        tessera_tests::repo_root().join("../shared/testdata/faces/astronaut.png"),
        &good,
    )
    .unwrap();
    fails_with(
        &s,
        &[
            "photos",
            "add",
            "--project",
            "p",
            good.to_str().unwrap(),
            bad.to_str().unwrap(),
        ],
        1,
        "not a usable photo file name",
    );
    // Every file is checked before the first is stored: the good one is not left behind
    // stored, counted and never processed.
    let stored = tessera_tests::walk_files(&s.join("objects/uploads"));
    assert!(stored.is_empty(), "{stored:?}");
    let listed = json(&tessera(
        &s,
        &["--json", "photos", "list", "--project", "p"],
    ));
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
}
