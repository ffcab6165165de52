//! COLMAP's text model format (`cameras.txt`, `images.txt`, `points3D.txt`).

use crate::camera::CameraModel;
use crate::error::ModelError;
use crate::model::{Camera, Image, NO_POINT, Observation, Point2D, Point3D, Reconstruction};
use crate::model_bin::atomic_write;
use std::fmt::Write as _;
use std::path::Path;

struct Lines<'a> {
    path: &'a Path,
    what: &'static str,
    lines: Vec<(usize, &'a str)>,
    at: usize,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str, path: &'a Path, what: &'static str) -> Self {
        let lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
            .collect();
        Lines {
            path,
            what,
            lines,
            at: 0,
        }
    }
    fn corrupt(&self, line: usize, why: impl Into<String>) -> ModelError {
        ModelError::Corrupt {
            path: self.path.to_path_buf(),
            what: self.what,
            why: why.into(),
            at: line,
        }
    }
    fn next(&mut self) -> Option<(usize, &'a str)> {
        let l = self.lines.get(self.at).copied();
        self.at += 1;
        l
    }
}

fn num<T: std::str::FromStr>(
    l: &Lines<'_>,
    line: usize,
    s: Option<&str>,
    what: &str,
) -> Result<T, ModelError> {
    s.ok_or_else(|| l.corrupt(line, format!("missing {what}")))?
        .parse()
        .map_err(|_| l.corrupt(line, format!("{what} is not a number")))
}

fn read_text(path: &Path) -> Result<String, ModelError> {
    std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Read the three text files from `dir` and check they agree.
pub fn read(dir: &Path) -> Result<Reconstruction, ModelError> {
    let mut rec = Reconstruction::default();
    let path = dir.join("cameras.txt");
    let text = read_text(&path)?;
    let mut l = Lines::new(&text, &path, "cameras.txt");
    while let Some((n, line)) = l.next() {
        let mut f = line.split_whitespace();
        let id = num(&l, n, f.next(), "camera id")?;
        let name = f.next().ok_or_else(|| l.corrupt(n, "missing model"))?;
        let model = CameraModel::from_name(name)
            .ok_or_else(|| l.corrupt(n, format!("unknown camera model {name}")))?;
        let (width, height) = (
            num(&l, n, f.next(), "width")?,
            num(&l, n, f.next(), "height")?,
        );
        let params: Vec<f64> = f
            .map(|s| num(&l, n, Some(s), "parameter"))
            .collect::<Result<_, _>>()?;
        if params.len() != model.num_params() {
            return Err(l.corrupt(
                n,
                format!(
                    "{} needs {} parameters, found {}",
                    model.name(),
                    model.num_params(),
                    params.len()
                ),
            ));
        }
        rec.cameras.insert(
            id,
            Camera {
                id,
                model,
                width,
                height,
                params,
            },
        );
    }

    let path = dir.join("images.txt");
    let text = read_text(&path)?;
    // Image lines come in pairs, and the keypoint line may be empty: keep empty lines.
    let raw: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, s)| (i + 1, s.trim()))
        .filter(|(_, s)| !s.starts_with('#'))
        .collect();
    let l = Lines {
        path: &path,
        what: "images.txt",
        lines: Vec::new(),
        at: 0,
    };
    let mut i = 0;
    while i < raw.len() {
        let (n, line) = raw[i];
        if line.is_empty() {
            i += 1;
            continue;
        }
        let mut f = line.split_whitespace();
        let id = num(&l, n, f.next(), "image id")?;
        let mut q = [0.0; 4];
        for (k, v) in q.iter_mut().enumerate() {
            *v = num(&l, n, f.next(), ["QW", "QX", "QY", "QZ"][k])?;
        }
        let mut t = [0.0; 3];
        for (k, v) in t.iter_mut().enumerate() {
            *v = num(&l, n, f.next(), ["TX", "TY", "TZ"][k])?;
        }
        let camera_id = num(&l, n, f.next(), "camera id")?;
        let name = f.collect::<Vec<_>>().join(" ");
        if name.is_empty() {
            return Err(l.corrupt(n, "missing image name"));
        }
        let (n2, pts) = raw.get(i + 1).copied().unwrap_or((n + 1, ""));
        let vals: Vec<&str> = pts.split_whitespace().collect();
        if !vals.len().is_multiple_of(3) {
            return Err(l.corrupt(n2, "keypoints must come in X Y POINT3D_ID triples"));
        }
        let mut points2d = Vec::with_capacity(vals.len() / 3);
        for c in vals.chunks(3) {
            let pid: i64 = num(&l, n2, Some(c[2]), "point id")?;
            points2d.push(Point2D {
                xy: [num(&l, n2, Some(c[0]), "x")?, num(&l, n2, Some(c[1]), "y")?],
                point3d_id: if pid < 0 { NO_POINT } else { pid as u64 },
            });
        }
        rec.images.insert(
            id,
            Image {
                id,
                qvec: q,
                tvec: t,
                camera_id,
                name,
                points2d,
            },
        );
        i += 2;
    }

    let path = dir.join("points3D.txt");
    let text = read_text(&path)?;
    let mut l = Lines::new(&text, &path, "points3D.txt");
    while let Some((n, line)) = l.next() {
        let v: Vec<&str> = line.split_whitespace().collect();
        if v.len() < 8 || !(v.len() - 8).is_multiple_of(2) {
            return Err(l.corrupt(
                n,
                "expected ID X Y Z R G B ERROR then IMAGE_ID POINT2D_IDX pairs",
            ));
        }
        let id = num(&l, n, Some(v[0]), "point id")?;
        let xyz = [
            num(&l, n, Some(v[1]), "X")?,
            num(&l, n, Some(v[2]), "Y")?,
            num(&l, n, Some(v[3]), "Z")?,
        ];
        let rgb = [
            num(&l, n, Some(v[4]), "R")?,
            num(&l, n, Some(v[5]), "G")?,
            num(&l, n, Some(v[6]), "B")?,
        ];
        let error = num(&l, n, Some(v[7]), "error")?;
        let track = v[8..]
            .chunks(2)
            .map(|c| {
                Ok(Observation {
                    image_id: num(&l, n, Some(c[0]), "image id")?,
                    point2d_idx: num(&l, n, Some(c[1]), "keypoint index")?,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        rec.points.insert(
            id,
            Point3D {
                id,
                xyz,
                rgb,
                error,
                track,
            },
        );
    }
    rec.validate()?;
    Ok(rec)
}

/// Write the three text files into `dir`.
pub fn write(rec: &Reconstruction, dir: &Path) -> Result<(), ModelError> {
    std::fs::create_dir_all(dir).map_err(|source| ModelError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut s = String::from(
        "# Camera list with one line of data per camera:\n#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n",
    );
    let _ = writeln!(s, "# Number of cameras: {}", rec.cameras.len());
    for c in rec.cameras.values() {
        let _ = write!(s, "{} {} {} {}", c.id, c.model.name(), c.width, c.height);
        for p in &c.params {
            let _ = write!(s, " {p}");
        }
        s.push('\n');
    }
    atomic_write(&dir.join("cameras.txt"), s.as_bytes())?;

    let mut s = String::from(
        "# Image list with two lines of data per image:\n#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME\n#   POINTS2D[] as (X, Y, POINT3D_ID)\n",
    );
    let _ = writeln!(s, "# Number of images: {}", rec.images.len());
    for i in rec.images.values() {
        let [qw, qx, qy, qz] = i.qvec;
        let [tx, ty, tz] = i.tvec;
        let _ = writeln!(
            s,
            "{} {qw} {qx} {qy} {qz} {tx} {ty} {tz} {} {}",
            i.id, i.camera_id, i.name
        );
        let pts: Vec<String> = i
            .points2d
            .iter()
            .map(|p| {
                let id = if p.point3d_id == NO_POINT {
                    "-1".to_string()
                } else {
                    p.point3d_id.to_string()
                };
                format!("{} {} {id}", p.xy[0], p.xy[1])
            })
            .collect();
        s += &pts.join(" ");
        s.push('\n');
    }
    atomic_write(&dir.join("images.txt"), s.as_bytes())?;

    let mut s = String::from(
        "# 3D point list with one line of data per point:\n#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)\n",
    );
    let _ = writeln!(s, "# Number of points: {}", rec.points.len());
    for p in rec.points.values() {
        let _ = write!(
            s,
            "{} {} {} {} {} {} {} {}",
            p.id, p.xyz[0], p.xyz[1], p.xyz[2], p.rgb[0], p.rgb[1], p.rgb[2], p.error
        );
        for o in &p.track {
            let _ = write!(s, " {} {}", o.image_id, o.point2d_idx);
        }
        s.push('\n');
    }
    atomic_write(&dir.join("points3D.txt"), s.as_bytes())
}
