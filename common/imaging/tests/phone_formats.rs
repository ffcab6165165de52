//! Photos as phones store them, through the one decode path: every EXIF orientation,
//! HEIC (written by Debian's `heif-enc`, as `scripts/setup` installs it) and WebP come
//! out upright, and what is written back carries no orientation, GPS or preview.

use image::{Rgb, RgbImage};
use tessera_imaging::{Orientation, decode, encode, metadata, orient};

/// A 120 × 80 upright scene: grey, with a red block near the top-left corner.
fn scene() -> RgbImage {
    let mut img = RgbImage::from_pixel(120, 80, Rgb([128, 128, 128]));
    for y in 8..24 {
        for x in 10..34 {
            img.put_pixel(x, y, Rgb([230, 20, 20]));
        }
    }
    img
}

fn assert_upright(d: &tessera_imaging::Decoded, what: &str) {
    assert_eq!(d.rgb.dimensions(), (120, 80), "{what}");
    let red = |x, y| {
        let p = d.rgb.get_pixel(x, y).0;
        p[0] > 180 && p[1] < 80
    };
    assert!(red(20, 15), "{what}: the block is not at the top left");
    assert!(!red(100, 65) && !red(20, 65) && !red(100, 15), "{what}");
}

#[test]
fn all_eight_orientations_decode_upright() {
    for v in 1..=8 {
        let o = Orientation::from_exif(v);
        let tiff = metadata::orientation_exif(o);
        let jpeg = encode::jpeg(&orient::stored_for(&scene(), o), None, Some(&tiff)).unwrap();
        let d = decode("phone.jpg", &jpeg).unwrap();
        assert_eq!(d.orientation, o);
        assert_upright(&d, &format!("orientation {v}"));
    }
}

fn heif_enc(jpeg: &[u8]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in.jpg"), dir.path().join("out.heic"));
    std::fs::write(&src, jpeg).unwrap();
    let out = std::process::Command::new("heif-enc")
        .args(["-q", "90"])
        .arg(&src)
        .arg("-o")
        .arg(&dst)
        .output()
        .expect("heif-enc (libheif-examples; scripts/setup installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&dst).unwrap()
}

#[cfg(feature = "heif")]
#[test]
fn heic_is_decoded_as_its_container_says_and_exif_orientation_is_not_applied_again() {
    // heif-enc copies the EXIF block (orientation included) but writes no `irot`: per
    // HEIF the container decides, so the pixels come out as stored. (A phone's HEIC has
    // an `irot` that libheif applies; applying its EXIF tag again would turn it twice.)
    let plain = heif_enc(&encode::jpeg(&scene(), None, None).unwrap());
    let d = decode("IMG_0001.HEIC", &plain).unwrap();
    assert_eq!(d.format, tessera_imaging::Format::Heif);
    assert_upright(&d, "heic");
    for v in [3, 6, 8] {
        let o = Orientation::from_exif(v);
        let tiff = metadata::orientation_exif(o);
        let heic = heif_enc(&encode::jpeg(&scene(), None, Some(&tiff)).unwrap());
        let d = decode("IMG_0002.HEIC", &heic).unwrap();
        assert!(d.exif.is_some(), "the EXIF block is read");
        assert_upright(&d, &format!("heic with EXIF orientation {v} and no irot"));
    }
}

#[cfg(feature = "heif")]
#[test]
fn a_damaged_heic_is_refused_by_name() {
    let jpeg = encode::jpeg(&scene(), None, None).unwrap();
    let mut heic = heif_enc(&jpeg);
    heic.truncate(heic.len() * 2 / 3);
    let e = decode("cut.heic", &heic).unwrap_err().0;
    assert!(e.contains("cut.heic"), "{e}");
}

#[test]
fn written_files_keep_only_what_the_project_allows() {
    // An EXIF block with orientation, GPS, a serial number and a capture time.
    use exif::{Field, In, Rational, Tag, Value};
    let fields = [
        Field {
            tag: Tag::Orientation,
            ifd_num: In::PRIMARY,
            value: Value::Short(vec![6]),
        },
        Field {
            tag: Tag::Make,
            ifd_num: In::PRIMARY,
            value: Value::Ascii(vec![b"PhoneCo".to_vec()]),
        },
        Field {
            tag: Tag::BodySerialNumber,
            ifd_num: In::PRIMARY,
            value: Value::Ascii(vec![b"SN123456".to_vec()]),
        },
        Field {
            tag: Tag::DateTimeOriginal,
            ifd_num: In::PRIMARY,
            value: Value::Ascii(vec![b"2026:11:30 10:00:00".to_vec()]),
        },
        Field {
            tag: Tag::GPSLatitudeRef,
            ifd_num: In::PRIMARY,
            value: Value::Ascii(vec![b"N".to_vec()]),
        },
        Field {
            tag: Tag::GPSLatitude,
            ifd_num: In::PRIMARY,
            value: Value::Rational(vec![
                Rational { num: 48, denom: 1 },
                Rational { num: 51, denom: 1 },
                Rational { num: 0, denom: 1 },
            ]),
        },
    ];
    let mut w = exif::experimental::Writer::new();
    for f in &fields {
        w.push_field(f);
    }
    let mut raw = std::io::Cursor::new(Vec::new());
    w.write(&mut raw, false).unwrap();
    let raw = raw.into_inner();

    let tags_of = |jpeg: &[u8]| -> Vec<Tag> {
        exif::Reader::new()
            .read_from_container(&mut std::io::Cursor::new(jpeg))
            .map(|e| e.fields().map(|f| f.tag).collect())
            .unwrap_or_default()
    };
    let default = metadata::kept_exif(&raw, Default::default());
    let out = encode::jpeg(&scene(), None, default.as_deref()).unwrap();
    let tags = tags_of(&out);
    assert!(
        tags.contains(&Tag::DateTimeOriginal) && tags.contains(&Tag::Make),
        "{tags:?}"
    );
    for never in [
        Tag::Orientation,
        Tag::BodySerialNumber,
        Tag::GPSLatitude,
        Tag::GPSLatitudeRef,
    ] {
        assert!(!tags.contains(&never), "{never} kept: {tags:?}");
    }
    let with_location = metadata::kept_exif(
        &raw,
        metadata::KeepMetadata {
            location: true,
            ..Default::default()
        },
    );
    let tags = tags_of(&encode::jpeg(&scene(), None, with_location.as_deref()).unwrap());
    assert!(tags.contains(&Tag::GPSLatitude) && !tags.contains(&Tag::BodySerialNumber));
    assert!(metadata::kept_exif(&raw, metadata::KeepMetadata::NOTHING).is_none());
    assert!(tags_of(&encode::jpeg(&scene(), None, None).unwrap()).is_empty());
}

#[test]
fn the_colour_profile_is_kept() {
    let icc = vec![7u8; 600];
    let out = encode::jpeg(&scene(), Some(&icc), None).unwrap();
    assert_eq!(
        decode("p.jpg", &out).unwrap().icc.as_deref(),
        Some(&icc[..])
    );
}

#[cfg(not(feature = "heif"))]
#[test]
fn without_libheif_heic_is_refused_by_name_never_passed_through() {
    let heic = heif_enc(&encode::jpeg(&scene(), None, None).unwrap());
    let e = decode("IMG_0003.HEIC", &heic).unwrap_err().0;
    assert!(e.contains("IMG_0003.HEIC") && e.contains("HEIF"), "{e}");
}
