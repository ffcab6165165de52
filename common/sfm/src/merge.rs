//! Joining the models of a split run's clusters into one: each cluster was mapped from
//! the same feature database, so a photo has the same image id, the same camera and the
//! same keypoints in every cluster that holds it. Two clusters are aligned through what
//! they share: the 3D points seen by the same keypoint of a shared photo (many, spread
//! over the scene), fitted robustly, and checked against the shared photos' camera
//! centres.
//!
//! The largest cluster is the frame; the others are joined one at a time, the one
//! sharing the most photos with what is joined so far first. A cluster that shares too
//! few photos, or whose fit the shared cameras contradict, is never forced in: it is
//! returned apart, with why, for the caller to keep as a sub-model.
//!
//! The joined model keeps poses and cameras only: its points are cleared for the engine
//! to triangulate again from the database with the poses held, which gives one track
//! per physical point instead of one per cluster.

use crate::align::{Sim3, distance, matmul, transpose};
use crate::model::{NO_POINT, Reconstruction, rotation};
use std::collections::{BTreeSet, HashMap};

/// Shared photos a join needs: three camera centres fix a similarity, and with fewer
/// the points of one or two photos decide it alone.
pub const MIN_SHARED_PHOTOS: usize = 3;
/// Shared 3D points a join needs.
pub const MIN_SHARED_POINTS: usize = 12;
/// The largest median distance, after the fit, between a shared photo's camera centre
/// in the joined model and in the cluster, as a share of the cluster's extent (the
/// median distance of its cameras from their centroid). Clusters of a few photos,
/// each mapped alone, differ in shape by several per cent (8 % on the sample's clusters
/// of seven); the triangulation and bundle adjustment after the join close that. A
/// wrong join is off by the size of the model.
pub const MAX_CENTRE_DISAGREEMENT: f64 = 0.10;
/// The largest median angle, after the fit, between a shared photo's orientation in the
/// joined model and in the cluster.
pub const MAX_TURN_DEG: f64 = 5.0;

/// One cluster joined.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Joined {
    /// The cluster's index.
    pub cluster: usize,
    /// Photos it shared with the model so far.
    pub shared_photos: usize,
    /// Shared 3D points the fit kept, of those found.
    pub points_kept: usize,
    /// Shared 3D points found.
    pub points_found: usize,
    /// Photos it brought.
    pub added_photos: usize,
    /// Median camera-centre disagreement of the shared photos after the fit, as a share
    /// of the model's extent.
    pub centre_disagreement: f64,
    /// The fitted scale.
    pub scale: f64,
}

/// One cluster left apart, and why.
#[derive(Debug, Clone)]
pub struct Apart {
    /// The cluster's index.
    pub cluster: usize,
    /// Its model, unchanged.
    pub model: Reconstruction,
    /// Why it was not joined, in a sentence.
    pub why: String,
}

/// The outcome of a merge.
#[derive(Debug, Clone)]
pub struct Merged {
    /// Poses and cameras of every joined cluster, in the frame of `base`; no points.
    pub model: Reconstruction,
    /// The cluster whose frame the model is in.
    pub base: usize,
    /// The clusters joined to it, in the order they were.
    pub joined: Vec<Joined>,
    /// The clusters that could not be.
    pub apart: Vec<Apart>,
}

/// Join `clusters` (index, model). `None` when no cluster registered any photo.
pub fn merge(mut clusters: Vec<(usize, Reconstruction)>) -> Option<Merged> {
    clusters.retain(|(_, m)| !m.images.is_empty());
    clusters.sort_by(|a, b| b.1.images.len().cmp(&a.1.images.len()).then(a.0.cmp(&b.0)));
    let mut rest = clusters.into_iter();
    let (base, mut model) = rest.next()?;
    let mut pending: Vec<(usize, Reconstruction)> = rest.collect();
    let mut joined = Vec::new();
    let mut apart = Vec::new();
    let mut next_point = model.points.keys().max().map_or(0, |k| k + 1);
    // The cluster sharing the most photos with what is joined so far, each time.
    while let Some(pos) = (0..pending.len()).max_by_key(|&i| {
        (
            shared_ids(&model, &pending[i].1).len(),
            std::cmp::Reverse(pending[i].0),
        )
    }) {
        let shared = shared_ids(&model, &pending[pos].1);
        if shared.len() < MIN_SHARED_PHOTOS {
            break;
        }
        let (idx, mut part) = pending.swap_remove(pos);
        match fit(&model, &part, &shared) {
            Ok(fitted) => {
                fitted.sim3.transform(&mut part);
                let added = add(&mut model, part, &shared, &mut next_point);
                joined.push(Joined {
                    cluster: idx,
                    shared_photos: shared.len(),
                    points_kept: fitted.kept,
                    points_found: fitted.found,
                    added_photos: added,
                    centre_disagreement: fitted.disagreement,
                    scale: fitted.sim3.scale,
                });
            }
            Err(why) => apart.push(Apart {
                cluster: idx,
                model: part,
                why,
            }),
        }
    }
    for (idx, part) in pending {
        let n = shared_ids(&model, &part).len();
        apart.push(Apart {
            cluster: idx,
            model: part,
            why: format!(
                "it shares {n} registered photos with the joined clusters ({MIN_SHARED_PHOTOS} needed)"
            ),
        });
    }
    apart.sort_by_key(|a| a.cluster);
    // Points are triangulated again from the database with the poses held.
    model.points.clear();
    for img in model.images.values_mut() {
        for p in &mut img.points2d {
            p.point3d_id = NO_POINT;
        }
    }
    Some(Merged {
        model,
        base,
        joined,
        apart,
    })
}

/// Image ids registered in both, where both name the same photo.
fn shared_ids(a: &Reconstruction, b: &Reconstruction) -> Vec<u32> {
    b.images
        .iter()
        .filter(|(id, img)| a.images.get(id).is_some_and(|x| x.name == img.name))
        .map(|(id, _)| *id)
        .collect()
}

struct Fitted {
    sim3: Sim3,
    found: usize,
    kept: usize,
    disagreement: f64,
}

/// The similarity carrying `part` onto `model`: fitted on the 3D points both saw through
/// the same keypoint of a shared photo, trimmed of those far off the fit three times,
/// then checked against the shared photos' camera centres.
fn fit(model: &Reconstruction, part: &Reconstruction, shared: &[u32]) -> Result<Fitted, String> {
    let mut seen = BTreeSet::new();
    let (mut from, mut to) = (Vec::new(), Vec::new());
    for id in shared {
        let (a, b) = (&model.images[id], &part.images[id]);
        for (pa, pb) in a.points2d.iter().zip(&b.points2d) {
            if pa.point3d_id == NO_POINT || pb.point3d_id == NO_POINT {
                continue;
            }
            let (Some(xa), Some(xb)) = (
                model.points.get(&pa.point3d_id),
                part.points.get(&pb.point3d_id),
            ) else {
                continue;
            };
            if seen.insert((pa.point3d_id, pb.point3d_id)) {
                from.push(xb.xyz);
                to.push(xa.xyz);
            }
        }
    }
    let found = from.len();
    if found < MIN_SHARED_POINTS {
        return Err(format!(
            "its {} shared photos see {found} points in common with the joined clusters ({MIN_SHARED_POINTS} needed)",
            shared.len()
        ));
    }
    // Fit, drop the points far off it, fit again: three rounds at most. `used` is the
    // set the final fit was made on.
    let mut used: Vec<usize> = (0..found).collect();
    let mut sim3;
    let mut round = 0;
    loop {
        let f: Vec<_> = used.iter().map(|&i| from[i]).collect();
        let t: Vec<_> = used.iter().map(|&i| to[i]).collect();
        sim3 =
            Sim3::fit(&f, &t).ok_or("its shared points lie on a line: no similarity is fixed")?;
        round += 1;
        let residual: Vec<f64> = (0..found)
            .map(|i| distance(sim3.apply(from[i]), to[i]))
            .collect();
        let mut used_residuals: Vec<f64> = used.iter().map(|&i| residual[i]).collect();
        let cut = 3.0 * median(&mut used_residuals).max(f64::EPSILON);
        let next: Vec<usize> = (0..found).filter(|&i| residual[i] <= cut).collect();
        if round == 3 || next.len() < MIN_SHARED_POINTS || next == used {
            break;
        }
        used = next;
    }
    // Measured against the cluster's own size, not the joined model's, which grows with
    // every join and would let a late cluster be further off.
    let moved: Vec<[f64; 3]> = part
        .images
        .values()
        .map(|i| sim3.apply(i.center()))
        .collect();
    let own_extent = spread(&moved);
    let mut errors: Vec<f64> = shared
        .iter()
        .map(|id| {
            distance(
                sim3.apply(part.images[id].center()),
                model.images[id].center(),
            )
        })
        .collect();
    let disagreement = median(&mut errors) / own_extent.max(f64::EPSILON);
    // NaN (no extent) fails too.
    if disagreement.is_nan() || disagreement > MAX_CENTRE_DISAGREEMENT {
        return Err(format!(
            "after the fit its shared photos' cameras stand {:.1} % of its extent from where the joined clusters have them (at most {:.0} %)",
            disagreement * 100.0,
            MAX_CENTRE_DISAGREEMENT * 100.0
        ));
    }
    // Centres on one flight line leave a turn about that line unseen: the shared
    // cameras must also look the same way in both.
    let mut turns: Vec<f64> = shared
        .iter()
        .map(|id| {
            let after = matmul(&rotation(part.images[id].qvec), &transpose(&sim3.rotation));
            angle_between(&rotation(model.images[id].qvec), &after)
        })
        .collect();
    let turn = median(&mut turns);
    if turn.is_nan() || turn > MAX_TURN_DEG {
        return Err(format!(
            "after the fit its shared photos' cameras look {turn:.1}° away from where the joined clusters have them look (at most {MAX_TURN_DEG:.0}°)"
        ));
    }
    Ok(Fitted {
        sim3,
        found,
        kept: used.len(),
        disagreement,
    })
}

/// The angle, in degrees, of the rotation that carries `b` onto `a`.
fn angle_between(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> f64 {
    let r = matmul(a, &transpose(b));
    let cos = ((r[0][0] + r[1][1] + r[2][2] - 1.0) / 2.0).clamp(-1.0, 1.0);
    cos.acos().to_degrees()
}

/// The median distance of camera centres from their centroid.
fn spread(centres: &[[f64; 3]]) -> f64 {
    let n = centres.len().max(1) as f64;
    let mut c = [0.0; 3];
    for p in centres {
        for k in 0..3 {
            c[k] += p[k] / n;
        }
    }
    let mut d: Vec<f64> = centres.iter().map(|p| distance(*p, c)).collect();
    median(&mut d)
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Add `part`'s photos that `model` lacks, their cameras and the points they see (new
/// ids; observations in photos the model already holds are dropped, as those keep the
/// model's own points). Returns the photos added.
fn add(
    model: &mut Reconstruction,
    mut part: Reconstruction,
    shared: &[u32],
    next_point: &mut u64,
) -> usize {
    let shared: BTreeSet<u32> = shared.iter().copied().collect();
    let new_ids: BTreeSet<u32> = part
        .images
        .keys()
        .filter(|id| !model.images.contains_key(id) && !shared.contains(id))
        .copied()
        .collect();
    let mut renumber = HashMap::new();
    for (id, mut point) in std::mem::take(&mut part.points) {
        point.track.retain(|o| new_ids.contains(&o.image_id));
        if point.track.is_empty() {
            continue;
        }
        point.id = *next_point;
        renumber.insert(id, *next_point);
        model.points.insert(*next_point, point);
        *next_point += 1;
    }
    for id in &new_ids {
        let mut img = part.images.remove(id).expect("listed above");
        for p in &mut img.points2d {
            p.point3d_id = renumber.get(&p.point3d_id).copied().unwrap_or(NO_POINT);
        }
        if let Some(cam) = part.cameras.get(&img.camera_id) {
            model
                .cameras
                .entry(img.camera_id)
                .or_insert_with(|| cam.clone());
        }
        model.images.insert(*id, img);
    }
    new_ids.len()
}

#[cfg(test)]
mod tests;
