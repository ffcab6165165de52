//! Model metrics computed natively: what `colmap model_analyzer` reports, with the
//! reprojection error recomputed by projecting every observation through its camera.

use crate::camera::Project;
use crate::model::Reconstruction;
use serde::{Deserialize, Serialize};

/// Figures of one sparse model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMetrics {
    /// Cameras.
    pub cameras: usize,
    /// Registered images.
    pub registered_images: usize,
    /// 3D points.
    pub points: usize,
    /// Observations (sum of track lengths).
    pub observations: usize,
    /// Mean track length.
    pub mean_track_length: f64,
    /// Mean observations per registered image.
    pub mean_observations_per_image: f64,
    /// Mean over points of the mean reprojection error of their track, in pixels,
    /// recomputed from the poses, cameras and keypoints.
    pub mean_reprojection_error: f64,
    /// The same mean from the errors COLMAP stored with the points.
    pub stored_mean_reprojection_error: f64,
}

/// Compute the metrics of `rec`.
pub fn compute(rec: &Reconstruction) -> ModelMetrics {
    let observations: usize = rec.points.values().map(|p| p.track.len()).sum();
    let mut err_sum = 0.0;
    let mut err_n = 0usize;
    for p in rec.points.values() {
        let mut sum = 0.0;
        let mut n = 0usize;
        for o in &p.track {
            let Some(img) = rec.images.get(&o.image_id) else {
                continue;
            };
            let Some(cam) = rec.cameras.get(&img.camera_id) else {
                continue;
            };
            let Some(kp) = img.points2d.get(o.point2d_idx as usize) else {
                continue;
            };
            if let Some(px) = cam.model.project(&cam.params, img.to_camera(p.xyz)) {
                sum += ((px[0] - kp.xy[0]).powi(2) + (px[1] - kp.xy[1]).powi(2)).sqrt();
                n += 1;
            }
        }
        if n > 0 {
            err_sum += sum / n as f64;
            err_n += 1;
        }
    }
    let stored: Vec<f64> = rec
        .points
        .values()
        .map(|p| p.error)
        .filter(|e| *e >= 0.0)
        .collect();
    let ratio = |a: f64, b: usize| if b == 0 { 0.0 } else { a / b as f64 };
    ModelMetrics {
        cameras: rec.cameras.len(),
        registered_images: rec.images.len(),
        points: rec.points.len(),
        observations,
        mean_track_length: ratio(observations as f64, rec.points.len()),
        mean_observations_per_image: ratio(observations as f64, rec.images.len()),
        mean_reprojection_error: ratio(err_sum, err_n),
        stored_mean_reprojection_error: ratio(stored.iter().sum(), stored.len()),
    }
}
