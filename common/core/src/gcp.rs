//! Ground control points in the file drone surveyors already have: OpenDroneMap's
//! `gcp_list.txt`. Its first line names the coordinate system; each further line marks
//! one control point in one photo:
//!
//! ```text
//! EPSG:32632                       (or WGS84 UTM 32N, or a +proj=utm string)
//! geo_x geo_y geo_z im_x im_y image_name [gcp_name] [anything else]
//! ```
//!
//! Lines with the same `gcp_name` (or, without one, the same coordinates) are marks of
//! one point. Blank lines and lines starting with `#` are skipped. Every problem names
//! its line.

use crate::crs::Crs;
use std::collections::BTreeMap;

/// The largest control file read: a survey's file is a few kilobytes (a line per mark),
/// so anything near this is not one, and is refused before it is held in memory.
pub const MAX_BYTES: u64 = 4 * 1024 * 1024;

/// One mark: where a control point is seen in a photo.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// The photo's name in the image set.
    pub image: String,
    /// Pixel column and row as the file gives them: OpenDroneMap's convention, the
    /// centre of the top-left pixel at (0, 0) (COLMAP puts it at (0.5, 0.5)).
    pub pixel: [f64; 2],
    /// The line of the file, from 1.
    pub line: usize,
}

/// A control point: its true position and where it was marked.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlPoint {
    /// Its name (the file's, or its coordinates).
    pub name: String,
    /// Its position in the file's coordinate system (easting, northing, height; or
    /// longitude, latitude, height in degrees and metres).
    pub world: [f64; 3],
    /// Its marks, in file order.
    pub marks: Vec<Mark>,
}

/// A parsed control file.
#[derive(Debug)]
pub struct ControlFile {
    /// The coordinate system its positions are in.
    pub crs: Crs,
    /// Its points, by name.
    pub points: Vec<ControlPoint>,
}

/// A problem with a control file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("ground control file line {line}: {why}")]
pub struct GcpError {
    /// The line, from 1.
    pub line: usize,
    /// What is wrong and what to do.
    pub why: String,
}

impl crate::Classify for GcpError {
    fn class(&self) -> crate::ErrorClass {
        crate::ErrorClass::Permanent
    }
}

impl ControlFile {
    /// The first mark in a photo that is not among `names`, if any: a typo there would
    /// silently drop the mark.
    pub fn marks_outside(&self, names: &std::collections::HashSet<&str>) -> Option<&Mark> {
        self.points
            .iter()
            .flat_map(|p| &p.marks)
            .filter(|m| !names.contains(m.image.as_str()))
            .min_by_key(|m| m.line)
    }
}

/// The EPSG code a header line names.
fn header_code(line: &str) -> Result<u32, String> {
    let t = line.trim();
    let usage = "name the coordinate system on the first line: EPSG:NNNN, `WGS84 UTM 32N`, or a `+proj=utm +zone=32 +datum=WGS84` string";
    if let Ok(crate::crs::OutputCrs::Epsg(code)) = t.parse() {
        return Ok(code);
    }
    let words: Vec<String> = t.split_whitespace().map(str::to_ascii_uppercase).collect();
    if words.len() == 3 && words[0] == "WGS84" && words[1] == "UTM" {
        let zone = &words[2];
        let (digits, base) = match (zone.strip_suffix('N'), zone.strip_suffix('S')) {
            (Some(d), _) => (d, 32600),
            (_, Some(d)) => (d, 32700),
            _ => ("", 0),
        };
        if let Ok(n @ 1..=60) = digits.parse::<u32>() {
            return Ok(base + n);
        }
        return Err(format!("`{t}` is not a UTM zone (1N to 60S); {usage}"));
    }
    if t.starts_with('+') {
        let params: Vec<&str> = t.split_whitespace().collect();
        let value = |key: &str| {
            params
                .iter()
                .find_map(|p| p.strip_prefix('+')?.strip_prefix(key)?.strip_prefix('='))
        };
        let wgs84 = value("datum") == Some("WGS84") || value("ellps") == Some("WGS84");
        if value("proj") == Some("utm")
            && wgs84
            && let Some(n @ 1..=60) = value("zone").and_then(|z| z.parse::<u32>().ok())
        {
            let south = params.contains(&"+south");
            return Ok(if south { 32700 } else { 32600 } + n);
        }
        if matches!(value("proj"), Some("longlat" | "latlong")) && wgs84 {
            return Ok(4326);
        }
        return Err(format!(
            "`{t}` is a projection Tessera reads only as WGS 84 UTM or longitude/latitude; {usage}"
        ));
    }
    Err(format!("`{t}` names no coordinate system; {usage}"))
}

/// Parse a control file.
pub fn parse(text: &str) -> Result<ControlFile, GcpError> {
    // A byte-order mark from a Windows editor is not part of the header.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let (first, header) = lines.next().ok_or(GcpError {
        line: 1,
        why: "the file is empty; its first line names the coordinate system and each further line marks a point in a photo".into(),
    })?;
    let code = header_code(header).map_err(|why| GcpError { line: first, why })?;
    let crs = Crs::from_epsg(code).map_err(|e| GcpError {
        line: first,
        why: e.to_string(),
    })?;
    let mut points: BTreeMap<String, ControlPoint> = BTreeMap::new();
    let mut marked: std::collections::HashSet<(String, String)> = Default::default();
    for (line, text) in lines {
        let err = |why: String| GcpError { line, why };
        let f: Vec<&str> = text.split_whitespace().collect();
        if f.len() < 6 {
            return Err(err(format!(
                "{} fields; a mark is `geo_x geo_y geo_z im_x im_y image_name [gcp_name]`",
                f.len()
            )));
        }
        let mut n = [0.0; 5];
        for (k, v) in n.iter_mut().enumerate() {
            *v = f[k]
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| err(format!("`{}` (field {}) is not a number", f[k], k + 1)))?;
        }
        if n[3] < 0.0 || n[4] < 0.0 {
            return Err(err(format!(
                "pixel ({}, {}) is outside the photo",
                f[3], f[4]
            )));
        }
        let world = [n[0], n[1], n[2]];
        let name = f
            .get(6)
            .map_or_else(|| format!("{} {} {}", f[0], f[1], f[2]), |s| s.to_string());
        let point = points.entry(name.clone()).or_insert_with(|| ControlPoint {
            name: name.clone(),
            world,
            marks: Vec::new(),
        });
        if point.world != world {
            return Err(err(format!(
                "control point `{name}` is at ({}, {}, {}) here and at {:?} on an earlier line; give each point one position",
                f[0], f[1], f[2], point.world
            )));
        }
        if !marked.insert((name.clone(), f[5].to_string())) {
            return Err(err(format!(
                "control point `{name}` is marked twice in `{}`; keep one mark per photo",
                f[5]
            )));
        }
        point.marks.push(Mark {
            image: f[5].to_string(),
            pixel: [n[3], n[4]],
            line,
        });
    }
    if points.is_empty() {
        return Err(GcpError {
            line: first,
            why: "no control point is marked; add lines `geo_x geo_y geo_z im_x im_y image_name gcp_name`".into(),
        });
    }
    Ok(ControlFile {
        crs,
        points: points.into_values().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_grouped_by_point_under_any_header_spelling() {
        for header in [
            "EPSG:32632",
            "WGS84 UTM 32N",
            "+proj=utm +zone=32 +datum=WGS84 +units=m +no_defs",
        ] {
            let f = parse(&format!(
                "{header}\n# a comment\n\n431000.5 5205000.25 412.0 1200 800 a.jpg gcp1\n431000.5 5205000.25 412.0 300.5 90 b.jpg gcp1\n431050 5205010 415 10 20 a.jpg\n"
            ))
            .unwrap();
            assert_eq!(f.crs.code, 32632, "{header}");
            assert_eq!(f.points.len(), 2);
            let g = f.points.iter().find(|p| p.name == "gcp1").unwrap();
            assert_eq!(g.marks.len(), 2);
            assert_eq!(g.marks[1].pixel, [300.5, 90.0]);
            assert_eq!(g.marks[1].line, 5);
            assert!(f.points.iter().any(|p| p.name == "431050 5205010 415"));
        }
        assert_eq!(
            parse("WGS84 UTM 33S\n1 2 3 4 5 a.jpg").unwrap().crs.code,
            32733
        );
        assert_eq!(
            parse("\u{feff}EPSG:32632\n1 2 3 4 5 a.jpg")
                .unwrap()
                .crs
                .code,
            32632
        );
        assert_eq!(
            parse("+proj=utm +zone=18 +south +ellps=WGS84\n1 2 3 4 5 a.jpg")
                .unwrap()
                .crs
                .code,
            32718
        );
    }

    #[test]
    fn every_problem_names_its_line() {
        let cases = [
            ("", 1, "empty"),
            ("UTM 32\n", 1, "names no coordinate system"),
            ("WGS84 UTM 61N\n", 1, "not a UTM zone"),
            ("WGS84 UTM 32\u{c9}\n", 1, "not a UTM zone"),
            ("+proj=tmerc +lat_0=0\n", 1, "WGS 84 UTM"),
            ("EPSG:1\n", 1, "EPSG:1 is not"),
            ("EPSG:32632\n", 1, "no control point"),
            ("EPSG:32632\n1 2 3 4 a.jpg\n", 2, "5 fields"),
            ("EPSG:32632\n1 2 x 4 5 a.jpg\n", 2, "`x` (field 3)"),
            ("EPSG:32632\n1 2 3 -4 5 a.jpg\n", 2, "outside the photo"),
            (
                "EPSG:32632\n1 2 3 4 5 a.jpg g\n1 2 4 4 5 b.jpg g\n",
                3,
                "one position",
            ),
            (
                "EPSG:32632\n1 2 3 4 5 a.jpg g\n\n1 2 3 6 7 a.jpg g\n",
                4,
                "marked twice",
            ),
        ];
        for (text, line, says) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(says), "{text:?}: {e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("ground control file line {line}:"))
            );
        }
    }
}
