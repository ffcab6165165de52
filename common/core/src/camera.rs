//! COLMAP's camera models as names, ids and parameter counts: what a job spec may ask
//! for and what a stored model records. Projection lives with the geometry in
//! `tessera_sfm::camera`.

use serde::{Deserialize, Serialize};

/// A COLMAP camera model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum CameraModel {
    SimplePinhole,
    Pinhole,
    SimpleRadial,
    Radial,
    Opencv,
    OpencvFisheye,
    FullOpencv,
    Fov,
    SimpleRadialFisheye,
    RadialFisheye,
    ThinPrismFisheye,
}

/// Every model, in COLMAP's id order.
pub const ALL: [CameraModel; 11] = [
    CameraModel::SimplePinhole,
    CameraModel::Pinhole,
    CameraModel::SimpleRadial,
    CameraModel::Radial,
    CameraModel::Opencv,
    CameraModel::OpencvFisheye,
    CameraModel::FullOpencv,
    CameraModel::Fov,
    CameraModel::SimpleRadialFisheye,
    CameraModel::RadialFisheye,
    CameraModel::ThinPrismFisheye,
];

impl CameraModel {
    /// COLMAP's numeric id.
    pub fn id(self) -> i32 {
        ALL.iter().position(|m| *m == self).expect("listed") as i32
    }

    /// The model for a numeric id.
    pub fn from_id(id: i32) -> Option<Self> {
        usize::try_from(id).ok().and_then(|i| ALL.get(i).copied())
    }

    /// COLMAP's name (`SIMPLE_RADIAL`).
    pub fn name(self) -> &'static str {
        match self {
            CameraModel::SimplePinhole => "SIMPLE_PINHOLE",
            CameraModel::Pinhole => "PINHOLE",
            CameraModel::SimpleRadial => "SIMPLE_RADIAL",
            CameraModel::Radial => "RADIAL",
            CameraModel::Opencv => "OPENCV",
            CameraModel::OpencvFisheye => "OPENCV_FISHEYE",
            CameraModel::FullOpencv => "FULL_OPENCV",
            CameraModel::Fov => "FOV",
            CameraModel::SimpleRadialFisheye => "SIMPLE_RADIAL_FISHEYE",
            CameraModel::RadialFisheye => "RADIAL_FISHEYE",
            CameraModel::ThinPrismFisheye => "THIN_PRISM_FISHEYE",
        }
    }

    /// The model for a name.
    pub fn from_name(name: &str) -> Option<Self> {
        ALL.iter().copied().find(|m| m.name() == name)
    }

    /// Its parameters in COLMAP's order (`f, cx, cy, k` for `SIMPLE_RADIAL`).
    pub fn param_names(self) -> &'static [&'static str] {
        match self {
            CameraModel::SimplePinhole => &["f", "cx", "cy"],
            CameraModel::Pinhole => &["fx", "fy", "cx", "cy"],
            CameraModel::SimpleRadial | CameraModel::SimpleRadialFisheye => &["f", "cx", "cy", "k"],
            CameraModel::Radial | CameraModel::RadialFisheye => &["f", "cx", "cy", "k1", "k2"],
            CameraModel::Opencv => &["fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2"],
            CameraModel::OpencvFisheye => &["fx", "fy", "cx", "cy", "k1", "k2", "k3", "k4"],
            CameraModel::FullOpencv => &[
                "fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6",
            ],
            CameraModel::Fov => &["fx", "fy", "cx", "cy", "omega"],
            CameraModel::ThinPrismFisheye => &[
                "fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3", "k4", "sx1", "sy1",
            ],
        }
    }

    /// Whether it models a fisheye lens.
    pub fn is_fisheye(self) -> bool {
        self.name().contains("FISHEYE")
    }

    /// How many parameters it has.
    pub fn num_params(self) -> usize {
        match self {
            CameraModel::SimplePinhole => 3,
            CameraModel::Pinhole | CameraModel::SimpleRadial | CameraModel::SimpleRadialFisheye => {
                4
            }
            CameraModel::Radial | CameraModel::Fov | CameraModel::RadialFisheye => 5,
            CameraModel::Opencv | CameraModel::OpencvFisheye => 8,
            CameraModel::FullOpencv | CameraModel::ThinPrismFisheye => 12,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_names_as_many_parameters_as_it_has() {
        for m in ALL {
            assert_eq!(m.param_names().len(), m.num_params(), "{}", m.name());
            assert_eq!(CameraModel::from_name(m.name()), Some(m));
            assert_eq!(CameraModel::from_id(m.id()), Some(m));
        }
    }
}
