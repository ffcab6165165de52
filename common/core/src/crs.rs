//! The coordinate reference system a survey export (LAS, camera GeoJSON) is written in,
//! and how a georeferenced model's own frame (east-north-up or ECEF, see
//! [`crate::geodesy`]) is carried into it.
//!
//! Definitions (proj strings and WKT) are the EPSG registry as `crs-definitions` ships
//! it; projections are computed by `proj4rs`, a Rust port of proj4js. Both are compiled
//! into every binary, so a Lambda, the Batch container and the CLI convert alike with no
//! PROJ library, database or grid file to install. A CRS whose definition needs a grid
//! file (`+nadgrids`, `+geoidgrids`) is refused by name rather than converted without it.
//! The tests read the files back with PROJ itself (pyproj), which checks this crate's
//! arithmetic against the reference implementation.
//!
//! Heights are carried through unchanged in every CRS: for a GPS-aligned model they are
//! the photos' EXIF altitudes (above sea level, as the engine takes them), for a model
//! placed by ground control the control file's heights. No geoid model ships, so a code
//! that names a vertical datum (a compound CRS) is refused rather than written with
//! heights it does not describe.

use crate::geodesy::{self, Geodetic};
use proj4rs::Proj;
use std::fmt;
use std::str::FromStr;

/// The output CRS a spec asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputCrs {
    /// The UTM zone (WGS 84, north or south) of the model's origin photo.
    Auto,
    /// An EPSG code.
    Epsg(u32),
}

impl fmt::Display for OutputCrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputCrs::Auto => f.write_str("auto"),
            OutputCrs::Epsg(n) => write!(f, "EPSG:{n}"),
        }
    }
}

impl FromStr for OutputCrs {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(OutputCrs::Auto);
        }
        let code = t
            .get(..5)
            .filter(|p| p.eq_ignore_ascii_case("epsg:"))
            .and_then(|_| t[5..].parse::<u32>().ok())
            .ok_or_else(|| {
                format!("`{s}` is not a coordinate system; use EPSG:NNNN (for example EPSG:32633) or auto (the UTM zone of the photos)")
            })?;
        Ok(OutputCrs::Epsg(code))
    }
}

impl serde::Serialize for OutputCrs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for OutputCrs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a CRS cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CrsError {
    /// Not in the EPSG registry Tessera carries.
    #[error(
        "EPSG:{0} is not a coordinate system Tessera knows; use a projected, geographic or geocentric EPSG code (for example EPSG:32633, or auto for the photos' UTM zone)"
    )]
    Unknown(u32),
    /// Known, but not convertible here.
    #[error("EPSG:{code} cannot be written: {why}")]
    Unsupported {
        /// The code.
        code: u32,
        /// What stands in the way.
        why: String,
    },
    /// A point that the projection cannot map (outside its area, for example).
    #[error("a point cannot be converted to EPSG:{code}: {why}")]
    Point {
        /// The code.
        code: u32,
        /// What the projection said.
        why: String,
    },
}

/// What a CRS's coordinates are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrsKind {
    /// Easting and northing in the CRS's linear unit, ellipsoidal height in metres.
    Projected,
    /// Longitude and latitude in degrees, ellipsoidal height in metres.
    Geographic,
    /// Earth-centred X, Y, Z in metres.
    Geocentric,
}

/// A usable output CRS.
#[derive(Debug)]
pub struct Crs {
    /// Its EPSG code.
    pub code: u32,
    /// Its name as the registry gives it (`WGS 84 / UTM zone 33N`).
    pub name: String,
    /// What its coordinates are.
    pub kind: CrsKind,
    /// Its OGC WKT, as LAS 1.4 stores it.
    pub wkt: &'static str,
    proj: Proj,
    /// The ECEF frame every conversion passes through, parsed once.
    geocentric: Proj,
}

/// The ECEF frame, the source of every conversion.
fn geocentric() -> Proj {
    Proj::from_proj_string("+proj=geocent +datum=WGS84 +units=m +no_defs")
        .expect("the WGS 84 geocentric definition parses")
}

impl Crs {
    /// The CRS of an EPSG code, if it can be written.
    pub fn from_epsg(code: u32) -> Result<Crs, CrsError> {
        let def = u16::try_from(code)
            .ok()
            .and_then(crs_definitions::from_code)
            .ok_or(CrsError::Unknown(code))?;
        let unsupported = |why: String| CrsError::Unsupported { code, why };
        // `@null` is PROJ's "no shift" grid, which needs no file (Web Mercator's).
        let grid = def
            .proj4
            .split_whitespace()
            .any(|p| p.starts_with("+nadgrids=") && p != "+nadgrids=@null");
        if grid || def.proj4.contains("+geoidgrids") {
            return Err(unsupported(
                "its datum shift needs a grid file, and Tessera ships none; pick the WGS 84 (or ETRS89/NAD83 without grids) variant of the system".into(),
            ));
        }
        let wkt = def.wkt.trim_start();
        if ["COMPD_CS", "COMPOUNDCRS", "VERT_CS", "VERTCRS"]
            .iter()
            .any(|k| wkt.starts_with(k))
        {
            return Err(unsupported(
                "it names a vertical datum, and Tessera writes heights as it has them (no geoid model ships); use its horizontal system's code".into(),
            ));
        }
        let proj = Proj::from_proj_string(def.proj4).map_err(|e| {
            unsupported(format!(
                "its projection ({}) is not one Tessera can compute: {e}",
                def.proj4
            ))
        })?;
        if !proj.has_forward() {
            return Err(unsupported(format!(
                "its projection ({}) has no forward formula",
                def.proj4
            )));
        }
        let kind = if proj.is_geocent() {
            CrsKind::Geocentric
        } else if proj.is_latlong() {
            CrsKind::Geographic
        } else {
            CrsKind::Projected
        };
        let name = def.wkt.split('"').nth(1).unwrap_or("unnamed").to_string();
        Ok(Crs {
            code,
            name,
            kind,
            wkt: def.wkt,
            proj,
            geocentric: geocentric(),
        })
    }

    /// The WGS 84 UTM zone of `g`: 326zz in the north, 327zz in the south, by the
    /// six-degree rule alone (without the Norway and Svalbard exceptions, so western
    /// Norway gets zone 31 where maps use 32; ask for the code there).
    pub fn utm_code(g: &Geodetic) -> u32 {
        let zone = (((g.lon + 180.0) / 6.0).floor() as i64).rem_euclid(60) as u32 + 1;
        if g.lat >= 0.0 {
            32600 + zone
        } else {
            32700 + zone
        }
    }

    /// `p` (ECEF metres) in this CRS: degrees for a geographic one.
    pub fn from_ecef(&self, p: [f64; 3]) -> Result<[f64; 3], CrsError> {
        let mut v = (p[0], p[1], p[2]);
        proj4rs::transform::transform(&self.geocentric, &self.proj, &mut v).map_err(|e| {
            CrsError::Point {
                code: self.code,
                why: e.to_string(),
            }
        })?;
        let out = match self.kind {
            CrsKind::Geographic => [v.0.to_degrees(), v.1.to_degrees(), v.2],
            _ => [v.0, v.1, v.2],
        };
        if out.iter().all(|c| c.is_finite()) {
            Ok(out)
        } else {
            Err(CrsError::Point {
                code: self.code,
                why: format!(
                    "({:.3}, {:.3}, {:.3}) has no finite image",
                    p[0], p[1], p[2]
                ),
            })
        }
    }
}

impl Crs {
    /// The ECEF point (metres) of `p` in this CRS (degrees for a geographic one).
    pub fn to_ecef(&self, p: [f64; 3]) -> Result<[f64; 3], CrsError> {
        let mut v = match self.kind {
            CrsKind::Geographic => (p[0].to_radians(), p[1].to_radians(), p[2]),
            _ => (p[0], p[1], p[2]),
        };
        proj4rs::transform::transform(&self.proj, &self.geocentric, &mut v).map_err(|e| {
            CrsError::Point {
                code: self.code,
                why: e.to_string(),
            }
        })?;
        let out = [v.0, v.1, v.2];
        if out.iter().all(|c| c.is_finite()) {
            Ok(out)
        } else {
            Err(CrsError::Point {
                code: self.code,
                why: format!("({}, {}, {}) has no finite position", p[0], p[1], p[2]),
            })
        }
    }
}

/// Where a model's coordinates are: what its georeference stage aligned it to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ModelFrame {
    /// Its own, arbitrary frame: not georeferenced.
    Local,
    /// East-north-up metres around `origin`.
    Enu {
        /// The origin photo's GPS position.
        origin: Geodetic,
    },
    /// ECEF metres; `origin` is only where `auto` looks for a UTM zone.
    Ecef {
        /// The origin photo's GPS position.
        origin: Geodetic,
    },
}

impl ModelFrame {
    /// The ECEF point of a model point, if the model is georeferenced.
    pub fn to_ecef(&self, p: [f64; 3]) -> Option<[f64; 3]> {
        match self {
            ModelFrame::Local => None,
            ModelFrame::Enu { origin } => Some(geodesy::enu_to_ecef(p, origin)),
            ModelFrame::Ecef { .. } => Some(p),
        }
    }

    /// The CRS an export is written in: the one asked for; by default the UTM zone of
    /// the origin for an east-north-up model and EPSG:4978 for an ECEF one; none for a
    /// model in its own frame.
    pub fn output_crs(&self, asked: Option<OutputCrs>) -> Result<Option<Crs>, CrsError> {
        let origin = match self {
            ModelFrame::Local => return Ok(None),
            ModelFrame::Enu { origin } | ModelFrame::Ecef { origin } => origin,
        };
        let code = match (asked, self) {
            (Some(OutputCrs::Epsg(n)), _) => n,
            (None, ModelFrame::Ecef { .. }) => 4978,
            _ => Crs::utm_code(origin),
        };
        Crs::from_epsg(code).map(Some)
    }
}

/// A model's frame carried into an output CRS.
pub struct EarthPlacement {
    /// The model's own frame.
    pub frame: ModelFrame,
    /// The output CRS; `None` for a model in its own frame (coordinates as they are).
    pub crs: Option<Crs>,
    wgs84: Crs,
}

impl EarthPlacement {
    /// `frame` placed into the CRS `asked` (see [`ModelFrame::output_crs`]).
    pub fn new(frame: ModelFrame, asked: Option<OutputCrs>) -> Result<EarthPlacement, CrsError> {
        Ok(EarthPlacement {
            frame,
            crs: frame.output_crs(asked)?,
            wgs84: Crs::from_epsg(4326)?,
        })
    }

    /// A model point in the output CRS (as it is, for a model in its own frame).
    pub fn place(&self, p: [f64; 3]) -> Result<[f64; 3], CrsError> {
        match (&self.crs, self.frame.to_ecef(p)) {
            (Some(crs), Some(ecef)) => crs.from_ecef(ecef),
            _ => Ok(p),
        }
    }

    /// A model point's WGS 84 longitude, latitude and ellipsoidal height, if the model
    /// is georeferenced.
    pub fn geodetic(&self, p: [f64; 3]) -> Result<Option<Geodetic>, CrsError> {
        let Some(ecef) = self.frame.to_ecef(p) else {
            return Ok(None);
        };
        let [lon, lat, h] = self.wgs84.from_ecef(ecef)?;
        Ok(Some(Geodetic { lat, lon, h }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_crs_reads_and_prints_both_spellings() {
        assert_eq!("auto".parse::<OutputCrs>(), Ok(OutputCrs::Auto));
        assert_eq!(
            " epsg:32633".parse::<OutputCrs>(),
            Ok(OutputCrs::Epsg(32633))
        );
        assert_eq!(OutputCrs::Epsg(2056).to_string(), "EPSG:2056");
        for bad in ["", "32633", "EPSG:", "EPSG:x", "utm"] {
            let e = bad.parse::<OutputCrs>().unwrap_err();
            assert!(e.contains("EPSG:NNNN"), "{bad}: {e}");
        }
    }

    #[test]
    fn codes_are_known_refused_by_name_or_usable() {
        assert_eq!(Crs::from_epsg(32633).unwrap().kind, CrsKind::Projected);
        assert_eq!(Crs::from_epsg(32633).unwrap().name, "WGS 84 / UTM zone 33N");
        assert_eq!(Crs::from_epsg(4326).unwrap().kind, CrsKind::Geographic);
        assert_eq!(Crs::from_epsg(4978).unwrap().kind, CrsKind::Geocentric);
        assert_eq!(Crs::from_epsg(1).unwrap_err(), CrsError::Unknown(1));
        // Web Mercator's `@null` grid is no grid; a compound code's heights would lie.
        assert_eq!(Crs::from_epsg(3857).unwrap().kind, CrsKind::Projected);
        let e = Crs::from_epsg(5972).unwrap_err().to_string();
        assert!(e.contains("vertical datum"), "{e}");
        assert_eq!(
            Crs::from_epsg(99_999_999).unwrap_err(),
            CrsError::Unknown(99_999_999)
        );
    }

    #[test]
    fn auto_is_the_utm_zone_of_the_origin() {
        let g = |lat, lon| Geodetic { lat, lon, h: 0.0 };
        assert_eq!(Crs::utm_code(&g(46.8, 7.1)), 32632);
        assert_eq!(Crs::utm_code(&g(-33.9, 151.2)), 32756);
        assert_eq!(Crs::utm_code(&g(42.8, -76.9)), 32618);
        assert_eq!(Crs::utm_code(&g(0.0, 180.0)), 32601);
        assert_eq!(Crs::utm_code(&g(0.0, -180.0)), 32601);
    }

    #[test]
    fn an_enu_point_lands_where_its_geodetic_position_projects() {
        // The origin of a zone-33 frame is on the central meridian (15° E): easting
        // 500 km, and a point 1 km east of it about 1 km further east.
        let origin = Geodetic {
            lat: 45.0,
            lon: 15.0,
            h: 100.0,
        };
        let placed =
            EarthPlacement::new(ModelFrame::Enu { origin }, Some(OutputCrs::Auto)).unwrap();
        assert_eq!(placed.crs.as_ref().unwrap().code, 32633);
        let o = placed.place([0.0, 0.0, 0.0]).unwrap();
        assert!((o[0] - 500_000.0).abs() < 0.01, "{o:?}");
        // 45° N on the central meridian: 4,983 km north of the equator, times k0.
        assert!((o[1] - 4_982_950.4).abs() < 1.0, "{o:?}");
        assert!((o[2] - 100.0).abs() < 1e-3, "{o:?}");
        let east = placed.place([1000.0, 0.0, 0.0]).unwrap();
        assert!((east[0] - o[0] - 999.6).abs() < 0.5, "{east:?}");
        let g = placed.geodetic([0.0, 0.0, 0.0]).unwrap().unwrap();
        assert!(
            (g.lat - 45.0).abs() < 1e-9
                && (g.lon - 15.0).abs() < 1e-9
                && (g.h - 100.0).abs() < 1e-3,
            "{g:?}"
        );
        // A model in its own frame is written as it is, with no CRS.
        let local = EarthPlacement::new(ModelFrame::Local, Some(OutputCrs::Auto)).unwrap();
        assert!(local.crs.is_none());
        assert_eq!(local.place([1.0, 2.0, 3.0]).unwrap(), [1.0, 2.0, 3.0]);
        assert_eq!(local.geodetic([1.0, 2.0, 3.0]).unwrap(), None);
        // And back: a projected point to ECEF is the inverse.
        let utm = placed.crs.as_ref().unwrap();
        let back = geodesy::ecef_to_enu(utm.to_ecef(east).unwrap(), &origin);
        assert!(
            (back[0] - 1000.0).abs() < 1e-4 && back[1].abs() < 1e-4,
            "{back:?}"
        );
        let wgs = Crs::from_epsg(4326).unwrap();
        let o_ecef = wgs.to_ecef([15.0, 45.0, 100.0]).unwrap();
        assert!((0..3).all(|k| (o_ecef[k] - geodesy::to_ecef(&origin)[k]).abs() < 1e-6));
        // ECEF by default stays ECEF.
        let ecef = EarthPlacement::new(ModelFrame::Ecef { origin }, None).unwrap();
        assert_eq!(ecef.crs.as_ref().unwrap().code, 4978);
        let p = geodesy::to_ecef(&origin);
        let back = ecef.place(p).unwrap();
        assert!((0..3).all(|k| (back[k] - p[k]).abs() < 1e-6), "{back:?}");
    }
}
