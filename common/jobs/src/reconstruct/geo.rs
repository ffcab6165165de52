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
    let (centres, targets): (Vec<[f64; 3]>, Vec<[f64; 3]>) = centres_and_fixes(rec, gps, ecef)?
        .into_iter()
        .map(|(_, c, t)| (c, t))
        .unzip();
    if centres.is_empty() {
        return None;
    }
    let mut distances: Vec<f64> = centres
        .iter()
        .zip(&targets)
        .map(|(c, t)| tessera_sfm::align::distance(*c, *t))
        .collect();
    let n = distances.len();
    Some(GpsFit {
        photos: n,
        mean_m: distances.iter().sum::<f64>() / n as f64,
        median_m: median(&mut distances),
        scale_error: tessera_sfm::align::Sim3::fit(&centres, &targets)
            .map(|s| (s.scale - 1.0).abs()),
    })
}

/// A registered photo's name, camera centre and GPS fix.
type CentreAndFix<'a> = (&'a str, [f64; 3], [f64; 3]);

/// Each registered photo with a full GPS position: its name, its camera centre and
/// its fix, in the east-north-up frame of [`enu_origin`] (in ECEF where `ecef`). A
/// centre or a fix that is not a finite number is left out. `None` where no photo
/// carries GPS.
fn centres_and_fixes<'a>(
    rec: &'a tessera_sfm::Reconstruction,
    gps: &[(String, Gps)],
    ecef: bool,
) -> Option<Vec<CentreAndFix<'a>>> {
    let by_name: std::collections::HashMap<&str, Geodetic> = gps
        .iter()
        .filter_map(|(n, g)| Some((n.as_str(), geodetic(g)?)))
        .collect();
    let origin = enu_origin(gps)?;
    Some(
        rec.images
            .values()
            .filter_map(|img| {
                let p = geodesy::to_ecef(by_name.get(img.name.as_str())?);
                let fix = if ecef {
                    p
                } else {
                    geodesy::ecef_to_enu(p, &origin)
                };
                let centre = img.center();
                let finite = centre.iter().chain(&fix).all(|v| v.is_finite());
                finite.then_some((img.name.as_str(), centre, fix))
            })
            .collect(),
    )
}

/// The middle value (the mean of the two middle ones for an even count). Callers pass
/// at least one value; 0 for none.
fn median(values: &mut [f64]) -> f64 {
    debug_assert!(!values.is_empty(), "the median of nothing");
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// A photo counts as misplaced only beyond this many times the median distance of the
/// photos the fit keeps…
pub const MISPLACED_FACTOR: f64 = 5.0;
/// …and never within this many metres: a consumer GPS fix alone can be that far off.
/// On `odm_seneca_80` the single map's photos stand at a median of 2.7 m and at most
/// 11.8 m from their fixes; the photos a cluster placed by a wrong pose stood 37 and
/// 92 m off.
pub const MISPLACED_FLOOR_M: f64 = 10.0;
/// Draws of three photos the first fit is chosen from.
const LMEDS_DRAWS: usize = 500;
/// Fewer photos with GPS than this cannot say which of them is wrong.
const MISPLACED_MIN_PHOTOS: usize = 6;
/// Where more than this share would be misplaced, the model as a whole disagrees with
/// its GPS (a bent model, or fixes that are noise): not a few photos to place again.
const MISPLACED_MAX_SHARE: f64 = 0.2;

/// A registered photo that stands far from its GPS position once the model is fitted
/// onto the others' positions.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Misplaced {
    /// Its name.
    pub name: String,
    /// Its distance (m) from its GPS position after the fit.
    pub off_m: f64,
}

/// A model's photos checked against their GPS: which stand where their fix says they
/// are not.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Placement {
    /// Photos compared: registered, with a full GPS position.
    pub photos: usize,
    /// The distance (m) beyond which a photo counts as misplaced:
    /// [`MISPLACED_FACTOR`] × the median of the photos kept, at least
    /// [`MISPLACED_FLOOR_M`].
    pub bound_m: f64,
    /// The photos beyond it, by name.
    pub misplaced: Vec<Misplaced>,
}

/// Check `rec`, in any frame and scale, against its photos' GPS: fit a similarity onto
/// the GPS positions robustly, then by least squares over the photos within the bound
/// until that set settles, so that a far-off photo does not drag the fit it is judged
/// by.
/// `None` where it cannot be judged: fewer than six photos with GPS (or kept by a fit),
/// centres on one line (no fit), or more than a fifth of them misplaced. A centre or a
/// fix that is not a finite number is not compared.
pub fn placement(rec: &tessera_sfm::Reconstruction, gps: &[(String, Gps)]) -> Option<Placement> {
    let mut photos = centres_and_fixes(rec, gps, false)?;
    photos.sort_by(|a, b| a.0.cmp(b.0));
    let n = photos.len();
    if n < MISPLACED_MIN_PHOTOS {
        return None;
    }
    let distances = |fit: &tessera_sfm::align::Sim3| -> Vec<f64> {
        photos
            .iter()
            .map(|p| tessera_sfm::align::distance(fit.apply(p.1), p.2))
            .collect()
    };
    // The first kept set comes from the fit of three photos that leaves the smallest
    // median distance (least median of squares, over seeded draws of three): a
    // least-squares fit over all of them is dragged toward the far-off photos until,
    // with two of nine off, none stands out.
    let mut best: Option<(f64, Vec<f64>)> = None;
    let mut draw: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..LMEDS_DRAWS {
        let pick = [0; 3].map(|_| {
            draw ^= draw << 13;
            draw ^= draw >> 7;
            draw ^= draw << 17;
            (draw % n as u64) as usize
        });
        if pick[0] == pick[1] || pick[1] == pick[2] || pick[0] == pick[2] {
            continue;
        }
        let Some(fit) =
            tessera_sfm::align::Sim3::fit(&pick.map(|i| photos[i].1), &pick.map(|i| photos[i].2))
        else {
            continue;
        };
        let off = distances(&fit);
        let m = median(&mut off.clone());
        if best.as_ref().is_none_or(|(b, _)| m < *b) {
            best = Some((m, off));
        }
    }
    let (least, first) = best?;
    let first_bound = (MISPLACED_FACTOR * least).max(MISPLACED_FLOOR_M);
    let mut kept: Vec<bool> = first.iter().map(|d| *d <= first_bound).collect();
    let (mut off, mut bound) = (Vec::new(), 0.0);
    // Then least squares over the kept photos. Each round can only leave out photos
    // the last fit put beyond the bound; a few rounds settle it, and the last fit
    // stands if they do not.
    for _ in 0..5 {
        if kept.iter().filter(|k| **k).count() < MISPLACED_MIN_PHOTOS {
            return None;
        }
        let (from, to): (Vec<[f64; 3]>, Vec<[f64; 3]>) = photos
            .iter()
            .zip(&kept)
            .filter(|(_, k)| **k)
            .map(|(p, _)| (p.1, p.2))
            .unzip();
        off = distances(&tessera_sfm::align::Sim3::fit(&from, &to)?);
        let mut of_kept: Vec<f64> = off
            .iter()
            .zip(&kept)
            .filter(|(_, k)| **k)
            .map(|(d, _)| *d)
            .collect();
        bound = (MISPLACED_FACTOR * median(&mut of_kept)).max(MISPLACED_FLOOR_M);
        let next: Vec<bool> = off.iter().map(|d| *d <= bound).collect();
        if next == kept {
            break;
        }
        kept = next;
    }
    let misplaced: Vec<Misplaced> = photos
        .iter()
        .zip(&off)
        .filter(|(_, d)| **d > bound)
        .map(|(p, d)| Misplaced {
            name: p.0.to_string(),
            off_m: *d,
        })
        .collect();
    if misplaced.len() as f64 > MISPLACED_MAX_SHARE * n as f64 {
        return None;
    }
    Some(Placement {
        photos: n,
        bound_m: bound,
        misplaced,
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

    /// A model in its own frame: a twentieth of the size, turned a quarter about the
    /// vertical and moved, with `off` added (in metres, before the shrink) to photo `i`.
    fn own_frame(gps: &[(String, Gps)], off: impl Fn(usize) -> [f64; 3]) -> Reconstruction {
        model(gps, |i, p| {
            let d = off(i);
            let p = [p[0] + d[0], p[1] + d[1], p[2] + d[2]];
            [-p[1] / 20.0 + 3.0, p[0] / 20.0 - 7.0, p[2] / 20.0 + 1.0]
        })
    }

    #[test]
    fn a_photo_placed_far_from_its_fix_is_found_in_a_model_of_any_frame() {
        let gps = grid();
        let rec = own_frame(&gps, |i| if i == 4 { [40.0, -30.0, 0.0] } else { [0.0; 3] });
        let check = placement(&rec, &gps).unwrap();
        assert_eq!(check.photos, 9);
        assert_eq!(check.bound_m, MISPLACED_FLOOR_M, "{check:?}");
        assert_eq!(check.misplaced.len(), 1, "{check:?}");
        assert_eq!(check.misplaced[0].name, "p4.jpg");
        // Fitted on the others alone, it stands its full 50 m off.
        assert!((check.misplaced[0].off_m - 50.0).abs() < 1e-6, "{check:?}");
    }

    #[test]
    fn gps_noise_of_a_few_metres_misplaces_nobody() {
        let gps = grid();
        let wobble = |i: usize| {
            let a = i as f64 * 2.4;
            [
                4.0 * a.cos(),
                4.0 * a.sin(),
                if i.is_multiple_of(2) { 2.5 } else { -2.5 },
            ]
        };
        let check = placement(&own_frame(&gps, wobble), &gps).unwrap();
        assert!(check.misplaced.is_empty(), "{check:?}");
    }

    #[test]
    fn a_model_that_disagrees_with_its_gps_as_a_whole_is_not_judged_photo_by_photo() {
        let gps = grid();
        // Two of nine far off is more than a fifth: not a few photos to place again.
        let two = |i: usize| match i {
            1 => [60.0, 0.0, 0.0],
            6 => [0.0, 80.0, 0.0],
            _ => [0.0; 3],
        };
        assert_eq!(placement(&own_frame(&gps, two), &gps), None);
        // A third of them far off moves the median itself: nobody stands out.
        let three = |i: usize| match i {
            1 | 4 | 6 => [60.0 * i as f64, 0.0, 0.0],
            _ => [0.0; 3],
        };
        let check = placement(&own_frame(&gps, three), &gps);
        assert!(
            check.as_ref().is_none_or(|c| c.misplaced.is_empty()),
            "{check:?}"
        );
        // Too few photos, or centres on one line, say nothing either.
        let five: Vec<(String, Gps)> = gps.iter().take(5).cloned().collect();
        assert_eq!(placement(&own_frame(&five, |_| [0.0; 3]), &five), None);
        let line: Vec<(String, Gps)> = (0..7)
            .map(|i| {
                let g = Gps {
                    lat: 42.0,
                    lon: -76.0 + i as f64 * 0.001,
                    alt: Some(120.0),
                };
                (format!("l{i}.jpg"), g)
            })
            .collect();
        assert_eq!(placement(&own_frame(&line, |_| [0.0; 3]), &line), None);
    }
}
