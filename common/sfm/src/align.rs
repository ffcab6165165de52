//! Placing a model by points whose true positions are known (ground control): each
//! control point triangulated from the pixels where it was marked, then the similarity
//! (scale, rotation, translation) that carries those points onto their true positions
//! in the least-squares sense, applied to every point and camera.
//!
//! The fit is Horn's closed form (the rotation as the unit quaternion of the largest
//! eigenvalue of a symmetric 4 × 4 matrix, the scale as Umeyama's), the triangulation a
//! linear estimate refined by Gauss-Newton on the reprojection error through the
//! camera's own model, so distorted lenses are triangulated as COLMAP sees them.

use crate::camera::Project;
use crate::model::{Reconstruction, rotation};

/// `x ↦ scale · R x + t`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sim3 {
    /// Scale.
    pub scale: f64,
    /// Rotation, row-major.
    pub rotation: [[f64; 3]; 3],
    /// Translation.
    pub translation: [f64; 3],
}

fn mul(r: &[[f64; 3]; 3], v: [f64; 3]) -> [f64; 3] {
    r.map(|row| row[0] * v[0] + row[1] * v[1] + row[2] * v[2])
}

fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Distance between two points.
pub fn distance(a: [f64; 3], b: [f64; 3]) -> f64 {
    dot(sub(a, b), sub(a, b)).sqrt()
}

/// Eigenvalues and eigenvectors (columns) of a symmetric `N × N` matrix by cyclic
/// Jacobi rotations: small matrices only, where it converges in a few sweeps.
fn symmetric_eigen<const N: usize>(mut a: [[f64; N]; N]) -> ([f64; N], [[f64; N]; N]) {
    let mut v = [[0.0; N]; N];
    for (i, row) in v.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    // An absolute bound on purpose: a relative one stops while the smallest eigenvalue
    // of an ill-conditioned matrix (a triangulation far from the origin) is still
    // wrong. 64 sweeps of a 4 × 4 cost microseconds.
    for _ in 0..64 {
        let off: f64 = (0..N)
            .flat_map(|i| (0..N).filter(move |j| *j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum();
        if off < 1e-30 {
            break;
        }
        for p in 0..N {
            for q in p + 1..N {
                if a[p][q].abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum().max(0.0) * 2.0 - 1.0;
                let t = t / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for row in a.iter_mut() {
                    let (akp, akq) = (row[p], row[q]);
                    row[p] = c * akp - s * akq;
                    row[q] = s * akp + c * akq;
                }
                let (row_p, row_q) = (a[p], a[q]);
                for k in 0..N {
                    a[p][k] = c * row_p[k] - s * row_q[k];
                    a[q][k] = s * row_p[k] + c * row_q[k];
                }
                for row in v.iter_mut() {
                    let (vkp, vkq) = (row[p], row[q]);
                    row[p] = c * vkp - s * vkq;
                    row[q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut values = [0.0; N];
    for (i, value) in values.iter_mut().enumerate() {
        *value = a[i][i];
    }
    (values, v)
}

/// The eigenvector (unit length) of a symmetric matrix's largest eigenvalue, or with
/// `largest` false its smallest.
fn extreme_eigenvector<const N: usize>(a: [[f64; N]; N], largest: bool) -> [f64; N] {
    let (values, vectors) = symmetric_eigen(a);
    let order = |i: &usize, j: &usize| values[*i].total_cmp(&values[*j]);
    let best = if largest {
        (0..N).max_by(order)
    } else {
        (0..N).min_by(order)
    }
    .unwrap_or(0);
    let mut out = [0.0; N];
    for (k, o) in out.iter_mut().enumerate() {
        *o = vectors[k][best];
    }
    out
}

impl Sim3 {
    /// `scale · R p + t`.
    pub fn apply(&self, p: [f64; 3]) -> [f64; 3] {
        let r = mul(&self.rotation, p);
        [0, 1, 2].map(|k| self.scale * r[k] + self.translation[k])
    }

    /// The similarity carrying `from[i]` onto `to[i]` with the least squared error;
    /// `None` with fewer than three points or points on one line (no rotation is
    /// determined then).
    pub fn fit(from: &[[f64; 3]], to: &[[f64; 3]]) -> Option<Sim3> {
        if from.len() != to.len() || from.len() < 3 {
            return None;
        }
        let n = from.len() as f64;
        let centroid = |ps: &[[f64; 3]]| {
            let mut c = [0.0; 3];
            for p in ps {
                for k in 0..3 {
                    c[k] += p[k] / n;
                }
            }
            c
        };
        let (cf, ct) = (centroid(from), centroid(to));
        let mut s = [[0.0; 3]; 3];
        let mut spread = 0.0;
        for (a, b) in from.iter().zip(to) {
            let (a, b) = (sub(*a, cf), sub(*b, ct));
            spread += dot(a, a);
            for i in 0..3 {
                for j in 0..3 {
                    s[i][j] += a[i] * b[j];
                }
            }
        }
        if spread <= f64::EPSILON {
            return None;
        }
        // Collinear points leave a rotation about their line free.
        let mut cov = [[0.0; 3]; 3];
        for a in from {
            let a = sub(*a, cf);
            for i in 0..3 {
                for j in 0..3 {
                    cov[i][j] += a[i] * a[j];
                }
            }
        }
        let (spreads, _) = symmetric_eigen(cov);
        let mut sorted = spreads;
        sorted.sort_by(f64::total_cmp);
        if sorted[1] <= 1e-9 * sorted[2] {
            return None;
        }
        let [[sxx, sxy, sxz], [syx, syy, syz], [szx, szy, szz]] = s;
        let q = extreme_eigenvector(
            [
                [sxx + syy + szz, syz - szy, szx - sxz, sxy - syx],
                [syz - szy, sxx - syy - szz, sxy + syx, szx + sxz],
                [szx - sxz, sxy + syx, -sxx + syy - szz, syz + szy],
                [sxy - syx, szx + sxz, syz + szy, -sxx - syy + szz],
            ],
            true,
        );
        let r = rotation(q);
        let along: f64 = from
            .iter()
            .zip(to)
            .map(|(a, b)| dot(sub(*b, ct), mul(&r, sub(*a, cf))))
            .sum();
        let scale = along / spread;
        if !(scale.is_finite() && scale > 0.0) {
            return None;
        }
        let rc = mul(&r, cf);
        Some(Sim3 {
            scale,
            rotation: r,
            translation: [0, 1, 2].map(|k| ct[k] - scale * rc[k]),
        })
    }

    /// Every point and camera of `rec` carried by this similarity. A camera keeps what
    /// it sees: its world-to-camera pose becomes `R_c Rᵀ`, `s t_c − R_c Rᵀ t`.
    pub fn transform(&self, rec: &mut Reconstruction) {
        for p in rec.points.values_mut() {
            p.xyz = self.apply(p.xyz);
        }
        let rt = transpose(&self.rotation);
        for img in rec.images.values_mut() {
            let rc = rotation(img.qvec);
            let r = matmul(&rc, &rt);
            let rt_t = mul(&r, self.translation);
            img.tvec = [0, 1, 2].map(|k| self.scale * img.tvec[k] - rt_t[k]);
            img.qvec = quaternion(&r);
        }
    }
}

pub(crate) fn transpose(r: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    [0, 1, 2].map(|i| [r[0][i], r[1][i], r[2][i]])
}

pub(crate) fn matmul(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    [0, 1, 2].map(|i| [0, 1, 2].map(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
}

/// The unit quaternion (w, x, y, z, w ≥ 0) of a rotation matrix.
pub fn quaternion(r: &[[f64; 3]; 3]) -> [f64; 4] {
    // The quaternion is the eigenvector of the largest eigenvalue of this symmetric
    // matrix (Bar-Itzhack), which holds for every rotation, near 180° too.
    let k = [
        [
            r[0][0] + r[1][1] + r[2][2],
            r[2][1] - r[1][2],
            r[0][2] - r[2][0],
            r[1][0] - r[0][1],
        ],
        [
            r[2][1] - r[1][2],
            r[0][0] - r[1][1] - r[2][2],
            r[0][1] + r[1][0],
            r[0][2] + r[2][0],
        ],
        [
            r[0][2] - r[2][0],
            r[0][1] + r[1][0],
            r[1][1] - r[0][0] - r[2][2],
            r[1][2] + r[2][1],
        ],
        [
            r[1][0] - r[0][1],
            r[0][2] + r[2][0],
            r[1][2] + r[2][1],
            r[2][2] - r[0][0] - r[1][1],
        ],
    ];
    let q = extreme_eigenvector(k, true);
    let sign = if q[0] < 0.0 { -1.0 } else { 1.0 };
    q.map(|v| v * sign)
}

/// Focal lengths and principal point of a camera, by COLMAP's parameter names.
fn pinhole(cam: &crate::model::Camera) -> (f64, f64, f64, f64) {
    let names = cam.model.param_names();
    let at = |n: &str| {
        names
            .iter()
            .position(|p| *p == n)
            .and_then(|i| cam.params.get(i).copied())
    };
    let f = at("f").or(at("fx")).unwrap_or(1.0);
    (
        f,
        at("fy").unwrap_or(f),
        at("cx").unwrap_or(0.0),
        at("cy").unwrap_or(0.0),
    )
}

/// Where the pixels `marks` (image id, pixel) see one point: a linear estimate refined
/// on the reprojection error through each camera's model. `None` with fewer than two
/// registered images among the marks, or a point behind a camera that marks it.
pub fn triangulate(rec: &Reconstruction, marks: &[(u32, [f64; 2])]) -> Option<[f64; 3]> {
    let views: Vec<_> = marks
        .iter()
        .filter_map(|(id, px)| {
            let img = rec.images.get(id)?;
            let cam = rec.cameras.get(&img.camera_id)?;
            Some((img, cam, *px))
        })
        .collect();
    if views.len() < 2 {
        return None;
    }
    // Linear: each view's pinhole rows x·P₃ − P₁ and y·P₃ − P₂ (distortion left to the
    // refinement).
    let mut ata = [[0.0; 4]; 4];
    for (img, cam, px) in &views {
        let (fx, fy, cx, cy) = pinhole(cam);
        let r = rotation(img.qvec);
        let t = img.tvec;
        let row = |i: usize| [r[i][0], r[i][1], r[i][2], t[i]];
        let (r0, r1, r2) = (row(0), row(1), row(2));
        let u = (px[0] - cx) / fx;
        let v = (px[1] - cy) / fy;
        for eq in [
            [0, 1, 2, 3].map(|k| u * r2[k] - r0[k]),
            [0, 1, 2, 3].map(|k| v * r2[k] - r1[k]),
        ] {
            for i in 0..4 {
                for j in 0..4 {
                    ata[i][j] += eq[i] * eq[j];
                }
            }
        }
    }
    let h = extreme_eigenvector(ata, false);
    if h[3].abs() < 1e-12 {
        return None;
    }
    let mut x = [h[0] / h[3], h[1] / h[3], h[2] / h[3]];
    let residuals = |x: [f64; 3]| -> Option<Vec<f64>> {
        let mut out = Vec::with_capacity(2 * views.len());
        for (img, cam, px) in &views {
            let p = cam.model.project(&cam.params, img.to_camera(x))?;
            out.push(p[0] - px[0]);
            out.push(p[1] - px[1]);
        }
        Some(out)
    };
    for _ in 0..20 {
        let r0 = residuals(x)?;
        let step = 1e-6 * x.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        let mut jac = vec![[0.0; 3]; r0.len()];
        for k in 0..3 {
            let mut xp = x;
            xp[k] += step;
            let mut xm = x;
            xm[k] -= step;
            let (rp, rm) = (residuals(xp)?, residuals(xm)?);
            for (i, row) in jac.iter_mut().enumerate() {
                row[k] = (rp[i] - rm[i]) / (2.0 * step);
            }
        }
        let mut jtj = [[0.0; 3]; 3];
        let mut jtr = [0.0; 3];
        for (row, r) in jac.iter().zip(&r0) {
            for i in 0..3 {
                jtr[i] += row[i] * r;
                for j in 0..3 {
                    jtj[i][j] += row[i] * row[j];
                }
            }
        }
        let Some(dx) = solve3(jtj, jtr) else {
            break;
        };
        x = [0, 1, 2].map(|k| x[k] - dx[k]);
        if dot(dx, dx).sqrt() < 1e-10 * x.iter().fold(1.0f64, |m, v| m.max(v.abs())) {
            break;
        }
    }
    residuals(x)?;
    Some(x)
}

/// `a x = b` for a 3 × 3 `a` by Cramer's rule; `None` when it is singular.
fn solve3(a: [[f64; 3]; 3], b: [f64; 3]) -> Option<[f64; 3]> {
    let det = |m: &[[f64; 3]; 3]| {
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    };
    let d = det(&a);
    let scale = a.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
    if d.abs() <= 1e-14 * scale.powi(3) || !d.is_finite() {
        return None;
    }
    Some([0, 1, 2].map(|col| {
        let mut m = a;
        for row in 0..3 {
            m[row][col] = b[row];
        }
        det(&m) / d
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Camera, Image};
    use tessera_core::camera::CameraModel;

    fn known() -> Sim3 {
        // 37° about a tilted axis, scale 2.5, a UTM-sized shift.
        let axis = [0.3f64, -0.5, 0.81];
        let n = dot(axis, axis).sqrt();
        let half = 37f64.to_radians() / 2.0;
        let q = [
            half.cos(),
            half.sin() * axis[0] / n,
            half.sin() * axis[1] / n,
            half.sin() * axis[2] / n,
        ];
        Sim3 {
            scale: 2.5,
            rotation: rotation(q),
            translation: [431_000.0, 5_205_000.0, 420.0],
        }
    }

    #[test]
    fn a_known_similarity_is_recovered_from_its_points() {
        let s = known();
        let from = [
            [0.0, 0.0, 0.0],
            [10.0, 0.0, 1.0],
            [0.0, 7.0, -2.0],
            [3.0, 4.0, 5.0],
        ];
        let to: Vec<[f64; 3]> = from.iter().map(|p| s.apply(*p)).collect();
        let fit = Sim3::fit(&from, &to).unwrap();
        assert!((fit.scale - 2.5).abs() < 1e-9, "{fit:?}");
        for (a, b) in from.iter().zip(&to) {
            assert!(distance(fit.apply(*a), *b) < 1e-6);
        }
        // Points on one line determine no rotation.
        let line = [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]];
        let on: Vec<[f64; 3]> = line.iter().map(|p| s.apply(*p)).collect();
        assert_eq!(Sim3::fit(&line, &on), None);
        assert_eq!(Sim3::fit(&from[..2], &to[..2]), None);
    }

    #[test]
    fn a_quaternion_survives_the_round_trip_near_half_a_turn() {
        for q in [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.01, 0.0, 0.99995, 0.0],
            [0.5, 0.5, -0.5, 0.5],
        ] {
            let back = quaternion(&rotation(q));
            let r = rotation(back);
            let want = rotation(q);
            for i in 0..3 {
                for j in 0..3 {
                    assert!((r[i][j] - want[i][j]).abs() < 1e-9, "{q:?} -> {back:?}");
                }
            }
        }
    }

    fn two_cameras() -> Reconstruction {
        let mut rec = Reconstruction::default();
        rec.cameras.insert(
            1,
            Camera {
                id: 1,
                model: CameraModel::SimpleRadial,
                width: 1000,
                height: 800,
                params: vec![900.0, 500.0, 400.0, -0.05],
            },
        );
        for (id, q, t) in [
            (1, [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 5.0]),
            (2, [0.98, 0.0, 0.2, 0.0], [-1.5, 0.2, 5.2]),
        ] {
            rec.images.insert(
                id,
                Image {
                    id,
                    qvec: q,
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
    fn a_marked_point_is_triangulated_through_the_lens_and_follows_the_model() {
        let mut rec = two_cameras();
        let truth = [0.4, -0.3, 1.2];
        let marks: Vec<(u32, [f64; 2])> = rec
            .images
            .values()
            .map(|img| {
                let cam = &rec.cameras[&img.camera_id];
                (
                    img.id,
                    cam.model
                        .project(&cam.params, img.to_camera(truth))
                        .unwrap(),
                )
            })
            .collect();
        let x = triangulate(&rec, &marks).unwrap();
        assert!(distance(x, truth) < 1e-6, "{x:?}");
        assert_eq!(triangulate(&rec, &marks[..1]), None);
        // Moved by a similarity, the model sees the same pixels at the moved point.
        let s = known();
        s.transform(&mut rec);
        let moved = triangulate(&rec, &marks).unwrap();
        assert!(distance(moved, s.apply(truth)) < 1e-5, "{moved:?}");
        for img in rec.images.values() {
            let cam = &rec.cameras[&img.camera_id];
            let px = cam
                .model
                .project(&cam.params, img.to_camera(s.apply(truth)))
                .unwrap();
            let want = marks.iter().find(|(id, _)| *id == img.id).unwrap().1;
            assert!((px[0] - want[0]).abs() < 1e-6 && (px[1] - want[1]).abs() < 1e-6);
        }
    }
}
