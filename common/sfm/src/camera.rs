//! Projection through COLMAP's camera models (the distortion formulas of COLMAP's
//! `models.h`). The models themselves are `tessera_core::camera::CameraModel`.

pub use tessera_core::camera::{ALL, CameraModel};

/// Projection from camera coordinates to pixels.
pub trait Project {
    /// Project a point in camera coordinates to pixels with `params` in the model's
    /// order; `None` behind the camera.
    fn project(self, params: &[f64], xc: [f64; 3]) -> Option<[f64; 2]>;
}

impl Project for CameraModel {
    fn project(self, p: &[f64], xc: [f64; 3]) -> Option<[f64; 2]> {
        if xc[2] <= f64::EPSILON {
            return None;
        }
        let (u, v) = (xc[0] / xc[2], xc[1] / xc[2]);
        let (fx, fy, cx, cy, du, dv) = match self {
            CameraModel::SimplePinhole => (p[0], p[0], p[1], p[2], 0.0, 0.0),
            CameraModel::Pinhole => (p[0], p[1], p[2], p[3], 0.0, 0.0),
            CameraModel::SimpleRadial => {
                let r2 = u * u + v * v;
                let radial = p[3] * r2;
                (p[0], p[0], p[1], p[2], u * radial, v * radial)
            }
            CameraModel::Radial => {
                let r2 = u * u + v * v;
                let radial = p[3] * r2 + p[4] * r2 * r2;
                (p[0], p[0], p[1], p[2], u * radial, v * radial)
            }
            CameraModel::Opencv => {
                let (k1, k2, p1, p2) = (p[4], p[5], p[6], p[7]);
                let (u2, v2, uv) = (u * u, v * v, u * v);
                let r2 = u2 + v2;
                let radial = k1 * r2 + k2 * r2 * r2;
                (
                    p[0],
                    p[1],
                    p[2],
                    p[3],
                    u * radial + 2.0 * p1 * uv + p2 * (r2 + 2.0 * u2),
                    v * radial + 2.0 * p2 * uv + p1 * (r2 + 2.0 * v2),
                )
            }
            CameraModel::FullOpencv => {
                let (k1, k2, p1, p2, k3, k4, k5, k6) =
                    (p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]);
                let (u2, v2, uv) = (u * u, v * v, u * v);
                let r2 = u2 + v2;
                let (r4, r6) = (r2 * r2, r2 * r2 * r2);
                let radial =
                    (1.0 + k1 * r2 + k2 * r4 + k3 * r6) / (1.0 + k4 * r2 + k5 * r4 + k6 * r6);
                (
                    p[0],
                    p[1],
                    p[2],
                    p[3],
                    u * radial + 2.0 * p1 * uv + p2 * (r2 + 2.0 * u2) - u,
                    v * radial + 2.0 * p2 * uv + p1 * (r2 + 2.0 * v2) - v,
                )
            }
            CameraModel::OpencvFisheye => {
                let (d_u, d_v) = fisheye(u, v, |t2| {
                    p[4] * t2 + p[5] * t2 * t2 + p[6] * t2 * t2 * t2 + p[7] * t2 * t2 * t2 * t2
                });
                (p[0], p[1], p[2], p[3], d_u, d_v)
            }
            CameraModel::SimpleRadialFisheye => {
                let (d_u, d_v) = fisheye(u, v, |t2| p[3] * t2);
                (p[0], p[0], p[1], p[2], d_u, d_v)
            }
            CameraModel::RadialFisheye => {
                let (d_u, d_v) = fisheye(u, v, |t2| p[3] * t2 + p[4] * t2 * t2);
                (p[0], p[0], p[1], p[2], d_u, d_v)
            }
            CameraModel::Fov => {
                let omega = p[4];
                let r = (u * u + v * v).sqrt();
                let factor = if omega.abs() < 1e-12 || r < 1e-12 {
                    1.0
                } else {
                    (r * 2.0 * (omega / 2.0).tan()).atan() / (r * omega)
                };
                (p[0], p[1], p[2], p[3], u * factor - u, v * factor - v)
            }
            CameraModel::ThinPrismFisheye => {
                let (k1, k2, p1, p2, k3, k4, sx1, sy1) =
                    (p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]);
                let r = (u * u + v * v).sqrt();
                let (uu, vv) = if r > f64::EPSILON {
                    let theta = r.atan();
                    (u * theta / r, v * theta / r)
                } else {
                    (u, v)
                };
                let (u2, v2, uv) = (uu * uu, vv * vv, uu * vv);
                let r2 = u2 + v2;
                let (r4, r6, r8) = (r2 * r2, r2 * r2 * r2, r2 * r2 * r2 * r2);
                let radial = k1 * r2 + k2 * r4 + k3 * r6 + k4 * r8;
                let du = uu * radial + 2.0 * p1 * uv + p2 * (r2 + 2.0 * u2) + sx1 * r2;
                let dv = vv * radial + 2.0 * p2 * uv + p1 * (r2 + 2.0 * v2) + sy1 * r2;
                (p[0], p[1], p[2], p[3], uu + du - u, vv + dv - v)
            }
        };
        Some([fx * (u + du) + cx, fy * (v + dv) + cy])
    }
}

/// Fisheye distortion offset: θ = atan(r), θd = θ (1 + poly(θ²)), offset = u·θd/r − u.
fn fisheye(u: f64, v: f64, poly: impl Fn(f64) -> f64) -> (f64, f64) {
    let r = (u * u + v * v).sqrt();
    if r <= f64::EPSILON {
        return (0.0, 0.0);
    }
    let theta = r.atan();
    let thetad = theta * (1.0 + poly(theta * theta));
    (u * thetad / r - u, v * thetad / r - v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_names_and_param_counts_round_trip() {
        for (i, m) in ALL.iter().enumerate() {
            assert_eq!(m.id(), i as i32);
            assert_eq!(CameraModel::from_id(i as i32), Some(*m));
            assert_eq!(CameraModel::from_name(m.name()), Some(*m));
        }
        assert_eq!(CameraModel::from_id(11), None);
        assert_eq!(CameraModel::from_id(-1), None);
    }

    #[test]
    fn undistorted_models_agree_on_the_principal_ray() {
        for m in ALL {
            let mut p = vec![0.0; m.num_params()];
            p[0] = 500.0;
            match m.num_params() {
                3 | 4
                    if matches!(
                        m,
                        CameraModel::SimplePinhole
                            | CameraModel::SimpleRadial
                            | CameraModel::SimpleRadialFisheye
                    ) =>
                {
                    p[1] = 320.0;
                    p[2] = 240.0;
                }
                5 if matches!(m, CameraModel::Radial | CameraModel::RadialFisheye) => {
                    p[1] = 320.0;
                    p[2] = 240.0;
                }
                _ => {
                    p[1] = 500.0;
                    p[2] = 320.0;
                    p[3] = 240.0;
                }
            }
            let px = m.project(&p, [0.0, 0.0, 2.0]).unwrap();
            assert!(
                (px[0] - 320.0).abs() < 1e-9 && (px[1] - 240.0).abs() < 1e-9,
                "{m:?}: {px:?}"
            );
            assert!(
                m.project(&p, [0.0, 0.0, -1.0]).is_none(),
                "{m:?} behind the camera"
            );
        }
    }

    #[test]
    fn simple_radial_matches_the_formula() {
        let p = [1000.0, 400.0, 300.0, 0.1];
        let [x, y] = CameraModel::SimpleRadial
            .project(&p, [0.2, -0.1, 1.0])
            .unwrap();
        let r2: f64 = 0.04 + 0.01;
        assert!((x - (1000.0 * 0.2 * (1.0 + 0.1 * r2) + 400.0)).abs() < 1e-9);
        assert!((y - (1000.0 * -0.1 * (1.0 + 0.1 * r2) + 300.0)).abs() < 1e-9);
    }
}
