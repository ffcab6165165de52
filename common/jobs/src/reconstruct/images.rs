//! Checking photos before COLMAP sees them: COLMAP 3.8 silently decodes a truncated JPEG
//! and exits 0 on a folder of corrupt files, so Tessera decides what is an image.

use serde::{Deserialize, Serialize};

/// Largest image accepted, in pixels (beyond this is a decompression bomb, not a photo).
pub const MAX_PIXELS: u64 = 250_000_000;

/// GPS from EXIF.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Gps {
    /// Degrees north.
    pub lat: f64,
    /// Degrees east.
    pub lon: f64,
    /// Metres above sea level, if recorded.
    pub alt: Option<f64>,
}

/// What ingest learned about one photo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhotoFacts {
    /// File name.
    pub name: String,
    /// Object-store key.
    pub key: String,
    /// SHA-256, hex.
    pub sha256: String,
    /// Width.
    pub width: u64,
    /// Height.
    pub height: u64,
    /// Focal length in millimetres, from EXIF.
    pub focal_mm: Option<f64>,
    /// Position, from EXIF.
    pub gps: Option<Gps>,
    /// The sensor the photo was taken with, from EXIF, read from the bytes as uploaded
    /// (a photo turned upright is re-encoded): what the extract stage checks the
    /// engine's focal prior against ([`super::focal_prior`]). Absent in checkpoints
    /// written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focal_plane: Option<FocalPlane>,
}

/// Width and height, or why a reconstruction does not take the file (naming it): the
/// imaging check, and HEIC, which COLMAP cannot read.
pub fn check(name: &str, bytes: &[u8]) -> Result<(u64, u64), tessera_imaging::Refused> {
    if matches!(
        imagesize::image_type(bytes),
        Ok(imagesize::ImageType::Heif(_))
    ) {
        return Err(tessera_imaging::Refused(format!(
            "`{name}` is HEIC/HEIF, which COLMAP cannot read; convert it to JPEG first"
        )));
    }
    tessera_imaging::check::check(name, bytes, MAX_PIXELS)
}

/// A photo turned as its EXIF orientation says, for COLMAP (which reads pixels as
/// stored): re-encoded upright keeping the EXIF fields reconstruction uses (camera and
/// focal length for intrinsics, GPS for georeferencing, capture time).
pub struct Upright {
    /// The JPEG.
    pub jpeg: Vec<u8>,
    /// Width as displayed.
    pub width: u64,
    /// Height as displayed.
    pub height: u64,
}

/// `Some` when `bytes` declare an orientation other than upright.
pub fn upright(name: &str, bytes: &[u8]) -> Result<Option<Upright>, tessera_imaging::Refused> {
    let Ok(e) = exif::Reader::new().read_from_container(&mut std::io::Cursor::new(bytes)) else {
        return Ok(None);
    };
    let turned = e
        .get_field(exif::Tag::Orientation, exif::In::PRIMARY)
        .and_then(|f| f.value.get_uint(0))
        .is_some_and(|v| !tessera_imaging::Orientation::from_exif(v).is_upright());
    if !turned {
        return Ok(None);
    }
    let d = tessera_imaging::decode::decode_with(name, bytes, MAX_PIXELS)?;
    let keep = tessera_core::photo::KeepMetadata {
        capture_time: true,
        camera: true,
        location: true,
    };
    let exif = d
        .exif
        .as_deref()
        .and_then(|raw| tessera_imaging::metadata::kept_exif(raw, keep));
    Ok(Some(Upright {
        jpeg: tessera_imaging::encode::jpeg(&d.rgb, d.icc.as_deref(), exif.as_deref())?,
        width: d.rgb.width() as u64,
        height: d.rgb.height() as u64,
    }))
}

fn rational(f: &exif::Field, i: usize) -> Option<f64> {
    match &f.value {
        exif::Value::Rational(v) => v.get(i).map(|r| r.to_f64()).filter(|x| x.is_finite()),
        _ => None,
    }
}

fn dms(f: &exif::Field) -> Option<f64> {
    Some(
        rational(f, 0)?
            + rational(f, 1).unwrap_or(0.0) / 60.0
            + rational(f, 2).unwrap_or(0.0) / 3600.0,
    )
}

fn ascii_ref(e: &exif::Exif, tag: exif::Tag) -> Option<char> {
    match &e.get_field(tag, exif::In::PRIMARY)?.value {
        exif::Value::Ascii(v) => v.first().and_then(|s| s.first()).map(|b| *b as char),
        _ => None,
    }
}

/// What EXIF says of the sensor a photo was taken with: enough to tell a focal length in
/// pixels of the photo as taken from one of the photo as it is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FocalPlane {
    /// Focal length in millimetres.
    pub focal_mm: f64,
    /// Sensor pixels per millimetre, at the resolution the photo was taken at
    /// (FocalPlaneXResolution in its unit).
    pub px_per_mm: f64,
    /// The longer side in pixels of the photo as taken (PixelX/YDimension): a photo
    /// downscaled afterwards usually keeps it.
    pub taken_long_side: f64,
    /// The shorter side, likewise: with the longer, it tells a downscale (same shape)
    /// from a crop (another shape, and the pixels as taken).
    pub taken_short_side: f64,
}

/// The focal plane from EXIF, where every field of it is there and sensible.
pub fn focal_plane(bytes: &[u8]) -> Option<FocalPlane> {
    let e = exif::Reader::new()
        .read_from_container(&mut std::io::Cursor::new(bytes))
        .ok()?;
    let field = |tag| e.get_field(tag, exif::In::PRIMARY);
    let focal_mm = field(exif::Tag::FocalLength)
        .and_then(|f| rational(f, 0))
        .filter(|f| *f > 0.0)?;
    let per_unit = field(exif::Tag::FocalPlaneXResolution)
        .and_then(|f| rational(f, 0))
        .filter(|r| *r > 0.0)?;
    // 2: inch (the default), 3: centimetre; 4 and 5 (millimetre, micrometre) are written
    // by some cameras though the standard stops at 3.
    let mm_per_unit =
        match field(exif::Tag::FocalPlaneResolutionUnit).and_then(|f| f.value.get_uint(0)) {
            None | Some(2) => 25.4,
            Some(3) => 10.0,
            Some(4) => 1.0,
            Some(5) => 0.001,
            Some(_) => return None,
        };
    let side = |tag| {
        field(tag)
            .and_then(|f| f.value.get_uint(0))
            .filter(|v| *v > 0)
    };
    let (x, y) = (
        side(exif::Tag::PixelXDimension)?,
        side(exif::Tag::PixelYDimension)?,
    );
    Some(FocalPlane {
        focal_mm,
        px_per_mm: per_unit / mm_per_unit,
        taken_long_side: x.max(y) as f64,
        taken_short_side: x.min(y) as f64,
    })
}

/// Focal length (mm) and GPS from EXIF; garbage EXIF gives `None`s, never an error.
pub fn exif_facts(bytes: &[u8]) -> (Option<f64>, Option<Gps>) {
    let Ok(e) = exif::Reader::new().read_from_container(&mut std::io::Cursor::new(bytes)) else {
        return (None, None);
    };
    let focal = e
        .get_field(exif::Tag::FocalLength, exif::In::PRIMARY)
        .and_then(|f| rational(f, 0))
        .filter(|f| *f > 0.0);
    let lat = e
        .get_field(exif::Tag::GPSLatitude, exif::In::PRIMARY)
        .and_then(dms);
    let lon = e
        .get_field(exif::Tag::GPSLongitude, exif::In::PRIMARY)
        .and_then(dms);
    let gps = match (lat, lon) {
        (Some(lat), Some(lon)) => {
            let lat = if ascii_ref(&e, exif::Tag::GPSLatitudeRef) == Some('S') {
                -lat
            } else {
                lat
            };
            let lon = if ascii_ref(&e, exif::Tag::GPSLongitudeRef) == Some('W') {
                -lon
            } else {
                lon
            };
            let alt = e
                .get_field(exif::Tag::GPSAltitude, exif::In::PRIMARY)
                .and_then(|f| rational(f, 0));
            (lat.abs() <= 90.0 && lon.abs() <= 180.0).then_some(Gps { lat, lon, alt })
        }
        _ => None,
    };
    (focal, gps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This crate's folder, read at run time (see `tessera_tests::repo_root`).
    fn manifest_dir() -> std::path::PathBuf {
        std::env::var_os("CARGO_MANIFEST_DIR")
            .map(Into::into)
            .expect("cargo sets CARGO_MANIFEST_DIR when it runs tests")
    }

    #[test]
    fn a_turned_photo_is_fed_upright_with_its_focal_length_and_gps() {
        let sample =
            std::fs::read(manifest_dir().join("../../sample/images/IMG_9380.jpg")).unwrap();
        assert!(
            upright("IMG_9380.jpg", &sample).unwrap().is_none(),
            "upright already"
        );
        // The same photo as a phone would store a portrait: orientation 6 added.
        let d = tessera_imaging::decode("IMG_9380.jpg", &sample).unwrap();
        let raw = d.exif.clone().unwrap();
        let tiff = raw.strip_prefix(b"Exif\0\0").unwrap_or(&raw);
        let (mut fields, le) = exif::parse_exif(tiff).unwrap();
        fields.retain(|f| f.ifd_num == exif::In::PRIMARY && f.tag != exif::Tag::Orientation);
        fields.push(exif::Field {
            tag: exif::Tag::Orientation,
            ifd_num: exif::In::PRIMARY,
            value: exif::Value::Short(vec![6]),
        });
        let mut w = exif::experimental::Writer::new();
        for f in &fields {
            w.push_field(f);
        }
        let mut out = std::io::Cursor::new(Vec::new());
        w.write(&mut out, le).unwrap();
        let phone = tessera_imaging::encode::jpeg(&d.rgb, None, Some(&out.into_inner())).unwrap();
        let u = upright("IMG_9380.jpg", &phone).unwrap().expect("turned");
        assert_eq!((u.width, u.height), (600, 800));
        assert_eq!(
            check("u.jpg", &u.jpeg),
            Ok((600, 800)),
            "no tag left to turn it again"
        );
        assert_eq!(exif_facts(&u.jpeg), exif_facts(&sample));
        assert!(exif_facts(&sample).1.is_some(), "the sample has GPS");
    }

    #[test]
    fn hostile_files_are_named_and_refused() {
        assert!(check("a.jpg", b"").unwrap_err().0.contains("empty"));
        assert!(
            check("a.jpg", b"hello, I am text")
                .unwrap_err()
                .0
                .contains("not an image")
        );
        let sample =
            std::fs::read(manifest_dir().join("../../sample/images/IMG_9380.jpg")).unwrap();
        assert_eq!(check("ok.jpg", &sample), Ok((800, 600)));
        let truncated = &sample[..sample.len() / 2];
        assert!(
            check("t.jpg", truncated)
                .unwrap_err()
                .0
                .contains("truncated JPEG")
        );
        let (focal, gps) = exif_facts(&sample);
        assert_eq!(focal, Some(4.5));
        // Downscaled to 800×600 from the 4000×3000 it was taken at, EXIF kept.
        let plane = focal_plane(&sample).expect("the sample's EXIF has its focal plane");
        assert_eq!(
            (plane.taken_long_side, plane.taken_short_side),
            (4000.0, 3000.0)
        );
        assert!(
            (plane.focal_mm * plane.px_per_mm - 2904.35).abs() < 1.0,
            "{plane:?}"
        );
        assert_eq!(focal_plane(truncated), focal_plane(&sample));
        assert_eq!(focal_plane(b"hello, I am text"), None);
        let gps = gps.unwrap();
        assert!(
            (gps.lat - 30.171).abs() < 0.01 && (gps.lon + 98.09).abs() < 0.01,
            "{gps:?}"
        );
        assert_eq!(exif_facts(b"garbage"), (None, None));
    }

    #[test]
    fn every_real_photo_in_the_test_data_is_accepted() {
        let root = manifest_dir().join("../../../shared/datasets");
        let mut n = 0;
        for set in std::fs::read_dir(root).unwrap() {
            let dir = set.unwrap().path().join("images");
            for f in std::fs::read_dir(&dir).into_iter().flatten() {
                let path = f.unwrap().path();
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    check(&path.display().to_string(), &bytes).is_ok(),
                    "{} refused: {:?}",
                    path.display(),
                    check("x", &bytes)
                );
                n += 1;
            }
        }
        assert!(n >= 60, "found {n} photos");
    }
}
