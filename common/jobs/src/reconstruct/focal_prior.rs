//! The focal length prior of a photo downscaled after it was taken.
//!
//! COLMAP derives a photo's focal length in pixels from EXIF, in one of three ways: the
//! 35 mm equivalent, the millimetres over a sensor width from its camera list (both
//! scaled to the photo's own size), or the millimetres times the focal plane's pixels
//! per millimetre. The last is in pixels of the photo *as taken*: a photo exported
//! smaller (a phone's "share as small", a web export, the sample's 800×600 copies of
//! 4000×3000 originals) keeps those EXIF fields, and its prior comes out too long by the
//! factor it was reduced by — 2,904 px for the sample's 800 px photos, where the maps
//! find 622 px. Bundle adjustment refines it, but from five times too far: on the
//! five-photo model of the relocalize test, one run in eight settled at 3,811 px with
//! distortion 0.93 (0.68 px error instead of 0.19), and the two photos registered into
//! it afterwards fit it no better.
//!
//! The rule: a prior that equals the focal plane's value (within 2 %) for a photo
//! whose longer side is smaller than the one EXIF says it was taken at, in the same
//! shape (sides in the same ratio within 1 %), is scaled by the ratio of the sides. A
//! crop keeps the pixels as taken and changes the shape: left alone (a crop to the same
//! shape cannot be told from a downscale). So is a prior COLMAP took another way, which
//! is in the photo's pixels already, a camera whose photos disagree, and a camera model
//! whose focal parameters Tessera does not know.

use super::images::FocalPlane;
use std::path::Path;
use tessera_sfm::colmap::database::{self, DatabaseError};

/// A camera whose prior was corrected, for the stage's report.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Corrected {
    /// COLMAP's camera id.
    pub camera_id: i64,
    /// The prior the engine gave it, in pixels.
    pub from_px: f64,
    /// The prior now.
    pub to_px: f64,
    /// How many photos share it.
    pub photos: usize,
}

/// Correct, in the engine's database `db`, the focal prior of each camera whose photos
/// were downscaled after they were taken, from each photo's focal plane as ingest read
/// it ([`super::images::PhotoFacts::focal_plane`]). Before matching: the mapper starts
/// from the prior. A photo not in `photos` counts as one without EXIF.
pub fn correct_in(
    db: &Path,
    photos: &[super::images::PhotoFacts],
) -> Result<Vec<Corrected>, DatabaseError> {
    let plane_of: std::collections::HashMap<&str, FocalPlane> = photos
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.focal_plane?)))
        .collect();
    let mut done = Vec::new();
    for camera in database::focal_priors(db)? {
        let Some(&f) = camera.params.first() else {
            continue;
        };
        let Some(focals) = database::focal_indices(camera.model) else {
            continue;
        };
        let planes: Vec<Option<FocalPlane>> = camera
            .images
            .iter()
            .map(|name| plane_of.get(name.as_str()).copied())
            .collect();
        let long_side = camera.width.max(camera.height) as f64;
        let short_side = camera.width.min(camera.height) as f64;
        let Some(to) = for_camera(f, &planes, long_side, short_side) else {
            continue;
        };
        let scale = to / f;
        let mut params = camera.params.clone();
        for &i in focals {
            if let Some(p) = params.get_mut(i) {
                *p *= scale;
            }
        }
        database::set_camera_params(db, camera.camera_id, &params)?;
        done.push(Corrected {
            camera_id: camera.camera_id,
            from_px: f,
            to_px: to,
            photos: camera.images.len(),
        });
    }
    Ok(done)
}

/// How close a prior must be to the focal plane's value to have been taken from it.
const SAME_WAY: f64 = 0.02;

/// The prior for a photo of `long_side` × `short_side` px now, if `prior_px` came from
/// its focal plane in pixels of the photo as taken (`None`: nothing to correct).
pub fn corrected(
    prior_px: f64,
    plane: &FocalPlane,
    long_side: f64,
    short_side: f64,
) -> Option<f64> {
    let scale = long_side / plane.taken_long_side;
    if !(scale.is_finite() && scale > 0.0 && scale < 0.99) {
        return None;
    }
    let shape_now = short_side / long_side;
    let shape_taken = plane.taken_short_side / plane.taken_long_side;
    // Not the same shape, or not a number (a side of 0): no correction.
    let same_shape = (shape_now / shape_taken - 1.0).abs() <= 0.01;
    if !same_shape {
        return None;
    }
    let from_plane = plane.focal_mm * plane.px_per_mm;
    ((prior_px / from_plane - 1.0).abs() <= SAME_WAY).then_some(prior_px * scale)
}

/// One camera's correction: the prior of every photo sharing it, corrected the same way
/// (within 1 %), or `None` where any photo needs none or they disagree.
pub fn for_camera(
    prior_px: f64,
    planes: &[Option<FocalPlane>],
    long_side: f64,
    short_side: f64,
) -> Option<f64> {
    let mut all = planes.iter().map(|p| {
        p.as_ref()
            .and_then(|p| corrected(prior_px, p, long_side, short_side))
    });
    let first = all.next()??;
    all.all(|c| c.is_some_and(|c| (c / first - 1.0).abs() <= 0.01))
        .then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample's camera: 4.5 mm, 4000×3000 as taken (about 645 px/mm).
    fn sx260() -> FocalPlane {
        FocalPlane {
            focal_mm: 4.5,
            px_per_mm: 2904.35 / 4.5,
            taken_long_side: 4000.0,
            taken_short_side: 3000.0,
        }
    }

    #[test]
    fn a_prior_from_the_focal_plane_of_a_downscaled_photo_is_scaled_to_it() {
        let c = corrected(2904.35, &sx260(), 800.0, 600.0).unwrap();
        assert!((c - 580.87).abs() < 0.01, "{c}");
        let shared = for_camera(2904.35, &[Some(sx260()), Some(sx260())], 800.0, 600.0).unwrap();
        assert!((shared - c).abs() < 1e-9);
    }

    #[test]
    fn a_photo_at_its_taken_size_or_a_prior_taken_another_way_is_left_alone() {
        assert_eq!(corrected(2904.35, &sx260(), 4000.0, 3000.0), None);
        assert_eq!(corrected(2904.35, &sx260(), 4100.0, 3075.0), None);
        // From COLMAP's sensor list or the 35 mm equivalent: already in the photo's pixels.
        assert_eq!(corrected(583.0, &sx260(), 800.0, 600.0), None);
        let odd = FocalPlane {
            taken_long_side: 0.0,
            ..sx260()
        };
        assert_eq!(corrected(2904.35, &odd, 800.0, 600.0), None);
        // A crop keeps the pixels as taken: another shape, left alone.
        assert_eq!(corrected(2904.35, &sx260(), 3000.0, 3000.0), None);
        assert_eq!(corrected(2904.35, &sx260(), 3000.0, 1688.0), None);
    }

    #[test]
    fn a_camera_whose_photos_disagree_or_lack_exif_is_left_alone() {
        assert_eq!(
            for_camera(2904.35, &[Some(sx260()), None], 800.0, 600.0),
            None
        );
        let other = FocalPlane {
            taken_long_side: 2000.0,
            ..sx260()
        };
        assert_eq!(
            for_camera(2904.35, &[Some(sx260()), Some(other)], 800.0, 600.0),
            None
        );
        assert_eq!(for_camera(2904.35, &[], 800.0, 600.0), None);
    }
}
