//! Model files: round trips, hostile and damaged input, and exports read back by an
//! independent reader.

use tessera_sfm::camera::{CameraModel, Project};
use tessera_sfm::model::{Camera, Image, NO_POINT, Observation, Point2D, Point3D, Reconstruction};
use tessera_sfm::{ModelError, export, metrics, model_bin, model_text};

/// A small consistent model: two cameras looking at points in front of them.
fn model() -> Reconstruction {
    let mut r = Reconstruction::default();
    r.cameras.insert(
        1,
        Camera {
            id: 1,
            model: CameraModel::SimpleRadial,
            width: 800,
            height: 600,
            params: vec![600.0, 400.0, 300.0, 0.01],
        },
    );
    r.cameras.insert(
        2,
        Camera {
            id: 2,
            model: CameraModel::Opencv,
            width: 640,
            height: 480,
            params: vec![500.0, 505.0, 320.0, 240.0, 0.01, -0.002, 0.0001, 0.0002],
        },
    );
    let poses = [
        (1u32, [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0], 1u32),
        (2, [0.9998, 0.0, 0.02, 0.0], [-1.0, 0.0, 0.0], 2),
    ];
    for (id, q, t, cam) in poses {
        r.images.insert(
            id,
            Image {
                id,
                qvec: q,
                tvec: t,
                camera_id: cam,
                name: format!("img {id}.jpg"),
                points2d: Vec::new(),
            },
        );
    }
    for pid in 0..50u64 {
        let xyz = [
            (pid % 7) as f64 * 0.3 - 1.0,
            (pid % 5) as f64 * 0.2 - 0.5,
            5.0 + (pid % 3) as f64,
        ];
        let mut track = Vec::new();
        for iid in [1u32, 2] {
            let img = r.images.get(&iid).unwrap().clone();
            let cam = &r.cameras[&img.camera_id];
            let mut px = cam.model.project(&cam.params, img.to_camera(xyz)).unwrap();
            px[0] += 0.5 * ((pid as f64) * 0.37).sin();
            let img = r.images.get_mut(&iid).unwrap();
            track.push(Observation {
                image_id: iid,
                point2d_idx: img.points2d.len() as u32,
            });
            img.points2d.push(Point2D {
                xy: px,
                point3d_id: pid + 100,
            });
            img.points2d.push(Point2D {
                xy: [1.0, 2.0],
                point3d_id: NO_POINT,
            });
        }
        r.points.insert(
            pid + 100,
            Point3D {
                id: pid + 100,
                xyz,
                rgb: [pid as u8, 2, 3],
                error: 0.25,
                track,
            },
        );
    }
    r.validate().unwrap();
    r
}

#[test]
fn binary_and_text_round_trip_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let m = model();
    model_bin::write(&m, &dir.path().join("bin")).unwrap();
    assert_eq!(model_bin::read(&dir.path().join("bin")).unwrap(), m);
    model_text::write(&m, &dir.path().join("txt")).unwrap();
    assert_eq!(model_text::read(&dir.path().join("txt")).unwrap(), m);
}

#[test]
fn reprojection_error_is_computed_by_projection() {
    let m = metrics::compute(&model());
    assert_eq!(
        (m.registered_images, m.points, m.observations),
        (2, 50, 100)
    );
    assert!((m.mean_track_length - 2.0).abs() < 1e-12);
    // Every observation of point k was moved by |0.5 sin(0.37 k)| pixels along x.
    let expected: f64 = (0..50)
        .map(|k| (0.5 * (k as f64 * 0.37).sin()).abs())
        .sum::<f64>()
        / 50.0;
    assert!(
        (m.mean_reprojection_error - expected).abs() < 1e-9,
        "{} vs {expected}",
        m.mean_reprojection_error
    );
    assert!((m.stored_mean_reprojection_error - 0.25).abs() < 1e-12);
}

#[test]
fn truncated_garbage_and_hostile_files_are_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    model_bin::write(&model(), d).unwrap();
    let points = std::fs::read(d.join("points3D.bin")).unwrap();
    std::fs::write(d.join("points3D.bin"), &points[..points.len() - 7]).unwrap();
    let e = model_bin::read(d).unwrap_err();
    assert!(
        matches!(e, ModelError::Corrupt { .. }) && e.to_string().contains("points3D.bin"),
        "{e}"
    );

    // A count of 2^60 cameras must not allocate; it is simply impossible.
    let mut hostile = (1u64 << 60).to_le_bytes().to_vec();
    hostile.extend([0u8; 40]);
    std::fs::write(d.join("cameras.bin"), hostile).unwrap();
    assert!(
        model_bin::read(d)
            .unwrap_err()
            .to_string()
            .contains("claims"),
        "hostile counts are refused"
    );

    std::fs::write(d.join("cameras.bin"), b"").unwrap();
    assert!(model_bin::read(d).is_err());
    std::fs::remove_file(d.join("cameras.bin")).unwrap();
    assert!(matches!(model_bin::read(d), Err(ModelError::Io { .. })));

    model_text::write(&model(), d).unwrap();
    std::fs::write(d.join("cameras.txt"), "1 NOT_A_MODEL 10 10 1 2 3\n").unwrap();
    assert!(
        model_text::read(d)
            .unwrap_err()
            .to_string()
            .contains("unknown camera model NOT_A_MODEL")
    );

    // A track naming an image that is not there is inconsistent, not silently accepted.
    let mut m = model();
    m.points.get_mut(&100).unwrap().track.push(Observation {
        image_id: 99,
        point2d_idx: 0,
    });
    model_bin::write(&m, d).unwrap();
    assert!(matches!(
        model_bin::read(d),
        Err(ModelError::Inconsistent(_))
    ));
}

#[test]
fn ply_is_read_back_by_an_independent_reader() {
    use ply_rs::parser::Parser;
    use ply_rs::ply::{DefaultElement, Property};
    let m = model();
    let bytes = export::ply_bytes(&m);
    let ply = Parser::<DefaultElement>::new()
        .read_ply(&mut std::io::Cursor::new(bytes))
        .unwrap();
    let vertices = &ply.payload["vertex"];
    assert_eq!(vertices.len(), m.points.len());
    for (v, p) in vertices.iter().zip(m.points.values()) {
        let Property::Float(x) = v["x"] else {
            panic!("x is a float")
        };
        let Property::UChar(r) = v["red"] else {
            panic!("red is a uchar")
        };
        assert!((x as f64 - p.xyz[0]).abs() < 1e-5);
        assert_eq!(r, p.rgb[0]);
    }
}

#[test]
fn points_bin_has_the_sfmapi_layout() {
    let m = model();
    let b = export::points_bin_bytes(&m);
    assert_eq!(
        b.len(),
        export::POINTS_HEADER + m.points.len() * export::POINTS_RECORD
    );
    assert_eq!(&b[..8], export::POINTS_MAGIC);
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 1);
    assert_eq!(u64::from_le_bytes(b[12..20].try_into().unwrap()), 50);
    let mut last = None;
    for i in 0..50 {
        let r = &b[export::POINTS_HEADER + i * export::POINTS_RECORD..][..export::POINTS_RECORD];
        let id = u64::from_le_bytes(r[18..26].try_into().unwrap());
        assert!(last.is_none_or(|l| id > l), "records ascend by point id");
        last = Some(id);
        let p = &m.points[&id];
        assert_eq!(
            f32::from_le_bytes(r[0..4].try_into().unwrap()),
            p.xyz[0] as f32
        );
        assert_eq!(&r[12..15], &p.rgb);
        assert_eq!(u16::from_le_bytes(r[16..18].try_into().unwrap()), 2);
    }
    let min_x = f32::from_le_bytes(b[20..24].try_into().unwrap());
    assert_eq!(min_x, -1.0);
}

#[test]
fn nvm_lists_every_camera_and_point() {
    let text = export::nvm_text(&model());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "NVM_V3");
    assert_eq!(lines[2], "2");
    assert!(lines[3].starts_with("img 1.jpg 600 "));
    assert_eq!(lines[5], "50");
    assert_eq!(lines[6].split_whitespace().count(), 7 + 2 * 4);
}

mod fuzzed {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// A valid model with bytes flipped, cut short or grown in any of its three
        /// files reads back or is refused naming the file; it never panics or allocates
        /// what the file claims without the bytes to back it.
        #[test]
        fn a_damaged_model_is_read_or_refused(file in 0usize..3, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..12), cut in any::<Option<usize>>()) {
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path();
            model_bin::write(&model(), d).unwrap();
            let name = ["cameras.bin", "images.bin", "points3D.bin"][file];
            let mut bytes = std::fs::read(d.join(name)).unwrap();
            for (at, b) in flips {
                let i = at % bytes.len();
                bytes[i] = b;
            }
            if let Some(c) = cut {
                bytes.truncate(c % (bytes.len() + 1));
            }
            std::fs::write(d.join(name), &bytes).unwrap();
            match model_bin::read(d) {
                Ok(rec) => { let _ = rec.validate(); }
                // A damaged file is named; a model whose files disagree says what.
                Err(e @ ModelError::Corrupt { .. }) => prop_assert!(e.to_string().contains(".bin"), "{e}"),
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}

#[test]
fn removing_images_keeps_the_points_two_others_still_see() {
    let mut r = model();
    // A third image that sees the first 25 points as image 2 does.
    let mut third = r.images[&2].clone();
    third.id = 3;
    third.name = "img 3.jpg".into();
    for (k, p) in third.points2d.iter().enumerate() {
        if p.point3d_id != NO_POINT && p.point3d_id < 125 {
            r.points
                .get_mut(&p.point3d_id)
                .unwrap()
                .track
                .push(Observation {
                    image_id: 3,
                    point2d_idx: k as u32,
                });
        }
    }
    for p in third.points2d.iter_mut().filter(|p| p.point3d_id >= 125) {
        p.point3d_id = NO_POINT;
    }
    r.images.insert(3, third);
    r.validate().unwrap();

    r.remove_images(&[2].into());
    r.validate().unwrap();
    assert_eq!(r.images.keys().copied().collect::<Vec<_>>(), [1, 3]);
    assert_eq!(r.points.len(), 25, "the points image 1 alone saw are gone");
    assert!(r.points.values().all(|p| p.track.len() == 2));
    let seen = r.images[&1]
        .points2d
        .iter()
        .filter(|p| p.point3d_id != NO_POINT)
        .count();
    assert_eq!(
        seen, 25,
        "image 1's keypoints of the dropped points are released"
    );
    assert_eq!(r.cameras.len(), 2);

    r.remove_images(&[1].into());
    r.validate().unwrap();
    assert!(r.points.is_empty());
    assert!(
        r.images[&3]
            .points2d
            .iter()
            .all(|p| p.point3d_id == NO_POINT)
    );
}
