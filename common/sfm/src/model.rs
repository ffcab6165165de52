//! A sparse reconstruction as COLMAP stores it: cameras, registered images with their
//! poses and keypoints, and 3D points with their tracks.

use crate::camera::CameraModel;
use crate::error::ModelError;
use std::collections::BTreeMap;

/// Marks a keypoint that is not part of any 3D point (COLMAP's `kInvalidPoint3DId`).
pub const NO_POINT: u64 = u64::MAX;

/// Intrinsics shared by images.
#[derive(Debug, Clone, PartialEq)]
pub struct Camera {
    /// Id.
    pub id: u32,
    /// Model.
    pub model: CameraModel,
    /// Width in pixels.
    pub width: u64,
    /// Height in pixels.
    pub height: u64,
    /// Parameters in the model's order.
    pub params: Vec<f64>,
}

/// One keypoint of an image.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point2D {
    /// Pixel coordinates (COLMAP convention: pixel centres at +0.5).
    pub xy: [f64; 2],
    /// The 3D point it observes, or [`NO_POINT`].
    pub point3d_id: u64,
}

/// A registered image.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// Id.
    pub id: u32,
    /// Rotation world → camera as a unit quaternion (w, x, y, z).
    pub qvec: [f64; 4],
    /// Translation world → camera.
    pub tvec: [f64; 3],
    /// Its camera.
    pub camera_id: u32,
    /// File name relative to the image folder.
    pub name: String,
    /// Keypoints.
    pub points2d: Vec<Point2D>,
}

/// One observation of a 3D point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// The image.
    pub image_id: u32,
    /// The keypoint index in that image.
    pub point2d_idx: u32,
}

/// A triangulated point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point3D {
    /// Id.
    pub id: u64,
    /// Position.
    pub xyz: [f64; 3],
    /// Colour.
    pub rgb: [u8; 3],
    /// Mean reprojection error COLMAP stored for it (pixels).
    pub error: f64,
    /// Observations.
    pub track: Vec<Observation>,
}

/// A whole sparse model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reconstruction {
    /// Cameras by id.
    pub cameras: BTreeMap<u32, Camera>,
    /// Images by id.
    pub images: BTreeMap<u32, Image>,
    /// Points by id.
    pub points: BTreeMap<u64, Point3D>,
}

/// Rotation matrix of a unit quaternion (w, x, y, z), normalised first.
pub fn rotation(q: [f64; 4]) -> [[f64; 3]; 3] {
    let n = (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
        .sqrt()
        .max(f64::MIN_POSITIVE);
    let (w, x, y, z) = (q[0] / n, q[1] / n, q[2] / n, q[3] / n);
    [
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y - w * z),
            2.0 * (x * z + w * y),
        ],
        [
            2.0 * (x * y + w * z),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z - w * x),
        ],
        [
            2.0 * (x * z - w * y),
            2.0 * (y * z + w * x),
            1.0 - 2.0 * (x * x + y * y),
        ],
    ]
}

impl Image {
    /// A world point in this image's camera frame.
    pub fn to_camera(&self, xw: [f64; 3]) -> [f64; 3] {
        let r = rotation(self.qvec);
        let mut out = self.tvec;
        for (i, row) in r.iter().enumerate() {
            out[i] += row[0] * xw[0] + row[1] * xw[1] + row[2] * xw[2];
        }
        out
    }

    /// The camera centre in world coordinates (−Rᵀt).
    pub fn center(&self) -> [f64; 3] {
        let r = rotation(self.qvec);
        let t = self.tvec;
        [
            -(r[0][0] * t[0] + r[1][0] * t[1] + r[2][0] * t[2]),
            -(r[0][1] * t[0] + r[1][1] * t[1] + r[2][1] * t[2]),
            -(r[0][2] * t[0] + r[1][2] * t[1] + r[2][2] * t[2]),
        ]
    }
}

impl Reconstruction {
    /// Take the images `ids` out of the model, as COLMAP deregisters a frame: their
    /// observations leave the tracks, and a point left with fewer than two (no longer
    /// triangulated by anything) goes too, releasing its keypoints in the other images.
    /// Cameras stay. What [`Reconstruction::validate`] checks still holds after.
    pub fn remove_images(&mut self, ids: &std::collections::BTreeSet<u32>) {
        self.images.retain(|id, _| !ids.contains(id));
        let mut orphaned = Vec::new();
        self.points.retain(|_, p| {
            p.track.retain(|o| !ids.contains(&o.image_id));
            let keep = p.track.len() >= 2;
            if !keep {
                orphaned.push((p.id, std::mem::take(&mut p.track)));
            }
            keep
        });
        for (point, track) in orphaned {
            for o in track {
                if let Some(k) = self
                    .images
                    .get_mut(&o.image_id)
                    .and_then(|img| img.points2d.get_mut(o.point2d_idx as usize))
                    && k.point3d_id == point
                {
                    k.point3d_id = NO_POINT;
                }
            }
        }
    }

    /// Check every reference: images name existing cameras with the right parameter
    /// count, tracks name existing images and keypoints, keypoints name existing points.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::Inconsistent(m));
        for c in self.cameras.values() {
            if c.params.len() != c.model.num_params() {
                return bad(format!(
                    "camera {} has {} parameters; {} needs {}",
                    c.id,
                    c.params.len(),
                    c.model.name(),
                    c.model.num_params()
                ));
            }
        }
        for img in self.images.values() {
            if !self.cameras.contains_key(&img.camera_id) {
                return bad(format!(
                    "image {} ({}) uses camera {}, which is not in the model",
                    img.id, img.name, img.camera_id
                ));
            }
            for (k, p) in img.points2d.iter().enumerate() {
                if p.point3d_id != NO_POINT && !self.points.contains_key(&p.point3d_id) {
                    return bad(format!(
                        "keypoint {k} of image {} observes point {}, which is not in the model",
                        img.id, p.point3d_id
                    ));
                }
            }
        }
        for p in self.points.values() {
            for o in &p.track {
                let Some(img) = self.images.get(&o.image_id) else {
                    return bad(format!(
                        "point {} is seen by image {}, which is not in the model",
                        p.id, o.image_id
                    ));
                };
                if o.point2d_idx as usize >= img.points2d.len() {
                    return bad(format!(
                        "point {} is seen by keypoint {} of image {}, which has {}",
                        p.id,
                        o.point2d_idx,
                        img.id,
                        img.points2d.len()
                    ));
                }
            }
        }
        Ok(())
    }
}
