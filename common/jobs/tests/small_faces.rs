//! Faces too small for the detector at native resolution are found by the enlarged pass
//! near the small faces it did find (issue 22: 24 px faces in a 12-megapixel photo were
//! found about half of the time, and the ones missed stayed recognisable), and a photo
//! with no small face pays nothing for it. On the real models, with scenes made from the
//! shared portraits as `tessera bench privacy` makes them.

mod support;

use support::{models, shared};
use tessera_core::geometry::FracRect;
use tessera_faces::search::Pass;
use tessera_jobs::photos::scenes::{self, Portrait, SceneSpec, Stored};
use tessera_jobs::photos::trial;

fn people() -> Vec<Portrait> {
    ["grace_hopper.jpg", "astronaut.png", "camera.png"]
        .iter()
        .map(|f| {
            let pixels = image::open(shared().join("testdata/faces").join(f))
                .unwrap()
                .to_rgb8();
            trial::portrait(&models(), pixels, false).unwrap()
        })
        .collect()
}

fn background() -> image::RgbImage {
    image::open(shared().join("testdata/faces/negatives/coffee.png"))
        .unwrap()
        .to_rgb8()
}

/// A found box covers a true face: overlapping it, or holding its centre.
fn covers(found: &FracRect, truth: &FracRect) -> bool {
    let (cx, cy) = (truth.x + truth.w / 2.0, truth.y + truth.h / 2.0);
    found.iou(truth) > 0.2
        || (cx > found.x && cx < found.x + found.w && cy > found.y && cy < found.y + found.h)
}

/// Faces of `scene` found by the product's search, of how many.
fn found_in(scene: &scenes::Scene) -> (usize, usize, tessera_faces::search::Found) {
    let img = tessera_imaging::decode("scene.jpg", &scene.jpeg)
        .unwrap()
        .rgb;
    let (w, h) = img.dimensions();
    let found = models().search(&img).unwrap();
    let boxes: Vec<FracRect> = found
        .faces
        .iter()
        .map(|d| FracRect::from_pixels(d.bbox, w, h))
        .collect();
    let hits = scene
        .faces
        .iter()
        .filter(|(_, truth)| boxes.iter().any(|b| covers(b, truth)))
        .count();
    (hits, scene.faces.len(), found)
}

/// A 12-megapixel group photo of twelve faces of `face_px`, the three people in turn.
fn group_photo(
    people: &[Portrait],
    bg: &image::RgbImage,
    face_px: u32,
    stored: Stored,
    seed: u64,
) -> scenes::Scene {
    scenes::make(
        people,
        bg,
        &SceneSpec {
            width: 4000,
            height: 3000,
            face_px,
            face_px_max: 0,
            tilt_deg: 0.0,
            people: (0..12).map(|i| i % 3).collect(),
            stored,
            seed,
        },
    )
}

#[test]
fn faces_of_24_px_in_a_12_megapixel_photo_are_found() {
    let people = people();
    let bg = background();
    let (mut hits, mut faces) = (0, 0);
    for seed in [1, 2] {
        let scene = group_photo(&people, &bg, 24, Stored::Upright, seed);
        let (h, n, found) = found_in(&scene);
        assert!(
            found.cost_of(Pass::Enlarged).runs > 0,
            "the small faces found call for the enlarged pass: {:?}",
            found.cost
        );
        hits += h;
        faces += n;
    }
    // At native resolution alone, 6–7 of 12 a photo (measured on the bench's scenes).
    assert!(
        hits * 10 >= faces * 9,
        "{hits} of {faces} faces of 24 px found"
    );
}

#[test]
fn a_photo_with_no_small_face_makes_no_enlarged_pass() {
    let scene = scenes::make(
        &people(),
        &background(),
        &SceneSpec {
            width: 1600,
            height: 1200,
            face_px: 120,
            face_px_max: 0,
            tilt_deg: 0.0,
            people: vec![0, 1, 2],
            stored: Stored::Upright,
            seed: 3,
        },
    );
    let (hits, faces, found) = found_in(&scene);
    assert_eq!(hits, faces);
    assert_eq!(found.cost_of(Pass::Enlarged).runs, 0, "{:?}", found.cost);
}

/// A 12-megapixel group photo stored turned with no tag, its faces 40 px: scaled to the
/// detector's input they are 19 px and sideways, so only the tiles at the turn that shows
/// them upright find them, and that turn is searched only when its probe sees a face.
/// Probed at 960 px (faces under 10 px) most such photos lost every face (`tessera bench
/// privacy --only "untagged quarter turn, 40"`: recall 0.29, every pass 1.00); probed at
/// 1920 px (19 px), scenes 4 and 6 here still did. At
/// [`tessera_faces::search::LARGE_PROBE_SCALE`] every face of every scene is found.
#[test]
fn faces_of_40_px_in_a_turned_12_megapixel_photo_are_found() {
    let people = people();
    let bg = background();
    for seed in 1..=6 {
        let scene = group_photo(&people, &bg, 40, Stored::Untagged(6), seed);
        let (hits, faces, found) = found_in(&scene);
        assert_eq!(
            hits, faces,
            "scene {seed}: {hits} of {faces} turned faces of 40 px found ({:?})",
            found.cost
        );
    }
}
