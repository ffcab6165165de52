//! The survey exports as a surveyor gets them: `tessera reconstruct` over geotagged
//! photos, read back by laspy and pyproj (PROJ), which share no code with Tessera.

use std::path::{Path, PathBuf};
use std::process::Command;
use tessera_tests::{json, repo_root, sample_photos, stderr, tessera};

/// The venv `scripts/setup-survey-readers` makes.
fn survey_python() -> PathBuf {
    std::env::var_os("TESSERA_SURVEY_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap())
                .join(".cache/tessera/venv-survey/bin/python")
        })
}

/// {name: [lat, lon, alt]} of the photos that carry GPS.
fn photos_gps(photos: &Path) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for e in std::fs::read_dir(photos).unwrap() {
        let p = e.unwrap().path();
        let (_, gps) = tessera_jobs::reconstruct::images::exif_facts(&std::fs::read(&p).unwrap());
        if let Some(g) = gps {
            out.insert(
                p.file_name().unwrap().to_string_lossy().into_owned(),
                serde_json::json!([g.lat, g.lon, g.alt.unwrap_or(0.0)]),
            );
        }
    }
    out.into()
}

#[test]
fn las_laz_and_camera_geojson_are_where_proj_puts_the_photos() {
    let dir = tempfile::tempdir().unwrap();
    let photos = sample_photos(dir.path(), 6);
    let out = dir.path().join("out");
    let o = tessera(
        &dir.path().join("state"),
        &[
            "--json",
            "reconstruct",
            photos.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--max-image-size",
            "640",
            "--max-features",
            "1024",
            "--export",
            "ply,las,laz,cameras-geojson",
            "--crs",
            "auto",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report = json(&o);
    assert_eq!(report["status"], "succeeded", "{report}");
    let registered = report["registered_images"].as_u64().unwrap();
    let points = tessera_sfm::model_bin::read(&out.join("sparse/0"))
        .unwrap()
        .points
        .len();

    let gps = photos_gps(&photos);
    assert_eq!(
        gps.as_object().unwrap().len(),
        6,
        "the sample photos carry GPS"
    );
    let gps_file = dir.path().join("gps.json");
    std::fs::write(&gps_file, gps.to_string()).unwrap();
    let read = Command::new(survey_python())
        .arg(repo_root().join("tests/survey/read_exports.py"))
        .arg(&out)
        .arg(&gps_file)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run scripts/setup-survey-readers",
                survey_python().display()
            )
        });
    assert!(read.status.success(), "{}", stderr(&read));
    let found: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();

    // The UTM zone of the first photo by name, as the reader's PROJ names it.
    let first = gps
        .as_object()
        .unwrap()
        .iter()
        .min_by_key(|(n, _)| *n)
        .unwrap()
        .1;
    let (lat, lon) = (first[0].as_f64().unwrap(), first[1].as_f64().unwrap());
    let zone = ((lon + 180.0) / 6.0).floor() as u64 + 1;
    let utm = if lat >= 0.0 {
        32600 + zone
    } else {
        32700 + zone
    };
    let las = &found["las"];
    assert_eq!(las["version"], "1.4", "{found}");
    assert_eq!(las["point_format"], 7, "{found}");
    assert_eq!(las["points"], points, "{found}");
    assert_eq!(las["epsg"], utm, "{found}");
    assert_eq!(
        las["extra_dimensions"],
        serde_json::json!(["track_length", "reprojection_error"]),
        "{found}"
    );
    assert!(las["track_length_min"].as_u64().unwrap() >= 2, "{found}");
    assert!(
        las["rgb_max"].as_u64().unwrap() > 255,
        "16-bit colour: {found}"
    );
    let laz = &found["laz"];
    assert_eq!(laz["points"], points, "{found}");
    assert_eq!(laz["epsg"], utm, "{found}");
    assert!(
        laz["max_difference_from_las"].as_f64().unwrap() < 1e-9,
        "{found}"
    );
    assert_eq!(laz["same_track_lengths"], true, "{found}");

    let cams = &found["cameras"];
    assert_eq!(cams["type"], "FeatureCollection");
    assert_eq!(cams["features"], registered, "{found}");
    assert_eq!(
        cams["position_crs"],
        serde_json::json!([format!("EPSG:{utm}")]),
        "{found}"
    );
    // Tessera's projection agrees with PROJ's to the millimetre.
    assert!(
        cams["max_projection_difference_m"].as_f64().unwrap() < 0.005,
        "{found}"
    );
    // Each camera where its photo's GPS says it was, within the alignment's residual.
    let residual = report["georeference"]["alignment_residual_m"]
        .as_f64()
        .unwrap();
    let from_gps: Vec<f64> = cams["horizontal_from_gps_m"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(from_gps.len() as u64, registered, "{found}");
    assert!(
        from_gps.iter().all(|m| *m < 3.0 * residual + 2.0),
        "residual {residual} m: {found}"
    );
    // And the points around the cameras, not at the origin of some other frame.
    assert!(
        found["points_median_from_cameras_m"].as_f64().unwrap() < 500.0,
        "{found}"
    );
}

#[test]
fn what_cannot_be_honoured_is_refused_by_name_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let photos = sample_photos(dir.path(), 3);
    let out = dir.path().join("out");
    let first = std::fs::read_dir(&photos)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .min()
        .unwrap();
    let gcp = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let typo = gcp(
        "typo.txt",
        &format!("EPSG:32632\n1 2 3 4 5 {first} a\n1 2 3 4 5 {first}x a\n"),
    );
    let bad_line = gcp("bad.txt", "WGS84 UTM 32N\n1 2 3 4 x.jpg\n");
    let fine = gcp("fine.txt", &format!("EPSG:32632\n1 2 3 4 5 {first} a\n"));
    let huge = dir.path().join("huge.txt");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(tessera_core::gcp::MAX_BYTES + 1)
        .unwrap();
    let huge = huge.to_string_lossy().into_owned();
    for (extra, says) in [
        (vec!["--gcp", typo.as_str()], "typo.txt line 3"),
        (
            vec!["--gcp", bad_line.as_str()],
            "bad.txt: ground control file line 2: 5 fields",
        ),
        (vec!["--gcp", huge.as_str()], "are refused"),
        (vec!["--gcp", fine.as_str(), "--georef", "none"], "drop one"),
        (vec!["--export", "las", "--crs", "EPSG:1"], "EPSG:1 is not"),
        (vec!["--export", "las", "--crs", "UTM"], "EPSG:NNNN"),
        (
            vec!["--export", "ply", "--crs", "auto"],
            "las, laz and cameras-geojson",
        ),
        (
            vec!["--export", "cameras-geojson", "--georef", "none"],
            "needs a georeferenced model",
        ),
    ] {
        let mut args = vec![
            "--json",
            "reconstruct",
            photos.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--dry-run",
        ];
        args.extend(extra.iter().copied());
        let o = tessera(&dir.path().join("state"), &args);
        assert!(!o.status.success(), "{extra:?}");
        assert!(stderr(&o).contains(says), "{extra:?}: {}", stderr(&o));
    }
}

/// The EPSG code of a LAS file's WKT, as laspy and pyproj read it.
fn las_epsg(path: &Path) -> serde_json::Value {
    let o = Command::new(survey_python())
        .args([
            "-c",
            "import sys, json, laspy; c = laspy.read(sys.argv[1]).header.parse_crs(); print(json.dumps(c.to_epsg() if c else None))",
        ])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A `gcp_list.txt` made from a known model: points with long tracks, spread out, at
/// the positions a known similarity gives them in UTM zone 32N, marked at the pixels
/// where the model saw them.
fn control_file(model: &tessera_sfm::Reconstruction, truth: &tessera_sfm::align::Sim3) -> String {
    use tessera_core::geodesy;
    let origin = geodesy::Geodetic {
        lat: 47.37,
        lon: 8.54,
        h: 420.0,
    };
    let utm = tessera_core::crs::Crs::from_epsg(32632).unwrap();
    let mut by_track: Vec<&tessera_sfm::Point3D> = model.points.values().collect();
    by_track.sort_by_key(|p| std::cmp::Reverse(p.track.len()));
    // Farthest-point choice among the 200 best-seen points: spread, never on one line.
    let pool = &by_track[..by_track.len().min(200)];
    let mut chosen = vec![pool[0]];
    while chosen.len() < 6 {
        let next = pool
            .iter()
            .max_by(|a, b| {
                let d = |p: &&tessera_sfm::Point3D| {
                    chosen
                        .iter()
                        .map(|c| tessera_sfm::align::distance(c.xyz, p.xyz))
                        .fold(f64::INFINITY, f64::min)
                };
                d(a).total_cmp(&d(b))
            })
            .unwrap();
        chosen.push(next);
    }
    let mut text = String::from("WGS84 UTM 32N\n");
    for (k, p) in chosen.iter().enumerate() {
        let enu = truth.apply(p.xyz);
        let w = utm.from_ecef(geodesy::enu_to_ecef(enu, &origin)).unwrap();
        let mut seen = std::collections::HashSet::new();
        // One mark per photo (a track can see a point twice in one photo).
        for o in p.track.iter().filter(|o| seen.insert(o.image_id)) {
            let img = &model.images[&o.image_id];
            // COLMAP's keypoint, in ODM's convention (pixel centres on whole numbers).
            let xy = img.points2d[o.point2d_idx as usize].xy.map(|v| v - 0.5);
            text.push_str(&format!(
                "{:.3} {:.3} {:.3} {:.2} {:.2} {} gcp{k}\n",
                w[0], w[1], w[2], xy[0], xy[1], img.name
            ));
        }
    }
    text
}

#[test]
fn ground_control_places_the_model_where_the_surveyed_points_are() {
    let dir = tempfile::tempdir().unwrap();
    let photos = sample_photos(dir.path(), 6);
    let state = dir.path().join("state");
    let run = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "--json",
            "reconstruct",
            photos.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--max-image-size",
            "640",
            "--max-features",
            "1024",
        ];
        args.extend_from_slice(extra);
        let o = tessera(&state, &args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        json(&o)
    };
    // A model in its own frame, and a survey of six of its points: 1 model unit is 12 m,
    // turned 30° about the vertical and tilted a little, moved to Zurich.
    let free = dir.path().join("free");
    run(&free, &["--georef", "none"]);
    let model = tessera_sfm::model_bin::read(&free.join("sparse/0")).unwrap();
    let half = 15f64.to_radians();
    let truth = tessera_sfm::align::Sim3 {
        scale: 12.0,
        rotation: tessera_sfm::model::rotation([half.cos(), 0.02, -0.01, half.sin()]),
        translation: [35.0, -12.0, 3.0],
    };
    let gcp = dir.path().join("gcp_list.txt");
    std::fs::write(&gcp, control_file(&model, &truth)).unwrap();

    let placed = dir.path().join("placed");
    let report = run(
        &placed,
        &[
            "--gcp",
            gcp.to_str().unwrap(),
            "--export",
            "las,cameras-geojson",
        ],
    );
    let g = &report["georeference"];
    assert_eq!(g["by"], "ground_control", "{report}");
    assert_eq!(g["frame"], "enu", "{report}");
    assert_eq!(g["control_crs"], "EPSG:32632", "{report}");
    let control = g["control"].as_array().unwrap();
    eprintln!("ground control residuals: {}", g["control"]);
    assert_eq!(control.len(), 6, "{report}");
    // Each surveyed point within 5 cm of where the placed model puts it (the marks are
    // the model's own pixels; what is left is the second run's triangulation).
    for p in control {
        assert_eq!(p["used"], true, "{p}");
        assert!(p["residual_m"].as_f64().unwrap() < 0.05, "{p}");
    }
    // Every camera where the known similarity carries it (10 cm: 1 model unit is 12 m).
    let origin = tessera_core::geodesy::Geodetic {
        lat: 47.37,
        lon: 8.54,
        h: 420.0,
    };
    let cams: serde_json::Value =
        serde_json::from_slice(&std::fs::read(placed.join("cameras.geojson")).unwrap()).unwrap();
    let features = cams["features"].as_array().unwrap();
    assert_eq!(features.len() as u64, report["registered_images"], "{cams}");
    for f in features {
        let name = f["properties"]["name"].as_str().unwrap();
        let c: Vec<f64> = f["geometry"]["coordinates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let at = tessera_core::geodesy::Geodetic {
            lon: c[0],
            lat: c[1],
            h: c[2],
        };
        let before = model.images.values().find(|i| i.name == name).unwrap();
        let want = tessera_core::geodesy::enu_to_ecef(truth.apply(before.center()), &origin);
        let got = tessera_core::geodesy::to_ecef(&at);
        let off = tessera_sfm::align::distance(want, got);
        assert!(
            off < 0.1,
            "camera {name} is {off} m from where the survey puts it"
        );
    }
    // The survey exports are in the control file's system unless asked otherwise.
    assert_eq!(las_epsg(&placed.join("model.las")), 32632);
}
