//! Where a model stands against its photos' GPS: the origin of its east-north-up frame,
//! and how far aligned camera centres stand from their GPS positions (mean, median and
//! the scale still left between them), what a georeferencing reports.

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

/// Each photo's name and, where it carries GPS (latitude and longitude are enough),
/// its east and north in metres from the first photo by name that does: the plane a
/// survey's photos are cut into clusters and flight strips on.
pub fn east_north(photos: &[super::images::PhotoFacts]) -> Vec<(String, Option<[f64; 2]>)> {
    let flat = |g: &Gps| Geodetic {
        lat: g.lat,
        lon: g.lon,
        h: 0.0,
    };
    let origin = photos
        .iter()
        .filter_map(|p| p.gps.as_ref().map(|g| (&p.name, g)))
        .min_by(|a, b| a.0.cmp(b.0))
        .map(|(_, g)| flat(g));
    photos
        .iter()
        .map(|p| {
            let at = match (&p.gps, &origin) {
                (Some(g), Some(o)) => {
                    let enu = geodesy::ecef_to_enu(geodesy::to_ecef(&flat(g)), o);
                    Some([enu[0], enu[1]])
                }
                _ => None,
            };
            (p.name.clone(), at)
        })
        .collect()
}

/// How well a georeferenced model's camera centres agree with their photos' GPS: what
/// a surveyor asks of a result before trusting its coordinates.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GpsFit {
    /// Photos compared: registered, with a full GPS position.
    pub photos: usize,
    /// Mean distance (m) of a centre from its GPS position.
    pub mean_m: f64,
    /// Median distance (m): one bad fix or badly placed camera does not move it.
    pub median_m: f64,
    /// `|s − 1|` for the least-squares similarity `s·R·x + t` that would carry the centres
    /// onto their GPS positions. A model placed at metric scale needs none (0); 0.01 is a
    /// length 1 % off. `None` where the centres lie on one line (no rotation is
    /// determined, so no scale either) or fewer than three are compared.
    pub scale_error: Option<f64>,
}

/// The fit of `rec`'s centres to their GPS, in the east-north-up frame of
/// [`enu_origin`] (in ECEF where the output is ECEF). `None` where no registered photo
/// carries a full GPS position.
pub fn gps_fit(
    rec: &tessera_sfm::Reconstruction,
    gps: &[(String, Gps)],
    ecef: bool,
) -> Option<GpsFit> {
    let by_name: std::collections::HashMap<&str, Geodetic> = gps
        .iter()
        .filter_map(|(n, g)| Some((n.as_str(), geodetic(g)?)))
        .collect();
    let origin = enu_origin(gps)?;
    let (centres, targets): (Vec<[f64; 3]>, Vec<[f64; 3]>) = rec
        .images
        .values()
        .filter_map(|img| {
            let p = geodesy::to_ecef(by_name.get(img.name.as_str())?);
            let target = if ecef {
                p
            } else {
                geodesy::ecef_to_enu(p, &origin)
            };
            Some((img.center(), target))
        })
        .unzip();
    if centres.is_empty() {
        return None;
    }
    let mut distances: Vec<f64> = centres
        .iter()
        .zip(&targets)
        .map(|(c, t)| tessera_sfm::align::distance(*c, *t))
        .collect();
    distances.sort_by(f64::total_cmp);
    let n = distances.len();
    let median_m = if n % 2 == 1 {
        distances[n / 2]
    } else {
        (distances[n / 2 - 1] + distances[n / 2]) / 2.0
    };
    Some(GpsFit {
        photos: n,
        mean_m: distances.iter().sum::<f64>() / n as f64,
        median_m,
        scale_error: tessera_sfm::align::Sim3::fit(&centres, &targets)
            .map(|s| (s.scale - 1.0).abs()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sfm::{Image, Reconstruction};

    /// Nine photos on a 3 × 3 grid about 100 m apart, at 120 m altitude.
    fn grid() -> Vec<(String, Gps)> {
        (0..9)
            .map(|i| {
                let g = Gps {
                    lat: 42.0 + (i / 3) as f64 * 0.0009,
                    lon: -76.0 + (i % 3) as f64 * 0.0012,
                    alt: Some(120.0),
                };
                (format!("p{i}.jpg"), g)
            })
            .collect()
    }

    /// A model whose centres are `at(enu)` of each photo's GPS (identity rotations, so
    /// the centre is `-t`).
    fn model(gps: &[(String, Gps)], at: impl Fn(usize, [f64; 3]) -> [f64; 3]) -> Reconstruction {
        let origin = enu_origin(gps).unwrap();
        let mut rec = Reconstruction::default();
        for (i, (name, g)) in gps.iter().enumerate() {
            let c = at(
                i,
                geodesy::ecef_to_enu(geodesy::to_ecef(&geodetic(g).unwrap()), &origin),
            );
            rec.images.insert(
                i as u32 + 1,
                Image {
                    id: i as u32 + 1,
                    qvec: [1.0, 0.0, 0.0, 0.0],
                    tvec: [-c[0], -c[1], -c[2]],
                    camera_id: 1,
                    name: name.clone(),
                    points2d: Vec::new(),
                },
            );
        }
        rec
    }

    #[test]
    fn centres_on_their_gps_fit_with_no_residual_and_no_scale_left() {
        let gps = grid();
        let fit = gps_fit(&model(&gps, |_, p| p), &gps, false).unwrap();
        assert_eq!(fit.photos, 9);
        assert!(fit.mean_m < 1e-6 && fit.median_m < 1e-6, "{fit:?}");
        assert!(fit.scale_error.unwrap() < 1e-9, "{fit:?}");
    }

    #[test]
    fn a_model_two_percent_too_large_shows_the_scale_it_still_needs() {
        let gps = grid();
        let fit = gps_fit(&model(&gps, |_, p| p.map(|x| x * 1.02)), &gps, false).unwrap();
        let want = 1.0 - 1.0 / 1.02;
        assert!((fit.scale_error.unwrap() - want).abs() < 1e-6, "{fit:?}");
        assert!(
            fit.median_m > 1.0,
            "a scaled model stands off its GPS: {fit:?}"
        );
    }

    #[test]
    fn one_camera_far_off_moves_the_mean_but_not_the_median() {
        let gps = grid();
        let rec = model(
            &gps,
            |i, p| if i == 4 { [p[0] + 90.0, p[1], p[2]] } else { p },
        );
        let fit = gps_fit(&rec, &gps, false).unwrap();
        assert!((fit.mean_m - 10.0).abs() < 1e-6, "{fit:?}");
        assert!(fit.median_m < 1e-6, "{fit:?}");
    }

    #[test]
    fn centres_on_one_line_have_no_scale_to_report_and_photos_without_altitude_are_left_out() {
        let mut gps: Vec<(String, Gps)> = grid().into_iter().take(3).collect();
        gps.push((
            "no_altitude.jpg".into(),
            Gps {
                lat: 42.5,
                lon: -76.5,
                alt: None,
            },
        ));
        let rec = model(&gps[..3], |_, p| p);
        let fit = gps_fit(&rec, &gps, false).unwrap();
        assert_eq!(fit.photos, 3);
        assert_eq!(fit.scale_error, None);
        assert!(gps_fit(&Reconstruction::default(), &gps, false).is_none());
    }
}
