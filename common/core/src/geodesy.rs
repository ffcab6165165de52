//! WGS 84 positions and the two frames a georeferenced model is aligned in: earth-centred
//! (ECEF, EPSG:4978) and east-north-up metres around an origin photo. These are exact
//! rotations and translations of each other, so they are computed here; anything that is
//! a map projection goes through [`crate::crs`].

/// WGS 84 semi-major axis, metres.
const A: f64 = 6_378_137.0;
/// WGS 84 flattening.
const F: f64 = 1.0 / 298.257_223_563;

/// A position on the WGS 84 ellipsoid.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Geodetic {
    /// Degrees north.
    pub lat: f64,
    /// Degrees east.
    pub lon: f64,
    /// Height in metres, taken as above the ellipsoid (a photo's EXIF GPS altitude is
    /// above sea level; COLMAP, and so Tessera, take it as it is: no geoid model ships).
    pub h: f64,
}

/// Earth-centred, earth-fixed coordinates of `g`.
pub fn to_ecef(g: &Geodetic) -> [f64; 3] {
    let e2 = F * (2.0 - F);
    let (lat, lon) = (g.lat.to_radians(), g.lon.to_radians());
    let n = A / (1.0 - e2 * lat.sin().powi(2)).sqrt();
    [
        (n + g.h) * lat.cos() * lon.cos(),
        (n + g.h) * lat.cos() * lon.sin(),
        (n * (1.0 - e2) + g.h) * lat.sin(),
    ]
}

/// The rows of the rotation from ECEF differences to east, north, up at `origin`.
fn enu_axes(origin: &Geodetic) -> [[f64; 3]; 3] {
    let (lat, lon) = (origin.lat.to_radians(), origin.lon.to_radians());
    [
        [-lon.sin(), lon.cos(), 0.0],
        [-lat.sin() * lon.cos(), -lat.sin() * lon.sin(), lat.cos()],
        [lat.cos() * lon.cos(), lat.cos() * lon.sin(), lat.sin()],
    ]
}

/// East-north-up metres of the ECEF point `p` around `origin`.
pub fn ecef_to_enu(p: [f64; 3], origin: &Geodetic) -> [f64; 3] {
    let o = to_ecef(origin);
    let d = [p[0] - o[0], p[1] - o[1], p[2] - o[2]];
    enu_axes(origin).map(|r| r[0] * d[0] + r[1] * d[1] + r[2] * d[2])
}

/// The ECEF point of east-north-up metres `e` around `origin` (the inverse of
/// [`ecef_to_enu`]: the rotation is orthonormal, so its transpose).
pub fn enu_to_ecef(e: [f64; 3], origin: &Geodetic) -> [f64; 3] {
    let o = to_ecef(origin);
    let r = enu_axes(origin);
    [0, 1, 2].map(|k| o[k] + r[0][k] * e[0] + r[1][k] * e[1] + r[2][k] * e[2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enu_and_ecef_are_inverse_and_metric() {
        let origin = Geodetic {
            lat: 46.8,
            lon: 7.1,
            h: 550.0,
        };
        assert!(
            ecef_to_enu(to_ecef(&origin), &origin)
                .iter()
                .all(|v| v.abs() < 1e-6)
        );
        for e in [[10.0, -20.0, 3.0], [-1500.0, 800.0, -40.0]] {
            let back = ecef_to_enu(enu_to_ecef(e, &origin), &origin);
            for k in 0..3 {
                assert!((back[k] - e[k]).abs() < 1e-6, "{e:?} -> {back:?}");
            }
        }
        // 0.001° of latitude is about 111 m north and nothing east.
        let north = ecef_to_enu(
            to_ecef(&Geodetic {
                lat: 46.801,
                ..origin
            }),
            &origin,
        );
        assert!(
            (north[1] - 111.2).abs() < 0.5 && north[0].abs() < 1e-6,
            "{north:?}"
        );
    }
}
