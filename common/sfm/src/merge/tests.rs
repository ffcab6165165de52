use super::*;
use crate::align::Sim3;
use crate::model::{Camera, Image, Observation, Point2D, Point3D, rotation};
use tessera_core::camera::CameraModel;

/// Twelve cameras over a 4 × 3 grid, 10 m up, and 300 ground points; each camera
/// sees the points within 5 m of it, its keypoints in point order.
fn world() -> Reconstruction {
    let mut rec = Reconstruction::default();
    rec.cameras.insert(
        1,
        Camera {
            id: 1,
            model: CameraModel::SimplePinhole,
            width: 1000,
            height: 800,
            params: vec![800.0, 500.0, 400.0],
        },
    );
    let mut seed = 7u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    for id in 0..300u64 {
        rec.points.insert(
            id,
            Point3D {
                id,
                xyz: [-2.0 + 13.0 * next(), -2.0 + 10.0 * next(), next() - 0.5],
                rgb: [0; 3],
                error: 0.5,
                track: Vec::new(),
            },
        );
    }
    for i in 0..12u32 {
        let c = [f64::from(i % 4) * 3.0, f64::from(i / 4) * 3.0, 10.0];
        let id = i + 1;
        let mut points2d = Vec::new();
        for p in rec.points.values_mut() {
            if (p.xyz[0] - c[0]).hypot(p.xyz[1] - c[1]) < 5.0 {
                p.track.push(Observation {
                    image_id: id,
                    point2d_idx: points2d.len() as u32,
                });
                points2d.push(Point2D {
                    xy: [0.0, 0.0],
                    point3d_id: p.id,
                });
            }
        }
        rec.images.insert(
            id,
            Image {
                id,
                qvec: [1.0, 0.0, 0.0, 0.0],
                tvec: [-c[0], -c[1], -c[2]],
                camera_id: 1,
                name: format!("IMG_{id:04}.jpg"),
                points2d,
            },
        );
    }
    rec
}

/// The cluster of `ids` as its own mapping would have it: only its photos, the points
/// two of them see (numbered from `offset`), in a frame of its own (`frame`).
fn cluster(
    world: &Reconstruction,
    ids: &[u32],
    offset: u64,
    frame: Option<Sim3>,
) -> Reconstruction {
    let mut rec = Reconstruction {
        cameras: world.cameras.clone(),
        ..Default::default()
    };
    for p in world.points.values() {
        let track: Vec<_> = p
            .track
            .iter()
            .filter(|o| ids.contains(&o.image_id))
            .copied()
            .collect();
        if track.len() >= 2 {
            rec.points.insert(
                p.id + offset,
                Point3D {
                    id: p.id + offset,
                    track,
                    ..p.clone()
                },
            );
        }
    }
    for id in ids {
        let mut img = world.images[id].clone();
        for p in &mut img.points2d {
            p.point3d_id = if rec.points.contains_key(&(p.point3d_id + offset)) {
                p.point3d_id + offset
            } else {
                NO_POINT
            };
        }
        rec.images.insert(*id, img);
    }
    if let Some(s) = frame {
        s.transform(&mut rec);
    }
    rec
}

fn elsewhere() -> Sim3 {
    let half = 50f64.to_radians() / 2.0;
    Sim3 {
        scale: 0.3,
        rotation: rotation([
            half.cos(),
            0.2 * half.sin(),
            0.9 * half.sin(),
            -0.4 * half.sin(),
        ]),
        translation: [40.0, -7.0, 3.0],
    }
}

#[test]
fn two_clusters_in_different_frames_join_in_the_largest_ones() {
    let world = world();
    let a = cluster(&world, &[1, 2, 3, 4, 5, 6, 7, 8], 0, None);
    let b = cluster(
        &world,
        &[5, 6, 7, 8, 9, 10, 11, 12],
        10_000,
        Some(elsewhere()),
    );
    let merged = merge(vec![(0, a), (1, b)]).unwrap();
    assert_eq!(merged.base, 0);
    assert!(
        merged.apart.is_empty(),
        "{:?}",
        merged.apart.iter().map(|a| &a.why).collect::<Vec<_>>()
    );
    assert_eq!(merged.joined.len(), 1);
    let j = &merged.joined[0];
    assert_eq!((j.cluster, j.shared_photos, j.added_photos), (1, 4, 4));
    assert!((j.scale - 1.0 / 0.3).abs() < 1e-6, "{j:?}");
    assert_eq!(merged.model.images.len(), 12);
    for (id, img) in &merged.model.images {
        let d = distance(img.center(), world.images[id].center());
        assert!(d < 1e-6, "photo {id} stands {d} m off");
    }
    // Poses and cameras only: the engine triangulates again.
    assert!(merged.model.points.is_empty());
    assert!(
        merged
            .model
            .images
            .values()
            .all(|i| i.points2d.iter().all(|p| p.point3d_id == NO_POINT))
    );
    assert!(merged.model.validate().is_ok());
}

#[test]
fn three_clusters_join_in_a_chain_and_one_that_shares_too_little_is_kept_apart() {
    let world = world();
    let a = cluster(&world, &[1, 2, 3, 4, 5], 0, None);
    let b = cluster(&world, &[3, 4, 5, 6, 7, 8], 10_000, Some(elsewhere()));
    let c = cluster(&world, &[6, 7, 8, 9, 10, 11, 12], 20_000, Some(elsewhere()));
    // Shares two photos only.
    let d = cluster(&world, &[11, 12], 30_000, None);
    let merged = merge(vec![(0, a), (1, b), (2, c), (3, d)]).unwrap();
    // The largest is the frame; a joins through b, which joins first.
    assert_eq!(merged.base, 2);
    let order: Vec<usize> = merged.joined.iter().map(|j| j.cluster).collect();
    assert_eq!(
        order,
        [1, 0],
        "{:?}",
        merged.apart.iter().map(|a| &a.why).collect::<Vec<_>>()
    );
    assert_eq!(merged.model.images.len(), 12);
    assert_eq!(merged.apart.len(), 1);
    assert_eq!(merged.apart[0].cluster, 3);
    assert!(
        merged.apart[0].why.contains("shares 2 registered photos"),
        "{}",
        merged.apart[0].why
    );
    assert_eq!(merged.apart[0].model.images.len(), 2, "kept as it was");
}

#[test]
fn a_cluster_whose_shared_cameras_contradict_its_points_is_not_forced_in() {
    let world = world();
    let a = cluster(&world, &[1, 2, 3, 4, 5, 6, 7, 8], 0, None);
    let mut b = cluster(&world, &[5, 6, 7, 8, 9, 10, 11, 12], 10_000, None);
    for id in [5, 6, 7, 8] {
        b.images.get_mut(&id).unwrap().tvec[0] -= 4.0;
    }
    let merged = merge(vec![(0, a), (1, b)]).unwrap();
    assert!(merged.joined.is_empty());
    assert_eq!(merged.apart.len(), 1);
    assert!(
        merged.apart[0].why.contains("cameras stand"),
        "{}",
        merged.apart[0].why
    );
    assert_eq!(merged.model.images.len(), 8);
}

#[test]
fn nothing_registered_merges_to_nothing() {
    assert!(merge(vec![(0, Reconstruction::default())]).is_none());
    assert!(merge(Vec::new()).is_none());
}

#[test]
fn a_cluster_whose_shared_cameras_look_another_way_is_not_forced_in() {
    // The shared photos stand where they should and see the same points, but each is
    // turned 20° about its own centre: on one flight line a centre check alone would
    // let a turn about that line through.
    let world = world();
    let a = cluster(&world, &[1, 2, 3, 4, 5, 6, 7, 8], 0, None);
    let mut b = cluster(&world, &[5, 6, 7, 8, 9, 10, 11, 12], 10_000, None);
    let half = 20f64.to_radians() / 2.0;
    let turn = rotation([half.cos(), half.sin(), 0.0, 0.0]);
    for id in [5, 6, 7, 8] {
        let img = b.images.get_mut(&id).unwrap();
        let centre = img.center();
        let r = rotation(img.qvec);
        let turned: [[f64; 3]; 3] =
            [0, 1, 2].map(|i| [0, 1, 2].map(|j| (0..3).map(|k| turn[i][k] * r[k][j]).sum()));
        img.qvec = crate::align::quaternion(&turned);
        img.tvec = [0, 1, 2].map(|i| -(0..3).map(|k| turned[i][k] * centre[k]).sum::<f64>());
    }
    let merged = merge(vec![(0, a), (1, b)]).unwrap();
    assert!(merged.joined.is_empty());
    assert!(
        merged.apart[0].why.contains("look"),
        "{}",
        merged.apart[0].why
    );
}
