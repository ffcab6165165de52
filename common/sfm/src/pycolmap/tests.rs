use super::*;
use tessera_core::event::Phase;

/// A CPU backend at the pinned version whose runner is never run: for the command lines.
fn backend() -> PycolmapBackend {
    PycolmapBackend {
        info: BackendInfo {
            name: "pycolmap".into(),
            version: PINNED_VERSION.into(),
            cuda: false,
            capabilities: capabilities(),
        },
        python: "python3".into(),
        runner: "/tmp/x/stage.py".into(),
    }
}

#[test]
fn runner_lines_become_events_and_the_rest_is_log() {
    assert_eq!(
        parse_line(
            r#"{"phase": "matching", "current": 39, "total": 66, "tessera": "progress"}"#,
            None
        ),
        Some(LineEvent::Progress {
            phase: Phase::Matching,
            current: 39,
            total: Some(66)
        })
    );
    assert_eq!(
        parse_line(
            r#"{"phase": "incremental_register", "current": 3, "tessera": "progress"}"#,
            Some(12)
        ),
        Some(LineEvent::Progress {
            phase: Phase::IncrementalRegister,
            current: 3,
            total: Some(12)
        })
    );
    assert_eq!(
        parse_line(
            r#"{"tessera": "started", "phase": "global_positioning"}"#,
            None
        ),
        Some(LineEvent::Started(Phase::GlobalPositioning))
    );
    assert_eq!(
        parse_line(
            r#"{"tessera": "figure", "name": "registered_images", "value": 12}"#,
            None
        ),
        Some(LineEvent::Figure("registered_images", 12.0))
    );
    assert_eq!(
        parse_line(
            r#"{"tessera": "figure", "name": "anything", "value": 1}"#,
            None
        ),
        None,
        "unknown figures are not invented metrics"
    );
    assert!(matches!(
        parse_line(r#"{"tessera": "error", "message": "no GPS"}"#, None),
        Some(LineEvent::Warning(m)) if m == "no GPS"
    ));
    assert_eq!(
        parse_line(
            "I20261201 14:03:53.472660 139627558017920 timer.cc:90] Elapsed time",
            None
        ),
        None
    );
    assert_eq!(
        parse_line(
            "I20261201 14:40:01.1 1396 feature_extraction.cc:270] Processed file [3/12]",
            None
        ),
        Some(LineEvent::Progress {
            phase: Phase::FeatureExtraction,
            current: 3,
            total: Some(12)
        })
    );
    assert_eq!(
        parse_line(
            "I20261201 14:40:01.1 1396 pairing.cc:214] Processing block [2/4, 1/4]",
            None
        ),
        Some(LineEvent::Progress {
            phase: Phase::Matching,
            current: 2,
            total: Some(4)
        })
    );
    assert_eq!(
        parse_line(
            "I1201 14:40:01.1 1396 pairing.cc:562] Processing image [5/12]",
            None
        ),
        Some(LineEvent::Progress {
            phase: Phase::Matching,
            current: 5,
            total: Some(12)
        })
    );
    assert_eq!(parse_line("{not json", None), None);
}

#[test]
fn the_global_mapper_is_offered_without_cuda() {
    let caps = capabilities();
    assert!(caps.contains("map.global"));
    assert!(caps.contains("pairs.exhaustive"));
    assert!(caps.contains("map.hierarchical"));
}

#[test]
fn invocations_are_named_by_their_stage_not_the_runner_path() {
    let b = backend();
    let inv = b
        .map(
            MapperKind::Global,
            Path::new("db"),
            Path::new("im"),
            Path::new("out"),
            Path::new("snap"),
            5,
            None,
            None,
        )
        .unwrap();
    assert_eq!(inv[0].name(), "map_global");
    assert_eq!(inv[0].program, "python3");
    let inv = b
        .map(
            MapperKind::Hierarchical,
            Path::new("db"),
            Path::new("im"),
            Path::new("out"),
            Path::new("snap"),
            5,
            None,
            Some(tessera_core::spec::SplitSpec {
                cluster_size: 25,
                overlap: 9,
            }),
        )
        .unwrap();
    assert_eq!(inv[0].name(), "map_hierarchical");
    assert!(
        inv[0]
            .args
            .windows(2)
            .any(|w| w == ["--leaf-max-images", "25"]),
        "{:?}",
        inv[0].args
    );
}

/// Extraction is told its threads: COLMAP's own default is every core it sees, the
/// host's in a container, and the memory model bounds the photos in flight by
/// `EXTRACT_THREADS_MAX`. Both engines.
#[test]
fn extraction_runs_on_at_most_the_threads_the_memory_model_counts() {
    let spec: ReconstructionSpec = serde_json::from_value(serde_json::json!({
        "project": "01JA0000000000000000000000", "image_set": "datasets/x/images",
        "backend": {"name": "pycolmap"}, "camera_model": "SIMPLE_RADIAL",
        "max_features": 8192, "max_image_size": 2000, "pairs": {"strategy": "exhaustive"},
        "mapper": "incremental", "ba": "standard", "georef": {"mode": "none"},
        "exports": ["points-bin"]
    }))
    .unwrap();
    let threads = |args: &[String], flag: &str| -> usize {
        let at = args
            .iter()
            .position(|a| a == flag)
            .unwrap_or_else(|| panic!("{args:?}"));
        args[at + 1].parse().unwrap()
    };
    let b = backend();
    let inv = b
        .extract(
            &spec,
            Path::new("db"),
            Path::new("im"),
            CameraSharing::Auto,
            None,
            None,
        )
        .unwrap();
    let on_pycolmap = threads(&inv[0].args, "--threads");
    let on_cli = threads(
        &crate::colmap::commands::extract(
            &spec,
            Path::new("db"),
            Path::new("im"),
            false,
            CameraSharing::Auto,
        ),
        "--SiftExtraction.num_threads",
    );
    for n in [on_pycolmap, on_cli] {
        assert!(
            (1..=crate::backend::EXTRACT_THREADS_MAX).contains(&n),
            "{n} threads"
        );
    }
}

/// The last look at photos in no model is COLMAP 4's alone: it names the photos it may
/// place and goes down to `LAST_LOOK_ABS_POSE_MIN_INLIERS`; COLMAP 3.8's registrator
/// takes no list, so that backend refuses by the capability's name.
#[test]
fn the_last_look_names_its_photos_and_its_threshold() {
    let b = backend();
    let (db, model, out, list) = (
        Path::new("db"),
        Path::new("model"),
        Path::new("out"),
        Path::new("list.txt"),
    );
    let args = &b.register_left_out(db, model, out, list).unwrap()[0].args;
    let after = |flag: &str| {
        let at = args
            .iter()
            .position(|a| a == flag)
            .unwrap_or_else(|| panic!("{args:?}"));
        args[at + 1].clone()
    };
    assert_eq!(after("--image-list"), "list.txt");
    let last = crate::backend::LAST_LOOK_ABS_POSE_MIN_INLIERS;
    assert_eq!(after("--relaxed-abs-pose-min-inliers"), last.to_string());
    assert!(last < crate::backend::RELAXED_INIT.abs_pose_min_inliers);
    // The join of sub-models keeps the relaxed pass's bar.
    let join = &b.register_images(db, model, out).unwrap()[0].args;
    assert!(!join.iter().any(|a| a == "--image-list"), "{join:?}");
    let cli = crate::colmap::ColmapBackend::with_info(BackendInfo {
        name: "colmap".into(),
        version: "3.8".into(),
        cuda: false,
        capabilities: crate::colmap::capabilities("3.8", false),
    });
    let refused = cli.register_left_out(db, model, out, list).unwrap_err();
    assert_eq!(refused.capability, "relocalize.last_look");
}
