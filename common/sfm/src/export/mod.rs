//! Exports of a sparse model: PLY (binary, coloured), NVM, and sfmapi's
//! `application/x-sfm-points-v1` fixed-stride binary points in the model's own frame;
//! LAS/LAZ ([`las`]) and camera GeoJSON ([`cameras_geojson`]) in an output CRS.

mod cameras_geojson;
mod las;

pub use cameras_geojson::cameras_geojson;
pub use las::las_bytes;

use crate::camera::CameraModel;
use crate::error::ModelError;
use crate::model::Reconstruction;
use crate::model_bin::atomic_write;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The PLY bytes: `binary_little_endian`, float x y z, uchar red green blue.
pub fn ply_bytes(rec: &Reconstruction) -> Vec<u8> {
    let header = format!(
        "ply\nformat binary_little_endian 1.0\ncomment written by tessera\nelement vertex {}\nproperty float x\nproperty float y\nproperty float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n",
        rec.points.len()
    );
    let mut b = Vec::with_capacity(header.len() + rec.points.len() * 15);
    b.extend(header.as_bytes());
    for p in rec.points.values() {
        for v in p.xyz {
            b.extend((v as f32).to_le_bytes());
        }
        b.extend(p.rgb);
    }
    b
}

/// Write the PLY file.
pub fn write_ply(rec: &Reconstruction, path: &Path) -> Result<(), ModelError> {
    atomic_write(path, &ply_bytes(rec))
}

/// Magic of the sfmapi binary points format.
pub const POINTS_MAGIC: &[u8; 8] = b"SFMP3D\0\0";
/// Header size of the sfmapi binary points format.
pub const POINTS_HEADER: usize = 44;
/// Record size of the sfmapi binary points format.
pub const POINTS_RECORD: usize = 26;

/// `application/x-sfm-points-v1`: a 44-byte header (magic, version 1, count, bounding
/// box) and 26-byte records sorted by point id, so byte ranges address point ranges.
pub fn points_bin_bytes(rec: &Reconstruction) -> Vec<u8> {
    let mut min = [f32::INFINITY; 3];
    let mut max = [f32::NEG_INFINITY; 3];
    for p in rec.points.values() {
        for k in 0..3 {
            min[k] = min[k].min(p.xyz[k] as f32);
            max[k] = max[k].max(p.xyz[k] as f32);
        }
    }
    if rec.points.is_empty() {
        min = [0.0; 3];
        max = [0.0; 3];
    }
    let mut b = Vec::with_capacity(POINTS_HEADER + rec.points.len() * POINTS_RECORD);
    b.extend(POINTS_MAGIC);
    b.extend(1u32.to_le_bytes());
    b.extend((rec.points.len() as u64).to_le_bytes());
    for v in min.iter().chain(&max) {
        b.extend(v.to_le_bytes());
    }
    // BTreeMap iteration is ascending by id, as the format requires.
    for p in rec.points.values() {
        for v in p.xyz {
            b.extend((v as f32).to_le_bytes());
        }
        b.extend(p.rgb);
        b.push(0);
        b.extend((p.track.len().min(u16::MAX as usize) as u16).to_le_bytes());
        b.extend(p.id.to_le_bytes());
    }
    b
}

/// Write the LAS file, or with `compressed` the LAZ file, of `rec` placed by `placement`.
pub fn write_las(
    rec: &Reconstruction,
    placement: &tessera_core::crs::EarthPlacement,
    compressed: bool,
    path: &Path,
) -> Result<(), ModelError> {
    las::write_las_file(rec, placement, compressed, path)
}

/// Write the camera GeoJSON of `rec` placed by `placement`.
pub fn write_cameras_geojson(
    rec: &Reconstruction,
    placement: &tessera_core::crs::EarthPlacement,
    path: &Path,
) -> Result<(), ModelError> {
    let v = cameras_geojson(rec, placement)?;
    atomic_write(path, v.to_string().as_bytes())
}

/// Write the sfmapi binary points file.
pub fn write_points_bin(rec: &Reconstruction, path: &Path) -> Result<(), ModelError> {
    atomic_write(path, &points_bin_bytes(rec))
}

/// The NVM_V3 text: cameras with focal length, rotation, centre and radial
/// distortion; points with colour and measurements relative to the principal point.
pub fn nvm_text(rec: &Reconstruction) -> String {
    let mut s = String::from("NVM_V3\n\n");
    let index: BTreeMap<u32, usize> = rec
        .images
        .keys()
        .enumerate()
        .map(|(i, id)| (*id, i))
        .collect();
    let _ = writeln!(s, "{}", rec.images.len());
    for img in rec.images.values() {
        let cam = &rec.cameras[&img.camera_id];
        let (f, k) = focal_and_radial(cam.model, &cam.params);
        let c = img.center();
        let [w, x, y, z] = img.qvec;
        let _ = writeln!(
            s,
            "{} {f} {w} {x} {y} {z} {} {} {} {k} 0",
            img.name, c[0], c[1], c[2]
        );
    }
    let _ = writeln!(s, "{}", rec.points.len());
    for p in rec.points.values() {
        let _ = write!(
            s,
            "{} {} {} {} {} {} {}",
            p.xyz[0],
            p.xyz[1],
            p.xyz[2],
            p.rgb[0],
            p.rgb[1],
            p.rgb[2],
            p.track.len()
        );
        for o in &p.track {
            let img = &rec.images[&o.image_id];
            let cam = &rec.cameras[&img.camera_id];
            let (cx, cy) = principal_point(cam.model, &cam.params);
            let kp = img.points2d[o.point2d_idx as usize];
            let _ = write!(
                s,
                " {} {} {} {}",
                index[&o.image_id],
                o.point2d_idx,
                kp.xy[0] - cx,
                kp.xy[1] - cy
            );
        }
        s.push('\n');
    }
    s.push_str("0\n");
    s
}

/// Write the NVM file.
pub fn write_nvm(rec: &Reconstruction, path: &Path) -> Result<(), ModelError> {
    atomic_write(path, nvm_text(rec).as_bytes())
}

fn single_focal(model: CameraModel) -> bool {
    matches!(
        model,
        CameraModel::SimplePinhole
            | CameraModel::SimpleRadial
            | CameraModel::Radial
            | CameraModel::SimpleRadialFisheye
            | CameraModel::RadialFisheye
    )
}

fn focal_and_radial(model: CameraModel, p: &[f64]) -> (f64, f64) {
    if single_focal(model) {
        let k = if model == CameraModel::SimplePinhole {
            0.0
        } else {
            p[3]
        };
        (p[0], k)
    } else {
        let k = if matches!(model, CameraModel::Opencv | CameraModel::FullOpencv) {
            p[4]
        } else {
            0.0
        };
        ((p[0] + p[1]) / 2.0, k)
    }
}

fn principal_point(model: CameraModel, p: &[f64]) -> (f64, f64) {
    if single_focal(model) {
        (p[1], p[2])
    } else {
        (p[2], p[3])
    }
}
