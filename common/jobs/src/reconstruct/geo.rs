//! Where a model stands against its photos' GPS: the origin of its east-north-up frame,
//! and the mean distance of aligned camera centres from their GPS positions, the
//! residual a georeferencing reports.

use super::images::Gps;
use tessera_core::geodesy::{self, Geodetic};

/// A photo's GPS position as the engine's pose priors take it: only a full one
/// (latitude, longitude and altitude; COLMAP stores no prior without an altitude), the
/// altitude used as the height.
pub fn geodetic(g: &Gps) -> Option<Geodetic> {
    Some(Geodetic {
        lat: g.lat,
        lon: g.lon,
        h: g.alt?,
    })
}

/// The origin of the east-north-up frame the engine aligns to: the full GPS position of
/// the first photo by name that has one, registered or not (the rule of both engines'
/// GPS alignment: the first pose prior).
pub fn enu_origin(gps: &[(String, Gps)]) -> Option<Geodetic> {
    gps.iter()
        .filter_map(|(name, g)| Some((name, geodetic(g)?)))
        .min_by(|a, b| a.0.cmp(b.0))
        .map(|(_, g)| g)
}

/// Mean distance (m) between aligned camera centres and their photos' GPS positions,
/// in the east-north-up frame of [`enu_origin`] (for ECEF output the centres are
/// compared in ECEF).
pub fn gps_residual(
    rec: &tessera_sfm::Reconstruction,
    gps: &[(String, Gps)],
    ecef: bool,
) -> Option<f64> {
    let by_name: std::collections::HashMap<&str, Geodetic> = gps
        .iter()
        .filter_map(|(n, g)| Some((n.as_str(), geodetic(g)?)))
        .collect();
    let origin = enu_origin(gps)?;
    let mut sum = 0.0;
    let mut n = 0;
    for img in rec.images.values() {
        let Some(g) = by_name.get(img.name.as_str()) else {
            continue;
        };
        let p = geodesy::to_ecef(g);
        let target = if ecef {
            p
        } else {
            geodesy::ecef_to_enu(p, &origin)
        };
        let c = img.center();
        sum +=
            ((c[0] - target[0]).powi(2) + (c[1] - target[1]).powi(2) + (c[2] - target[2]).powi(2))
                .sqrt();
        n += 1;
    }
    (n > 0).then(|| sum / n as f64)
}
