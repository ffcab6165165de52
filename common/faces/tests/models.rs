//! The real models on the real ONNX Runtime (the library named by ORT_DYLIB_PATH, which
//! scripts/env.sh sets) against the shared test photos.

use std::path::PathBuf;
use tessera_core::privacy::cosine;
use tessera_faces::blur::{self, BlurPlan};
use tessera_faces::{DetectorKind, FaceModels, FracRect, ModelFiles, OnnxRuntime};

fn shared() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../../shared")
}

fn photo(name: &str) -> image::RgbImage {
    image::open(shared().join("testdata/faces").join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .to_rgb8()
}

fn models(kind: DetectorKind) -> FaceModels {
    let rt =
        OnnxRuntime::from_env().expect("ORT_DYLIB_PATH names ONNX Runtime 1.32 (scripts/env.sh)");
    FaceModels::load(&rt, &ModelFiles::in_dir(shared().join("models")), kind, 1).unwrap()
}

#[test]
fn both_detectors_find_the_eight_composite_faces_and_none_in_negatives() {
    for kind in [DetectorKind::Yunet, DetectorKind::Centerface] {
        let m = models(kind);
        let faces = m.detect(&photo("composite_pd_1280x896.jpg")).unwrap();
        assert_eq!(faces.len(), 8, "{kind:?}: {faces:?}");
        for f in &faces {
            let (w, h) = (f.bbox[2] - f.bbox[0], f.bbox[3] - f.bbox[1]);
            assert!(
                (20.0..200.0).contains(&w) && (20.0..260.0).contains(&h),
                "{kind:?} {f:?}"
            );
            // Landmarks lie inside (or at) the box.
            for l in &f.landmarks {
                assert!(
                    l[0] >= f.bbox[0] - 5.0 && l[0] <= f.bbox[2] + 5.0,
                    "{kind:?} {f:?}"
                );
            }
        }
        for neg in ["negatives/coffee.png", "negatives/chelsea.png"] {
            assert!(
                m.detect(&photo(neg)).unwrap().is_empty(),
                "{kind:?} on {neg}"
            );
        }
        for one in ["astronaut.png", "grace_hopper.jpg", "camera.png"] {
            assert_eq!(m.detect(&photo(one)).unwrap().len(), 1, "{kind:?} on {one}");
        }
    }
}

#[test]
fn embeddings_tell_people_apart() {
    let m = models(DetectorKind::Yunet);
    let reference = |name: &str| {
        let img = photo(name);
        let f = &m.detect(&img).unwrap()[0];
        m.embed(&img, &f.landmarks).unwrap()
    };
    let astronaut = reference("astronaut.png");
    let hopper = reference("grace_hopper.jpg");
    assert!((astronaut.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-4);
    assert!(cosine(&astronaut, &hopper) < 0.3);
    let comp = photo("composite_pd_1280x896.jpg");
    let mut astronauts = 0;
    let mut hoppers = 0;
    for f in m.detect(&comp).unwrap() {
        let e = m.embed(&comp, &f.landmarks).unwrap();
        let (a, h) = (cosine(&e, &astronaut), cosine(&e, &hopper));
        if a >= 0.363 && h < 0.363 {
            astronauts += 1;
        }
        if h >= 0.363 && a < 0.363 {
            hoppers += 1;
        }
    }
    assert_eq!((astronauts, hoppers), (4, 3));
}

#[test]
fn after_blurring_the_detector_finds_no_face_there() {
    let m = models(DetectorKind::Yunet);
    let mut comp = photo("composite_pd_1280x896.jpg");
    let (w, h) = comp.dimensions();
    let faces: Vec<FracRect> = m
        .detect(&comp)
        .unwrap()
        .iter()
        .map(|d| FracRect::from_pixels(d.bbox, w, h))
        .collect();
    blur::apply(
        &mut comp,
        &BlurPlan {
            faces: faces.clone(),
            regions: vec![],
            expand: blur::DEFAULT_EXPAND,
        },
    );
    let again = m.detect(&comp).unwrap();
    let inside: Vec<_> = again
        .iter()
        .filter(|d| {
            faces
                .iter()
                .any(|f| f.iou(&FracRect::from_pixels(d.bbox, w, h)) > 0.0)
        })
        .collect();
    assert!(
        inside.is_empty(),
        "faces found in blurred regions: {inside:?}"
    );
    // The other detector agrees.
    let c = models(DetectorKind::Centerface);
    assert!(c.detect(&comp).unwrap().is_empty());
}

#[test]
fn a_missing_or_wrong_runtime_is_a_clear_error() {
    let e = OnnxRuntime::load(std::path::Path::new("/nonexistent/libonnxruntime.so")).err();
    // Once a runtime is loaded in this process, later loads return it; only check the
    // message when this test ran first.
    if let Some(e) = e {
        let msg = e.to_string();
        assert!(
            msg.contains("/nonexistent/libonnxruntime.so") && msg.contains("setup-onnx"),
            "{msg}"
        );
    }
    let rt = OnnxRuntime::from_env().unwrap();
    assert!(rt.version.starts_with("1.32."), "{}", rt.version);
    let err = FaceModels::load(
        &rt,
        &ModelFiles::in_dir("/nonexistent"),
        DetectorKind::Yunet,
        1,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("/nonexistent/yunet_2023mar_fp32_dynamic.onnx")
            && err.contains("TESSERA_MODELS"),
        "{err}"
    );
}

#[test]
fn a_photo_larger_than_the_detector_input_is_scaled_and_boxes_map_back() {
    let m = models(DetectorKind::Yunet);
    let small = photo("composite_pd_1280x896.jpg");
    let big = image::imageops::resize(&small, 3840, 2688, image::imageops::FilterType::Triangle);
    let a = m.detect(&small).unwrap();
    let found = m.search(&big).unwrap();
    assert_eq!(a.len(), 8);
    assert!(
        found.passes() > 4,
        "the big photo is also searched in tiles"
    );
    // Every face of the small photo is found in the big one, in the big one's pixels
    // (3× the small one's; a tile sees the face at full size, so its box differs by a
    // few small-photo pixels); tiles may add at most one more box.
    for s in &a {
        let l = found
            .faces
            .iter()
            .find(|l| (0..4).all(|k| (l.bbox[k] / 3.0 - s.bbox[k]).abs() < 20.0))
            .unwrap_or_else(|| panic!("{s:?} not found in {:?}", found.faces));
        assert!(l.bbox[2] <= 3840.0 && l.bbox[3] <= 2688.0);
    }
    assert!(found.faces.len() <= 9, "{:?}", found.faces);
}

#[test]
fn turned_and_tilted_faces_are_found() {
    let m = models(DetectorKind::Yunet);
    let comp = photo("composite_pd_1280x896.jpg");
    let upright = m.detect(&comp).unwrap().len();
    for turned in [
        image::imageops::rotate90(&comp),
        image::imageops::rotate180(&comp),
        image::imageops::rotate270(&comp),
    ] {
        let single = m.detect_once(&turned).unwrap().len();
        let searched = m.detect(&turned).unwrap().len();
        assert!(
            (upright..=upright + 1).contains(&searched),
            "a turned photo finds what the upright one does: {searched} vs {upright}"
        );
        assert!(
            single < upright,
            "one upright pass alone misses turned faces ({single})"
        );
    }
}

/// Each kind of pass runs only where its evidence calls for it: an upright photo costs
/// the upright pass and three quarter-size probes, and no second looks; a turned one gets
/// the full pass at the turn that shows it upright, and finds what the upright photo does.
/// `Every` (the baseline) makes all of them.
#[test]
fn passes_run_where_the_evidence_calls_for_them() {
    use tessera_faces::search::{Pass, Thoroughness};
    let m = models(DetectorKind::Yunet);
    let comp = photo("composite_pd_1280x896.jpg");
    let runs = |f: &tessera_faces::search::Found, p: Pass| f.cost_of(p).runs;

    let upright = m.search(&comp).unwrap();
    assert_eq!(upright.faces.len(), 8);
    assert_eq!(runs(&upright, Pass::Upright), 1);
    assert_eq!(runs(&upright, Pass::TurnProbe), 3);
    assert_eq!(runs(&upright, Pass::Turn), 0, "no probe saw a turned face");
    assert_eq!(runs(&upright, Pass::Tile), 0);
    // Its faces of 26 and 42 px call for the two enlarged pieces that cover it.
    assert_eq!(runs(&upright, Pass::Enlarged), 2);
    assert_eq!(runs(&upright, Pass::SecondLook), 0);
    assert_eq!(upright.passes(), 6);
    // A portrait (one large face) makes no enlarged pass.
    let portrait = m.search(&photo("grace_hopper.jpg")).unwrap();
    assert_eq!(portrait.faces.len(), 1);
    assert_eq!(runs(&portrait, Pass::Enlarged), 0);

    let turned = m.search(&image::imageops::rotate90(&comp)).unwrap();
    // As in `turned_and_tilted_faces_are_found`: the eight, and at most one spurious box
    // of the upright pass.
    assert!((8..=9).contains(&turned.faces.len()), "{:?}", turned.faces);
    assert!(
        (1..=2).contains(&runs(&turned, Pass::Turn)),
        "the turn that shows the photo upright is searched in full: {:?}",
        turned.cost
    );

    let every = m.search_with(&comp, Thoroughness::Every).unwrap();
    assert_eq!(every.faces.len(), 8);
    assert_eq!(runs(&every, Pass::Turn), 3);
    assert_eq!(runs(&every, Pass::TurnProbe), 0);
    assert_eq!(
        runs(&every, Pass::Enlarged),
        2 * 4,
        "each piece at each turn"
    );
    assert_eq!(runs(&every, Pass::SecondLook), 3 * 8);
    assert!(every.views.iter().all(|v| !v.is_empty()));
}
