//! `tessera bench privacy --curve` as a user runs it, on the upright cases: every
//! threshold decided, leaks split by cause, and the recommendation the product ships.

use tessera_tests::{json, repo_root, stderr, tessera};

#[test]
fn the_curve_recommends_the_threshold_the_product_ships() {
    let dir = tempfile::tempdir().unwrap();
    let faces = repo_root().join("../shared/testdata/faces");
    let o = tessera(
        dir.path(),
        &[
            "--json",
            "bench",
            "privacy",
            "--curve",
            "--photos",
            "1",
            "--only",
            "upright",
            "--faces",
            faces.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = json(&o);
    let thresholds = r["thresholds"].as_array().unwrap();
    assert_eq!(thresholds.len(), 11, "0.25 to 0.50 in steps of 0.025");
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2, "upright and HEIC upright: {r}");
    for c in cases {
        assert!(c["opted_out_faces"].as_u64().unwrap() > 0, "{c}");
        for i in 0..thresholds.len() {
            assert_eq!(c["leaks_shown"][i], 0, "{c}");
            assert!(
                c["leaks"][i].as_u64() >= c["leaks_shown"][i].as_u64(),
                "{c}"
            );
        }
        // The same person, enrolled from another picture, scores far above strangers.
        let same = c["same_person"]["min"].as_f64().unwrap();
        let other = c["other_people"]["max"].as_f64().unwrap();
        assert!(same > other + 0.3, "{c}");
        assert!(c["face_px"]["median"].as_f64().unwrap() > 60.0, "{c}");
    }
    let recommended = r["recommended"]["threshold"].as_f64().unwrap() as f32;
    assert_eq!(
        recommended,
        tessera_core::privacy::RECOMMENDED_THRESHOLD,
        "{}",
        r["recommended"]
    );
}
