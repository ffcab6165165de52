//! A model placed by ground control points ([`tessera_core::gcp`]): each point
//! triangulated from its marks in the registered photos, its surveyed position taken to
//! ECEF through the file's coordinate system, and the model carried by the similarity
//! that best fits one onto the other ([`tessera_sfm::align`]), into east-north-up metres
//! around the points' centroid (or ECEF). Each point's residual after the fit is
//! reported, so a surveyor sees which mark or coordinate is off.

use serde::Serialize;
use std::collections::HashMap;
use tessera_core::crs::{Crs, ModelFrame};
use tessera_core::gcp::ControlFile;
use tessera_core::geodesy::{self, Geodetic};
use tessera_sfm::Reconstruction;
use tessera_sfm::align::{Sim3, triangulate};

/// The fewest control points that determine a similarity.
pub const MIN_POINTS: usize = 3;

/// How one control point fared.
#[derive(Debug, Clone, Serialize)]
pub struct ControlResidual {
    /// Its name in the file.
    pub name: String,
    /// Its marks in registered photos.
    pub marks_used: usize,
    /// Whether it took part in the fit.
    pub used: bool,
    /// Why not, if it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Distance between where the placed model puts it and its surveyed position, m.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub residual_m: Option<f64>,
    /// The same, east-north only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub horizontal_m: Option<f64>,
    /// The same, up only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vertical_m: Option<f64>,
}

/// What placing did.
#[derive(Debug, Clone)]
pub struct Placed {
    /// The frame the model is now in.
    pub frame: ModelFrame,
    /// The similarity applied.
    pub sim3: Sim3,
    /// Per control point, by name.
    pub points: Vec<ControlResidual>,
    /// Root mean square of the used points' residuals, m.
    pub rms_m: f64,
}

/// Place `rec` by `control`, in ECEF if `ecef`, else east-north-up around the control
/// points' centroid. An error says why the points cannot place it (fewer than
/// [`MIN_POINTS`] usable, all on one line, a position outside its coordinate system).
pub fn place(
    rec: &mut Reconstruction,
    control: &ControlFile,
    ecef: bool,
) -> Result<Placed, String> {
    let ids: HashMap<&str, u32> = rec
        .images
        .values()
        .map(|i| (i.name.as_str(), i.id))
        .collect();
    let mut points = Vec::with_capacity(control.points.len());
    let mut model_xyz = Vec::new();
    let mut surveyed = Vec::new();
    let mut used_at = Vec::new();
    for p in &control.points {
        let marks: Vec<(u32, [f64; 2])> = p
            .marks
            .iter()
            // ODM's pixel centres are whole numbers, COLMAP's halves.
            .filter_map(|m| {
                let id = *ids.get(m.image.as_str())?;
                Some((id, [m.pixel[0] + 0.5, m.pixel[1] + 0.5]))
            })
            .collect();
        let mut r = ControlResidual {
            name: p.name.clone(),
            marks_used: marks.len(),
            used: false,
            why: None,
            residual_m: None,
            horizontal_m: None,
            vertical_m: None,
        };
        let world = control
            .crs
            .to_ecef(p.world)
            .map_err(|e| format!("control point `{}` at {:?}: {e}", p.name, p.world))?;
        if marks.len() < 2 {
            r.why = Some(format!(
                "marked in {} registered photo(s); a point is placed from two or more",
                marks.len()
            ));
        } else if let Some(x) = triangulate(rec, &marks) {
            r.used = true;
            used_at.push(points.len());
            model_xyz.push(x);
            surveyed.push(world);
        } else {
            r.why = Some(
                "its marks do not meet in front of the cameras; check the pixel coordinates".into(),
            );
        }
        points.push(r);
    }
    if model_xyz.len() < MIN_POINTS {
        let unused: Vec<String> = points
            .iter()
            .filter(|p| !p.used)
            .map(|p| format!("`{}` {}", p.name, p.why.as_deref().unwrap_or("")))
            .collect();
        return Err(format!(
            "{} control point(s) can be placed in the model and georeferencing by ground control needs {MIN_POINTS}: {}",
            model_xyz.len(),
            unused.join("; ")
        ));
    }
    let origin = centroid_geodetic(&surveyed)?;
    let target: Vec<[f64; 3]> = if ecef {
        surveyed.clone()
    } else {
        surveyed
            .iter()
            .map(|p| geodesy::ecef_to_enu(*p, &origin))
            .collect()
    };
    let sim3 = Sim3::fit(&model_xyz, &target).ok_or_else(|| {
        "the control points lie on one line (or at one place), which leaves the model free to turn about it; add a point off that line".to_string()
    })?;
    let mut sum = 0.0;
    for ((k, x), want) in used_at.iter().zip(&model_xyz).zip(&surveyed) {
        let got = sim3.apply(*x);
        let got = if ecef {
            got
        } else {
            geodesy::enu_to_ecef(got, &origin)
        };
        let (a, b) = (
            geodesy::ecef_to_enu(got, &origin),
            geodesy::ecef_to_enu(*want, &origin),
        );
        let d = [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
        let r = &mut points[*k];
        r.horizontal_m = Some(d[0].hypot(d[1]));
        r.vertical_m = Some(d[2].abs());
        let all = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
        r.residual_m = Some(all);
        sum += all * all;
    }
    sim3.transform(rec);
    Ok(Placed {
        frame: if ecef {
            ModelFrame::Ecef { origin }
        } else {
            ModelFrame::Enu { origin }
        },
        sim3,
        points,
        rms_m: (sum / used_at.len() as f64).sqrt(),
    })
}

/// The WGS 84 position of the centroid of ECEF points.
fn centroid_geodetic(ecef: &[[f64; 3]]) -> Result<Geodetic, String> {
    let n = ecef.len() as f64;
    let mut c = [0.0; 3];
    for p in ecef {
        for k in 0..3 {
            c[k] += p[k] / n;
        }
    }
    let wgs84 = Crs::from_epsg(4326).map_err(|e| e.to_string())?;
    let [lon, lat, h] = wgs84.from_ecef(c).map_err(|e| e.to_string())?;
    Ok(Geodetic { lat, lon, h })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sfm::camera::Project;
    use tessera_sfm::model::{Camera, Image};

    /// Four cameras looking down at a field of points, in a model frame of its own.
    fn model() -> Reconstruction {
        let mut rec = Reconstruction::default();
        rec.cameras.insert(
            1,
            Camera {
                id: 1,
                model: tessera_core::camera::CameraModel::SimpleRadial,
                width: 4000,
                height: 3000,
                params: vec![3000.0, 2000.0, 1500.0, 0.01],
            },
        );
        for (id, t) in [
            (1, [0.0, 0.0, 10.0]),
            (2, [-2.0, 0.0, 10.0]),
            (3, [0.0, -2.0, 10.0]),
            (4, [-2.0, -2.0, 10.0]),
        ] {
            rec.images.insert(
                id,
                Image {
                    id,
                    qvec: [1.0, 0.0, 0.0, 0.0],
                    tvec: t,
                    camera_id: 1,
                    name: format!("{id}.jpg"),
                    points2d: Vec::new(),
                },
            );
        }
        rec
    }

    #[test]
    fn control_points_carry_the_model_onto_their_surveyed_positions() {
        let rec0 = model();
        // Model points and where a survey put them: the model is 1:20 and turned.
        let model_points = [
            [0.5, 0.5, 0.0],
            [2.0, 0.2, 0.3],
            [0.3, 2.2, -0.2],
            [1.7, 1.9, 0.1],
        ];
        let origin = Geodetic {
            lat: 47.0,
            lon: 8.0,
            h: 400.0,
        };
        let truth = Sim3 {
            scale: 20.0,
            rotation: tessera_sfm::model::rotation([0.9, 0.1, -0.05, 0.3]),
            translation: [15.0, -40.0, 2.0],
        };
        let utm = Crs::from_epsg(32632).unwrap();
        let mut text = String::from("WGS84 UTM 32N\n");
        for (k, p) in model_points.iter().enumerate() {
            let enu = truth.apply(*p);
            let world = utm.from_ecef(geodesy::enu_to_ecef(enu, &origin)).unwrap();
            for img in rec0.images.values() {
                let cam = &rec0.cameras[&img.camera_id];
                let px = cam.model.project(&cam.params, img.to_camera(*p)).unwrap();
                // In ODM's pixel convention: half a pixel less than COLMAP's.
                text.push_str(&format!(
                    "{:.4} {:.4} {:.4} {:.3} {:.3} {} gcp{k}\n",
                    world[0],
                    world[1],
                    world[2],
                    px[0] - 0.5,
                    px[1] - 0.5,
                    img.name
                ));
            }
        }
        text.push_str("431000 5205000 400 10 10 elsewhere.jpg lonely\n");
        let control = tessera_core::gcp::parse(&text).unwrap();
        let mut rec = rec0.clone();
        let placed = place(&mut rec, &control, false).unwrap();
        assert!(placed.rms_m < 0.01, "{placed:?}");
        assert!((placed.sim3.scale - 20.0).abs() < 0.01, "{placed:?}");
        let lonely = placed.points.iter().find(|p| p.name == "lonely").unwrap();
        assert!(!lonely.used && lonely.why.as_deref().unwrap().contains("0 registered"));
        // A camera centre lands where the survey's frame puts it.
        let ModelFrame::Enu { origin: o } = placed.frame else {
            panic!("{:?}", placed.frame)
        };
        let c = rec.images[&1].center();
        let want = geodesy::ecef_to_enu(
            geodesy::enu_to_ecef(truth.apply(rec0.images[&1].center()), &origin),
            &o,
        );
        assert!(
            tessera_sfm::align::distance(c, want) < 0.005,
            "{c:?} {want:?}"
        );
        // A surveyed height 3 m off shows in its point's residual, not hidden in a mean.
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        for l in lines.iter_mut().filter(|l| l.ends_with("gcp2")) {
            let mut f: Vec<String> = l.split_whitespace().map(String::from).collect();
            f[2] = format!("{}", f[2].parse::<f64>().unwrap() + 3.0);
            *l = f.join(" ");
        }
        let control = tessera_core::gcp::parse(&lines.join("\n")).unwrap();
        let mut rec = rec0.clone();
        let placed = place(&mut rec, &control, false).unwrap();
        let worst = placed
            .points
            .iter()
            .filter(|p| p.used)
            .max_by(|a, b| a.residual_m.unwrap().total_cmp(&b.residual_m.unwrap()))
            .unwrap();
        assert_eq!(worst.name, "gcp2", "{placed:?}");
        assert!(worst.residual_m.unwrap() > 0.5, "{worst:?}");
    }

    #[test]
    fn too_few_placeable_points_are_refused_with_each_reason() {
        let mut rec = model();
        let control = tessera_core::gcp::parse(
            "EPSG:32632\n431000 5205000 400 100 100 1.jpg a\n431000 5205000 400 120 100 2.jpg a\n431100 5205000 400 100 100 1.jpg b\n",
        )
        .unwrap();
        let e = place(&mut rec, &control, false).unwrap_err();
        assert!(e.contains("control point(s) can be placed in the model and georeferencing by ground control needs 3"), "{e}");
        assert!(e.contains("`b` marked in 1 registered photo(s)"), "{e}");
    }
}
