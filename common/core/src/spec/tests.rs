use super::*;
use proptest::prelude::*;
use serde_json::json;

fn any_value() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        any::<i64>().prop_map(|n| Some(json!(n))),
        any::<f64>().prop_map(|f| Some(json!(f))),
        "\\PC{0,20}".prop_map(|s| Some(json!(s))),
        Just(Some(json!([]))),
        Just(Some(json!({}))),
        Just(Some(json!(u64::MAX))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A spec from a client, mangled anywhere, parses and validates or is refused;
    /// it never panics.
    #[test]
    fn a_mangled_spec_is_refused_not_a_panic(path in proptest::collection::vec(0usize..16, 1..4), with in any_value()) {
        let mut v = valid();
        crate::testing::mutate(&mut v, &path, with);
        if let Ok(spec) = parse::<ReconstructionSpec>(v.clone()) {
            let _ = spec.validate();
            let _ = fingerprint("reconstruction", &v);
        }
    }
}

fn valid() -> Value {
    json!({
        "project": "01JA0000000000000000000000",
        "image_set": "datasets/caliterra/images",
        "backend": {"name": "colmap", "version": "3.8"},
        "camera_model": "SIMPLE_RADIAL",
        "max_features": 4096,
        "max_image_size": 1000,
        "pairs": {"strategy": "sequential", "overlap": 10},
        "mapper": "incremental",
        "ba": "two_stage",
        "georef": {"mode": "gps", "target_epsg": null},
        "exports": ["ply", "colmap-bin"],
        "priority": 5
    })
}

#[test]
fn a_valid_spec_validates() {
    let spec: ReconstructionSpec = parse(valid()).unwrap();
    spec.validate().unwrap();
}

#[test]
fn every_bad_field_is_named_with_a_fix() {
    let mut v = valid();
    v["project"] = json!("nope");
    v["max_features"] = json!(10);
    v["pairs"] = json!({"strategy": "sequential", "overlap": 0});
    v["georef"] = json!({"mode": "gps", "target_epsg": 7});
    v["exports"] = json!(["ply", "ply"]);
    v["backend"] = json!({"name": "meshroom", "version": "x"});
    let spec: ReconstructionSpec = parse(v).unwrap();
    let err = spec.validate().unwrap_err();
    let fields: Vec<_> = err.errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "project",
            "backend.name",
            "backend.version",
            "max_features",
            "pairs.overlap",
            "georef.target_epsg",
            "exports"
        ]
    );
    assert!(err.to_string().contains("use 256 to 65536"));
}

#[test]
fn a_vocabulary_tree_is_trained_or_read_from_the_store_never_from_a_path() {
    let check = |pairs: Value| {
        let mut v = valid();
        v["pairs"] = pairs;
        parse::<ReconstructionSpec>(v).unwrap().validate()
    };
    check(json!({"strategy": "vocab_tree", "num_images": 50})).unwrap();
    check(json!({"strategy": "vocab_tree", "tree": "inputs/vocab-trees/ab.bin", "num_images": 50}))
        .unwrap();
    for tree in ["/etc/passwd", "../x.bin", ""] {
        let e =
            check(json!({"strategy": "vocab_tree", "tree": tree, "num_images": 5})).unwrap_err();
        assert_eq!(e.errors[0].field, "pairs.tree", "{tree}");
    }
    // A trained tree keeps the spec's old shape: no `tree` key, so a fingerprint of
    // a spec that named a tree is unchanged by the field becoming optional.
    let trained = PairStrategy::VocabTree {
        tree: None,
        num_images: 50,
    };
    assert_eq!(
        serde_json::to_value(&trained).unwrap(),
        json!({"strategy": "vocab_tree", "num_images": 50})
    );
}

#[test]
fn strip_neighbours_are_bounded_and_a_spec_without_them_keeps_its_shape() {
    let check = |pairs: Value| {
        let mut v = valid();
        v["pairs"] = pairs;
        parse::<ReconstructionSpec>(v).unwrap().validate()
    };
    let spatial = json!({"strategy": "spatial", "max_neighbors": 10, "max_distance_m": 500.0});
    check(spatial.clone()).unwrap();
    let mut with = spatial.clone();
    with["strip_overlap"] = json!(4);
    check(with.clone()).unwrap();
    with["strip_overlap"] = json!(101);
    assert_eq!(
        check(with).unwrap_err().errors[0].field,
        "pairs.strip_overlap"
    );
    let parsed: PairStrategy = serde_json::from_value(spatial.clone()).unwrap();
    assert_eq!(serde_json::to_value(&parsed).unwrap(), spatial);
}

#[test]
fn a_frame_no_engine_produces_is_refused_not_replaced() {
    let refused = |georef: Value| {
        let mut v = valid();
        v["georef"] = georef;
        let spec: ReconstructionSpec = parse(v).unwrap();
        spec.validate()
            .err()
            .map(|e| (e.errors[0].field.clone(), e.to_string()))
    };
    for ok in [
        json!({"mode": "none"}),
        json!({"mode": "gps", "target_epsg": null}),
        json!({"mode": "gps", "target_epsg": 4978}),
    ] {
        assert_eq!(refused(ok.clone()), None, "{ok}");
    }
    let (field, why) = refused(json!({"mode": "gps", "target_epsg": 32633})).unwrap();
    assert_eq!(field, "georef.target_epsg");
    assert!(why.contains("EPSG:32633 is not produced"), "{why}");
    assert_eq!(
        refused(json!({"mode": "gcp", "file": "inputs/gcp/0a.txt", "target_epsg": null})),
        None
    );
    let (field, why) =
        refused(json!({"mode": "gcp", "file": "../gcp_list.txt", "target_epsg": null})).unwrap();
    assert_eq!(field, "georef.file");
    assert!(why.contains("not an object-store key"), "{why}");
}

#[test]
fn a_survey_crs_needs_gps_a_survey_export_and_a_code_that_can_be_written() {
    let problems = |edit: &dyn Fn(&mut Value)| {
        let mut v = valid();
        edit(&mut v);
        let spec: ReconstructionSpec = parse(v).unwrap();
        spec.validate()
            .err()
            .map(|e| {
                e.errors
                    .iter()
                    .map(|p| format!("{}: {}", p.field, p.message))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    for ok in ["auto", "EPSG:32633", "epsg:4326", "EPSG:4978", "EPSG:2056"] {
        let found = problems(&|v| {
            v["exports"] = json!(["las", "cameras-geojson"]);
            v["crs"] = json!(ok);
        });
        assert!(found.is_empty(), "{ok}: {found:?}");
    }
    // The default frame needs no crs.
    assert!(problems(&|v| v["exports"] = json!(["laz"])).is_empty());
    let found = problems(&|v| {
        v["exports"] = json!(["ply"]);
        v["crs"] = json!("auto");
    });
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("crs: auto applies to the las"),
        "{found:?}"
    );
    let found = problems(&|v| {
        v["exports"] = json!(["las", "cameras-geojson"]);
        v["georef"] = json!({"mode": "none"});
        v["crs"] = json!("EPSG:32633");
    });
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with("crs: EPSG:32633 needs a georeferenced model"),
        "{found:?}"
    );
    assert!(
        found[1].starts_with("exports: cameras-geojson"),
        "{found:?}"
    );
    let found = problems(&|v| {
        v["exports"] = json!(["las"]);
        v["crs"] = json!("EPSG:1");
    });
    assert!(
        found[0].starts_with("crs: EPSG:1 is not a coordinate system"),
        "{found:?}"
    );
    let mut v = valid();
    v["crs"] = json!("UTM");
    assert!(
        parse::<ReconstructionSpec>(v)
            .unwrap_err()
            .to_string()
            .contains("EPSG:NNNN")
    );
    // Absent, the field is not serialized: older fingerprints stay.
    let spec: ReconstructionSpec = parse(valid()).unwrap();
    assert!(serde_json::to_value(&spec).unwrap().get("crs").is_none());
}

#[test]
fn a_refinement_leaves_the_survey_formats_to_its_base() {
    let spec = RelocalizeSpec {
        base_job: "01JA0000000000000000000000".into(),
        image_set: "datasets/x/images".into(),
        max_features: 4096,
        max_image_size: 1000,
        exports: vec![ExportFormat::Ply, ExportFormat::Las],
        priority: 0,
    };
    let err = spec.validate().unwrap_err();
    assert_eq!(err.errors.len(), 1);
    assert_eq!(err.errors[0].field, "exports");
    assert!(
        err.to_string()
            .contains("`las` is written by a reconstruction")
    );
    let t = TriangulateSpec {
        base_job: "01JA0000000000000000000000".into(),
        exports: vec![ExportFormat::CamerasGeojson],
        priority: 0,
    };
    assert!(t.validate().is_err());
}

#[test]
fn unknown_fields_and_wrong_types_are_rejected() {
    let mut v = valid();
    v["colour"] = json!("blue");
    assert!(
        parse::<ReconstructionSpec>(v)
            .unwrap_err()
            .to_string()
            .contains("colour")
    );
    let mut v = valid();
    v["mapper"] = json!("magic");
    assert!(parse::<ReconstructionSpec>(v).is_err());
}

#[test]
fn fingerprint_ignores_priority_and_key_order_but_not_content() {
    let a = valid();
    let mut b = valid();
    b["priority"] = json!(-40);
    let mut c = valid();
    c["max_features"] = json!(8192);
    // Same content, keys in another order.
    let d: Value = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
    assert_eq!(
        fingerprint("reconstruct", &a),
        fingerprint("reconstruct", &b)
    );
    assert_eq!(
        fingerprint("reconstruct", &a),
        fingerprint("reconstruct", &d)
    );
    assert_ne!(
        fingerprint("reconstruct", &a),
        fingerprint("reconstruct", &c)
    );
    assert_ne!(fingerprint("reconstruct", &a), fingerprint("demo", &a));
    assert_eq!(fingerprint("x", &a).len(), 64);
}
