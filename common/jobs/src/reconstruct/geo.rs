//! Where a model stands against its photos' GPS: WGS-84 to earth-centred and
//! east-north-up coordinates, and the mean distance of aligned camera centres from
//! their GPS positions, the residual a georeferencing reports.

use super::images::Gps;

/// Mean distance (m) between aligned camera centres and their photos' GPS positions,
/// in the local east-north-up frame of the first photo (for ECEF output the centres are
/// compared in ECEF).
pub fn gps_residual(
    rec: &tessera_sfm::Reconstruction,
    gps: &[(String, Gps)],
    ecef: bool,
) -> Option<f64> {
    let by_name: std::collections::HashMap<&str, &Gps> =
        gps.iter().map(|(n, g)| (n.as_str(), g)).collect();
    let origin = gps.first()?.1;
    let mut sum = 0.0;
    let mut n = 0;
    for img in rec.images.values() {
        let Some(g) = by_name.get(img.name.as_str()) else {
            continue;
        };
        let target = if ecef {
            wgs84::to_ecef(g)
        } else {
            wgs84::to_enu(g, &origin)
        };
        let c = img.center();
        sum +=
            ((c[0] - target[0]).powi(2) + (c[1] - target[1]).powi(2) + (c[2] - target[2]).powi(2))
                .sqrt();
        n += 1;
    }
    (n > 0).then(|| sum / n as f64)
}

/// WGS-84 conversions.
pub mod wgs84 {
    use super::Gps;

    const A: f64 = 6_378_137.0;
    const F: f64 = 1.0 / 298.257_223_563;

    /// Earth-centred, earth-fixed coordinates.
    pub fn to_ecef(g: &Gps) -> [f64; 3] {
        let e2 = F * (2.0 - F);
        let (lat, lon) = (g.lat.to_radians(), g.lon.to_radians());
        let h = g.alt.unwrap_or(0.0);
        let n = A / (1.0 - e2 * lat.sin().powi(2)).sqrt();
        [
            (n + h) * lat.cos() * lon.cos(),
            (n + h) * lat.cos() * lon.sin(),
            (n * (1.0 - e2) + h) * lat.sin(),
        ]
    }

    /// East-north-up coordinates relative to `origin`.
    pub fn to_enu(g: &Gps, origin: &Gps) -> [f64; 3] {
        let (p, o) = (to_ecef(g), to_ecef(origin));
        let d = [p[0] - o[0], p[1] - o[1], p[2] - o[2]];
        let (lat, lon) = (origin.lat.to_radians(), origin.lon.to_radians());
        [
            -lon.sin() * d[0] + lon.cos() * d[1],
            -lat.sin() * lon.cos() * d[0] - lat.sin() * lon.sin() * d[1] + lat.cos() * d[2],
            lat.cos() * lon.cos() * d[0] + lat.cos() * lon.sin() * d[1] + lat.sin() * d[2],
        ]
    }
}
