//! LAS 1.4 and LAZ: a model's points as survey and GIS tools (PDAL, QGIS, CloudCompare,
//! laspy) read them, in the output CRS with its WKT in the header.
//!
//! Point format 7 (coordinates, RGB, GPS time) with two extra dimensions described in an
//! Extra Bytes VLR, so readers name them: `track_length` (how many photo observations
//! see the point, the sparse model's confidence) and `reprojection_error` (pixels).
//! Coordinates are stored as integers × scale + offset: millimetres for metric systems,
//! 1e-8° (about a millimetre) for geographic ones, and coarser only where the model's
//! extent would not fit in 32 bits.

use crate::error::ModelError;
use crate::model::Reconstruction;
use std::io::Cursor;
use tessera_core::crs::{CrsKind, EarthPlacement};

/// The extra dimensions, in the order their bytes follow each point: (name, LAS data
/// type, description). Type 5 is an unsigned 32-bit integer, 9 a 32-bit float.
const EXTRA: [(&str, u8, &str); 2] = [
    ("track_length", 5, "photo observations of the point"),
    ("reprojection_error", 9, "mean reprojection error, px"),
];
/// Bytes the extra dimensions add to each point.
const EXTRA_BYTES: u16 = 8;
/// Size of one Extra Bytes descriptor (LAS 1.4 R15, table 24).
const DESCRIPTOR: usize = 192;

/// The Extra Bytes VLR (`LASF_Spec`, 4) describing [`EXTRA`].
fn extra_bytes_vlr() -> las::Vlr {
    let mut data = Vec::with_capacity(DESCRIPTOR * EXTRA.len());
    for (name, data_type, description) in EXTRA {
        let mut d = [0u8; DESCRIPTOR];
        d[2] = data_type;
        d[4..4 + name.len()].copy_from_slice(name.as_bytes());
        d[160..160 + description.len()].copy_from_slice(description.as_bytes());
        data.extend_from_slice(&d);
    }
    las::Vlr {
        user_id: "LASF_Spec".into(),
        record_id: 4,
        description: "extra point dimensions".into(),
        data,
    }
}

/// The coarsest power of ten at or above `finest` that keeps `extent` within the 32-bit
/// integers LAS stores.
fn scale_for(extent: f64, finest: f64) -> f64 {
    let needed = extent / 2.0e9;
    if needed <= finest {
        finest
    } else {
        10f64.powf(needed.log10().ceil())
    }
}

/// The LAS (or, `compressed`, LAZ) bytes of `rec`'s points placed by `placement`.
pub fn las_bytes(
    rec: &Reconstruction,
    placement: &EarthPlacement,
    compressed: bool,
) -> Result<Vec<u8>, ModelError> {
    Ok(write_to(rec, placement, compressed, Cursor::new(Vec::new()))?.into_inner())
}

/// Write the LAS (or LAZ) of `rec` to `path` through a temporary file beside it, as the
/// encoder produces it: what is held in memory is the placed coordinates (24 bytes a
/// point, needed for the header's bounds and scale before the first point is written),
/// not the file.
pub fn write_las_file(
    rec: &Reconstruction,
    placement: &EarthPlacement,
    compressed: bool,
    path: &std::path::Path,
) -> Result<(), ModelError> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let io = |source: std::io::Error| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let written = std::fs::File::create(&tmp)
        .map_err(io)
        .and_then(|f| write_to(rec, placement, compressed, std::io::BufWriter::new(f)))
        .and_then(|w| w.into_inner().map_err(|e| io(e.into_error())))
        .and_then(|f| f.sync_all().map_err(io))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(io));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The LAS (or LAZ) of `rec` written to `out`, which is handed back.
fn write_to<W>(
    rec: &Reconstruction,
    placement: &EarthPlacement,
    compressed: bool,
    out: W,
) -> Result<W, ModelError>
where
    W: std::io::Write + std::io::Seek + Send + Sync + std::fmt::Debug + 'static,
{
    let format_name = if compressed { "LAZ" } else { "LAS" };
    let encode = |why: String| ModelError::Encode {
        format: format_name,
        why,
    };
    let placed = rec
        .points
        .values()
        .map(|p| {
            let xyz = placement.place(p.xyz)?;
            if xyz.iter().all(|c| c.is_finite()) {
                Ok(xyz)
            } else {
                Err(encode(format!("point {} has no finite position", p.id)))
            }
        })
        .collect::<Result<Vec<[f64; 3]>, ModelError>>()?;
    let mut min = [f64::INFINITY; 3];
    let mut max = [f64::NEG_INFINITY; 3];
    for xyz in &placed {
        for k in 0..3 {
            min[k] = min[k].min(xyz[k]);
            max[k] = max[k].max(xyz[k]);
        }
    }
    if placed.is_empty() {
        (min, max) = ([0.0; 3], [0.0; 3]);
    }
    // Degrees across, metres up; a model in its own frame has no unit, so it keeps
    // micro-units where it can.
    let finest = match placement.crs.as_ref().map(|c| c.kind) {
        Some(CrsKind::Geographic) => [1e-8, 1e-8, 1e-3],
        Some(_) => [1e-3; 3],
        None => [1e-6; 3],
    };
    let transform = |k: usize| las::Transform {
        scale: scale_for(max[k] - min[k], finest[k]),
        offset: min[k].floor(),
    };
    let mut builder = las::Builder::from((1, 4));
    builder.point_format = las::point::Format::new(7).map_err(|e| encode(e.to_string()))?;
    builder.point_format.extra_bytes = EXTRA_BYTES;
    builder.point_format.is_compressed = compressed;
    builder.transforms = las::Vector {
        x: transform(0),
        y: transform(1),
        z: transform(2),
    };
    builder.generating_software = "tessera".into();
    builder.system_identifier = "structure from motion".into();
    // Point formats 6-10 keep their CRS as WKT (the global encoding's WKT bit is set
    // even where the model has no CRS to give).
    builder.has_wkt_crs = true;
    builder.vlrs.push(extra_bytes_vlr());
    let mut header = builder.into_header().map_err(|e| encode(e.to_string()))?;
    if let Some(crs) = &placement.crs {
        // LAS 1.4 stores the WKT as a NUL-terminated string.
        let mut wkt = crs.wkt.as_bytes().to_vec();
        wkt.push(0);
        header.set_wkt_crs(wkt).map_err(|e| encode(e.to_string()))?;
    }
    let mut writer = las::Writer::new(out, header).map_err(|e| encode(e.to_string()))?;
    for (xyz, p) in placed.into_iter().zip(rec.points.values()) {
        let mut extra = Vec::with_capacity(EXTRA_BYTES as usize);
        extra.extend((p.track.len().min(u32::MAX as usize) as u32).to_le_bytes());
        extra.extend((p.error as f32).to_le_bytes());
        let [r, g, b] = p.rgb.map(|c| u16::from(c) * 257);
        writer
            .write_point(las::Point {
                x: xyz[0],
                y: xyz[1],
                z: xyz[2],
                return_number: 1,
                number_of_returns: 1,
                gps_time: Some(0.0),
                color: Some(las::Color::new(r, g, b)),
                extra_bytes: extra,
                ..Default::default()
            })
            .map_err(|e| encode(format!("point {}: {e}", p.id)))?;
    }
    writer.into_inner().map_err(|e| encode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::crs::ModelFrame;

    #[test]
    fn scales_are_millimetres_unless_the_extent_needs_more() {
        assert_eq!(scale_for(5_000.0, 1e-3), 1e-3);
        assert_eq!(scale_for(0.0, 1e-3), 1e-3);
        // 50,000 km does not fit in 2^31 mm: centimetres.
        assert!((scale_for(5.0e7, 1e-3) - 0.1).abs() < 1e-12);
        assert_eq!(scale_for(1.5, 1e-8), 1e-8);
    }

    fn model() -> Reconstruction {
        let mut rec = Reconstruction::default();
        for (id, xyz, track) in [(1, [0.0, 0.0, 0.0], 2), (7, [12.5, -3.25, 4.0], 5)] {
            rec.points.insert(
                id,
                crate::model::Point3D {
                    id,
                    xyz,
                    rgb: [255, 128, 0],
                    error: 0.75,
                    track: (0..track)
                        .map(|i| crate::model::Observation {
                            image_id: i,
                            point2d_idx: 0,
                        })
                        .collect(),
                },
            );
        }
        rec
    }

    fn read_back(bytes: Vec<u8>) -> (las::Header, Vec<las::Point>) {
        let mut r = las::Reader::new(Cursor::new(bytes)).unwrap();
        let points = r
            .read_all()
            .unwrap()
            .points()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        (r.header().clone(), points)
    }

    #[test]
    fn a_model_in_its_own_frame_is_written_as_it_is_without_a_crs() {
        let local = EarthPlacement::new(ModelFrame::Local, None).unwrap();
        for compressed in [false, true] {
            let (header, points) = read_back(las_bytes(&model(), &local, compressed).unwrap());
            assert_eq!(header.version(), las::Version::new(1, 4));
            assert_eq!(header.point_format().to_u8().unwrap(), 7);
            assert_eq!(header.point_format().is_compressed, compressed);
            assert!(header.get_wkt_crs_bytes().is_none());
            assert_eq!(points.len(), 2);
            let p = &points[1];
            assert!(
                (p.x - 12.5).abs() < 1e-6 && (p.y + 3.25).abs() < 1e-6,
                "{p:?}"
            );
            assert_eq!(p.color, Some(las::Color::new(65535, 32896, 0)));
            assert_eq!(&p.extra_bytes[..4], &5u32.to_le_bytes());
            assert_eq!(&p.extra_bytes[4..], &0.75f32.to_le_bytes());
        }
    }

    #[test]
    fn a_georeferenced_model_carries_its_crs_wkt() {
        let origin = tessera_core::geodesy::Geodetic {
            lat: 47.0,
            lon: 8.0,
            h: 400.0,
        };
        let placed = EarthPlacement::new(ModelFrame::Enu { origin }, None).unwrap();
        let (header, points) = read_back(las_bytes(&model(), &placed, false).unwrap());
        let wkt = String::from_utf8(header.get_wkt_crs_bytes().unwrap().to_vec()).unwrap();
        assert!(wkt.contains("UTM zone 32N") && wkt.ends_with('\0'), "{wkt}");
        // The origin is about 424 km east in zone 32 (9° E central meridian), at 400 m.
        let o = &points[0];
        assert!(
            (o.x - 424_000.0).abs() < 2_000.0 && (o.z - 400.0).abs() < 0.01,
            "{o:?}"
        );
        let a = placed.place([12.5, -3.25, 4.0]).unwrap();
        assert!((points[1].x - a[0]).abs() < 0.001 && (points[1].y - a[1]).abs() < 0.001);
    }

    #[test]
    fn the_file_is_the_bytes_streamed_with_nothing_left_beside_it() {
        let local = EarthPlacement::new(ModelFrame::Local, None).unwrap();
        let dir = std::env::temp_dir().join(format!("tessera-las-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("model.laz");
        write_las_file(&model(), &local, true, &path).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            las_bytes(&model(), &local, true).unwrap()
        );
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_descriptor_names_each_dimension() {
        let v = extra_bytes_vlr();
        assert_eq!(v.data.len(), 2 * DESCRIPTOR);
        assert_eq!(&v.data[4..16], b"track_length");
        assert_eq!(v.data[2], 5);
        assert_eq!(
            &v.data[DESCRIPTOR + 4..DESCRIPTOR + 22],
            b"reprojection_error"
        );
        assert_eq!(v.data[DESCRIPTOR + 2], 9);
    }
}
