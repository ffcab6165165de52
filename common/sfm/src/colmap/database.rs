//! What a COLMAP database holds, read directly (COLMAP's exit status alone cannot be
//! trusted: 3.8 exits 0 having extracted nothing from an empty or all-corrupt folder).

use rusqlite::{Connection, OpenFlags};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Counts that tell whether a stage did its work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseStats {
    /// Images in the database.
    pub images: u64,
    /// Cameras.
    pub cameras: u64,
    /// Images with at least one keypoint.
    pub images_with_keypoints: u64,
    /// Keypoints in all.
    pub keypoints: u64,
    /// Keypoints of the photo that has fewest (a photo of weak texture shows here
    /// before it fails to register). Absent from older checkpoints' stats.
    #[serde(default)]
    pub fewest_keypoints: u64,
    /// Image pairs with raw matches.
    pub matched_pairs: u64,
    /// Raw matches in all.
    pub matches: u64,
    /// Pairs that passed geometric verification.
    pub verified_pairs: u64,
    /// Inlier matches of verified pairs.
    pub inlier_matches: u64,
    /// Names of images with no keypoints.
    pub images_without_keypoints: Vec<String>,
}

/// Problems reading a database.
#[derive(Debug, thiserror::Error)]
#[error("{path} is not a readable COLMAP database: {why}")]
pub struct DatabaseError {
    /// The file.
    pub path: String,
    /// What failed.
    pub why: String,
}

impl tessera_core::Classify for DatabaseError {
    fn class(&self) -> tessera_core::ErrorClass {
        tessera_core::ErrorClass::Permanent
    }
}

/// COLMAP's pair id: `id1 * MAX_IMAGES + id2` with `id1 < id2`.
const MAX_IMAGES: i64 = 2_147_483_647;

/// One verified pair of the match graph: two photos by name and their inlier matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedPair {
    /// One photo's name.
    pub a: String,
    /// The other's.
    pub b: String,
    /// Geometrically verified matches between them.
    pub inliers: u32,
}

fn open(path: &Path) -> Result<Connection, DatabaseError> {
    if !path.is_file() {
        return Err(DatabaseError {
            path: path.display().to_string(),
            why: "file does not exist".into(),
        });
    }
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| DatabaseError {
        path: path.display().to_string(),
        why: e.to_string(),
    })
}

/// The match graph: every geometrically verified pair (read-only). What a split run cuts
/// its clusters along, and what decides which photos a cluster shares with its
/// neighbours.
pub fn verified_pairs(path: &Path) -> Result<Vec<VerifiedPair>, DatabaseError> {
    let err = db_err(path);
    let c = open(path)?;
    let mut names = std::collections::HashMap::new();
    let mut stmt = c
        .prepare("SELECT image_id, name FROM images")
        .map_err(err)?;
    for row in stmt
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .map_err(err)?
    {
        let (id, name) = row.map_err(err)?;
        names.insert(id, name);
    }
    let mut stmt = c
        .prepare("SELECT pair_id, rows FROM two_view_geometries WHERE rows > 0 AND config BETWEEN 2 AND 6 ORDER BY pair_id")
        .map_err(err)?;
    let mut pairs = Vec::new();
    for row in stmt
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
        .map_err(err)?
    {
        let (pair, rows) = row.map_err(err)?;
        let (a, b) = (pair / MAX_IMAGES, pair % MAX_IMAGES);
        if let (Some(a), Some(b)) = (names.get(&a), names.get(&b)) {
            pairs.push(VerifiedPair {
                a: a.clone(),
                b: b.clone(),
                inliers: rows.clamp(0, i64::from(u32::MAX)) as u32,
            });
        }
    }
    Ok(pairs)
}

/// A camera whose focal length the engine took from the photos' EXIF (its prior), with
/// the photos that share it.
#[derive(Debug, Clone, PartialEq)]
pub struct FocalPrior {
    /// COLMAP's camera id.
    pub camera_id: i64,
    /// COLMAP's camera model id.
    pub model: i64,
    /// Width in pixels.
    pub width: u64,
    /// Height in pixels.
    pub height: u64,
    /// The model's parameters, focal length(s) first ([`focal_indices`]).
    pub params: Vec<f64>,
    /// The photos (by name) that share the camera.
    pub images: Vec<String>,
}

/// Which of a camera model's parameters are focal lengths: `f` for SIMPLE_PINHOLE,
/// SIMPLE_RADIAL, RADIAL, SIMPLE_RADIAL_FISHEYE and RADIAL_FISHEYE; `fx, fy` for
/// PINHOLE, OPENCV, OPENCV_FISHEYE, FULL_OPENCV, FOV and THIN_PRISM_FISHEYE; `None` for
/// a model Tessera does not know (later COLMAP versions add some).
pub fn focal_indices(model: i64) -> Option<&'static [usize]> {
    match model {
        0 | 2 | 3 | 8 | 9 => Some(&[0]),
        1 | 4 | 5 | 6 | 7 | 10 => Some(&[0, 1]),
        _ => None,
    }
}

fn db_err(path: &Path) -> impl Fn(rusqlite::Error) -> DatabaseError + Copy + '_ {
    move |e| DatabaseError {
        path: path.display().to_string(),
        why: e.to_string(),
    }
}

/// The cameras whose focal length is a prior from EXIF (read-only).
pub fn focal_priors(path: &Path) -> Result<Vec<FocalPrior>, DatabaseError> {
    let err = db_err(path);
    let c = open(path)?;
    let mut stmt = c
        .prepare("SELECT camera_id, model, width, height, params FROM cameras WHERE prior_focal_length = 1 ORDER BY camera_id")
        .map_err(&err)?;
    let mut cameras: Vec<FocalPrior> = stmt
        .query_map([], |r| {
            let blob: Vec<u8> = r.get(4)?;
            Ok(FocalPrior {
                camera_id: r.get(0)?,
                model: r.get(1)?,
                width: r.get::<_, i64>(2)?.max(0) as u64,
                height: r.get::<_, i64>(3)?.max(0) as u64,
                params: blob
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect(),
                images: Vec::new(),
            })
        })
        .map_err(&err)?
        .collect::<Result<_, _>>()
        .map_err(&err)?;
    let mut stmt = c
        .prepare("SELECT camera_id, name FROM images ORDER BY name")
        .map_err(&err)?;
    for row in stmt
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .map_err(&err)?
    {
        let (camera, name) = row.map_err(&err)?;
        if let Some(c) = cameras.iter_mut().find(|c| c.camera_id == camera) {
            c.images.push(name);
        }
    }
    Ok(cameras)
}

/// Replace a camera's parameters (the only write Tessera makes to an engine's
/// database: a focal prior corrected before matching).
pub fn set_camera_params(path: &Path, camera_id: i64, params: &[f64]) -> Result<(), DatabaseError> {
    let err = db_err(path);
    let c = Connection::open(path).map_err(&err)?;
    let blob: Vec<u8> = params.iter().flat_map(|p| p.to_le_bytes()).collect();
    let n = c
        .execute(
            "UPDATE cameras SET params = ?1 WHERE camera_id = ?2",
            rusqlite::params![blob, camera_id],
        )
        .map_err(&err)?;
    if n != 1 {
        return Err(DatabaseError {
            path: path.display().to_string(),
            why: format!("no camera {camera_id}"),
        });
    }
    Ok(())
}

/// Read the counts (read-only; never modifies the file).
pub fn stats(path: &Path) -> Result<DatabaseStats, DatabaseError> {
    let err = db_err(path);
    let c = open(path)?;
    let one = |sql: &str| -> Result<u64, DatabaseError> {
        c.query_row(sql, [], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
            .map_err(err)
    };
    let mut s = DatabaseStats {
        images: one("SELECT count(*) FROM images")?,
        cameras: one("SELECT count(*) FROM cameras")?,
        images_with_keypoints: one("SELECT count(*) FROM keypoints WHERE rows > 0")?,
        keypoints: one("SELECT coalesce(sum(rows), 0) FROM keypoints")?,
        fewest_keypoints: one("SELECT coalesce(min(rows), 0) FROM keypoints")?,
        matched_pairs: one("SELECT count(*) FROM matches WHERE rows > 0")?,
        matches: one("SELECT coalesce(sum(rows), 0) FROM matches")?,
        verified_pairs: one(
            "SELECT count(*) FROM two_view_geometries WHERE rows > 0 AND config BETWEEN 2 AND 6",
        )?,
        inlier_matches: one(
            "SELECT coalesce(sum(rows), 0) FROM two_view_geometries WHERE config BETWEEN 2 AND 6",
        )?,
        images_without_keypoints: Vec::new(),
    };
    let mut stmt = c
        .prepare("SELECT name FROM images WHERE image_id NOT IN (SELECT image_id FROM keypoints WHERE rows > 0) ORDER BY name")
        .map_err(err)?;
    s.images_without_keypoints = stmt
        .query_map([], |r| r.get(0))
        .map_err(err)?
        .collect::<Result<_, _>>()
        .map_err(err)?;
    Ok(s)
}
