//! Which EXIF fields a published file may carry: only what the project allows, picked
//! one tag at a time from an allow-list. Everything else is dropped: GPS unless the
//! project keeps location, every serial number, owner names, maker notes, XMP, the
//! orientation tag (the pixels are upright) and the embedded preview image (which shows
//! the unblurred photo).

pub use tessera_core::photo::KeepMetadata;

fn allows(keep: &KeepMetadata, tag: exif::Tag) -> bool {
    use exif::Tag as T;
    const TIME: &[exif::Tag] = &[
        T::DateTimeOriginal,
        T::OffsetTimeOriginal,
        T::SubSecTimeOriginal,
    ];
    const CAMERA: &[exif::Tag] = &[
        T::Make,
        T::Model,
        T::FocalLength,
        T::FocalLengthIn35mmFilm,
        T::FNumber,
        T::ExposureTime,
        T::PhotographicSensitivity,
        T::LensMake,
        T::LensModel,
    ];
    const LOCATION: &[exif::Tag] = &[
        T::GPSLatitudeRef,
        T::GPSLatitude,
        T::GPSLongitudeRef,
        T::GPSLongitude,
        T::GPSAltitudeRef,
        T::GPSAltitude,
    ];
    (keep.capture_time && TIME.contains(&tag))
        || (keep.camera && CAMERA.contains(&tag))
        || (keep.location && LOCATION.contains(&tag))
}

/// The TIFF block of the allowed fields of `raw` (an EXIF block, with or without the
/// `Exif\0\0` prefix), or `None` when nothing is kept. Only the primary image's fields
/// are looked at: IFD1 is the embedded preview.
pub fn kept_exif(raw: &[u8], keep: KeepMetadata) -> Option<Vec<u8>> {
    if keep == KeepMetadata::NOTHING {
        return None;
    }
    let tiff = raw.strip_prefix(b"Exif\0\0").unwrap_or(raw);
    let (fields, little_endian) = exif::parse_exif(tiff).ok()?;
    let kept: Vec<&exif::Field> = fields
        .iter()
        .filter(|f| f.ifd_num == exif::In::PRIMARY && allows(&keep, f.tag))
        .collect();
    if kept.is_empty() {
        return None;
    }
    let mut w = exif::experimental::Writer::new();
    for f in &kept {
        w.push_field(f);
    }
    let mut out = std::io::Cursor::new(Vec::new());
    w.write(&mut out, little_endian).ok()?;
    Some(out.into_inner())
}

/// A TIFF block holding only an orientation tag: how test photos are made to look like
/// what a phone writes.
pub fn orientation_exif(o: crate::Orientation) -> Vec<u8> {
    let field = exif::Field {
        tag: exif::Tag::Orientation,
        ifd_num: exif::In::PRIMARY,
        value: exif::Value::Short(vec![o.exif() as u16]),
    };
    let mut w = exif::experimental::Writer::new();
    w.push_field(&field);
    let mut out = std::io::Cursor::new(Vec::new());
    w.write(&mut out, false).expect("a one-field TIFF block");
    out.into_inner()
}
