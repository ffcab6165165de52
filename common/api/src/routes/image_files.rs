//! One image's files over HTTP: its bytes (Range, ETag), its thumbnails (made on
//! demand, a bounded number at a time) and its EXIF with the camera named as people
//! name it. The image is found, and its tenancy checked, by
//! [`super::images::owned_image`].

use super::datasets::Image;
use super::images::owned_image;
use crate::ApiState;
use crate::auth::Caller;
use crate::bytes as served;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

fn object_problem(img: &Image, e: tessera_core::ports::ObjectStoreError) -> Problem {
    match e {
        // Reserved, bytes not written yet (or being taken back).
        tessera_core::ports::ObjectStoreError::NotFound(_) => Problem::unavailable(format!(
            "the bytes of image {} are not stored yet; retry",
            img.image_id
        )),
        other => Problem::internal(other),
    }
}

/// The stored bytes of an image.
async fn image_object(s: &ApiState, img: &Image) -> Result<::bytes::Bytes, Problem> {
    s.engine
        .ports()
        .objects
        .get(&img.object_key())
        .await
        .map_err(|e| object_problem(img, e))
}

/// `GET /v1/images/{id}/bytes` (Range, ETag, 304).
pub async fn image_bytes(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let img = owned_image(&s, &caller, &id).await?;
    let ct = match img
        .name
        .rsplit('.')
        .next()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("png") => "image/png",
        Some("webp") => "image/webp",
        Some("tif" | "tiff") => "image/tiff",
        _ => "image/jpeg",
    };
    served::serve_object(
        &headers,
        s.engine.ports().objects.as_ref(),
        &img.object_key(),
        ct,
        &img.content_sha,
        served::Freshness::Immutable,
        s.response_limit,
    )
    .await
    .map_err(|e| object_problem(&img, e))
}

/// `?size=N` for thumbnails.
#[derive(Debug, Deserialize, Default)]
pub struct ThumbSize {
    /// Longest side in pixels (16..=1024, default 256).
    pub size: Option<String>,
}

/// The thumbnail sizes made and kept; any other size is scaled from the next larger one,
/// so a client walking through every size cannot make the server decode (and store) the
/// original a thousand times.
const KEPT_THUMBNAILS: [u32; 5] = [64, 128, 256, 512, 1024];

/// MiB that originals read for thumbnails, and their decoded pixels, may hold at once.
/// Counted in bytes, not pixels: a small picture padded to a huge file costs its file.
const THUMBNAIL_BUDGET_MIB: u64 = 256;

fn thumbnail_budget() -> &'static tokio::sync::Semaphore {
    static BUDGET: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    BUDGET.get_or_init(|| tokio::sync::Semaphore::new(THUMBNAIL_BUDGET_MIB as usize))
}

/// What making a thumbnail of `img` holds, in MiB of [`THUMBNAIL_BUDGET_MIB`]: the
/// original's bytes, read whole, and about four bytes per decoded pixel (the decoder's
/// buffer and the RGB copy). An image whose size is not known is counted at the decode
/// limit; one costing more than the budget takes all of it and runs alone.
pub(crate) fn thumbnail_cost_mib(byte_size: u64, pixels: Option<(u64, u64)>) -> u32 {
    let pixels = pixels.map_or(tessera_imaging::decode::MAX_PIXELS, |(w, h)| {
        w.saturating_mul(h)
    });
    byte_size
        .saturating_add(pixels.saturating_mul(4))
        .div_ceil(1 << 20)
        .clamp(1, THUMBNAIL_BUDGET_MIB) as u32
}

/// Where the reason an original could not be made into thumbnails is kept, beside its
/// thumbnails (and collected with them): asking again answers from it instead of reading
/// and decoding the original again.
fn unreadable_key(img: &Image) -> String {
    format!(
        "thumbnails/{}/{}/unreadable.txt",
        img.dataset_id, img.content_sha
    )
}

/// A JPEG of `img` whose longest side is `size`, upright (EXIF orientation applied).
fn scaled_jpeg(img: image::RgbImage, size: u32) -> Result<Vec<u8>, String> {
    let small = image::DynamicImage::ImageRgb8(img)
        .thumbnail(size, size)
        .to_rgb8();
    tessera_imaging::encode::jpeg(&small, None, None).map_err(|r| r.0)
}

/// `GET /v1/images/{id}/thumbnail?size=N`: a JPEG, upright.
pub async fn thumbnail(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<ThumbSize>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let img = owned_image(&s, &caller, &id).await?;
    if let Some(why) = &img.unreadable {
        return Err(Problem::validation(format!(
            "image {id} has no thumbnail: {why}"
        )));
    }
    let size: u32 = match q.size.as_deref() {
        None => 256,
        Some(v) => v
            .parse()
            .ok()
            .filter(|n| (16..=1024).contains(n))
            .ok_or_else(|| {
                Problem::validation(format!(
                    "size `{}` must be a number of pixels in 16..=1024",
                    v.chars().take(40).collect::<String>()
                ))
            })?,
    };
    let kept = *KEPT_THUMBNAILS
        .iter()
        .find(|k| **k >= size)
        .expect("1024 is the largest size");
    let objects = s.engine.ports().objects.clone();
    let key = format!(
        "thumbnails/{}/{}/{kept}.jpg",
        img.dataset_id, img.content_sha
    );
    let body = match objects.get(&key).await {
        Ok(b) => b,
        Err(_) => {
            let no_thumbnail =
                |why: &str| Problem::validation(format!("image {id} has no thumbnail: {why}"));
            if let Ok(why) = objects.get(&unreadable_key(&img)).await {
                return Err(no_thumbnail(&String::from_utf8_lossy(&why)));
            }
            let cost = thumbnail_cost_mib(img.byte_size, img.width.zip(img.height));
            let _decoding = thumbnail_budget()
                .acquire_many(cost)
                .await
                .map_err(Problem::internal)?;
            let src = image_object(&s, &img).await?;
            let name = img.name.clone();
            let made = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
                let decoded = tessera_imaging::decode(&name, &src).map_err(|r| r.0)?;
                scaled_jpeg(decoded.rgb, kept)
            })
            .await
            .map_err(Problem::internal)?;
            let jpeg = match made {
                Ok(jpeg) => jpeg,
                Err(why) => {
                    // The same bytes fail the same way: remembered, so the next request
                    // costs one small read, not the original's decode.
                    let _ = objects
                        .put_if_absent(&unreadable_key(&img), why.clone().into())
                        .await;
                    return Err(no_thumbnail(&why));
                }
            };
            let b = ::bytes::Bytes::from(jpeg);
            let _ = objects.put_if_absent(&key, b.clone()).await;
            b
        }
    };
    let body = if kept == size {
        body
    } else {
        let jpeg = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
            let kept = image::load_from_memory_with_format(&body, image::ImageFormat::Jpeg)
                .map_err(|e| e.to_string())?
                .to_rgb8();
            scaled_jpeg(kept, size)
        })
        .await
        .map_err(Problem::internal)?
        .map_err(Problem::internal)?;
        ::bytes::Bytes::from(jpeg)
    };
    Ok(served::serve(
        &headers,
        body,
        "image/jpeg",
        None,
        served::Freshness::Immutable,
    ))
}

/// How much of an image the EXIF route reads: EXIF sits near the start of a JPEG (APP1,
/// at most 64 KiB) and of most other files; reading the whole image for it would let one
/// request cost the image's size in memory.
const EXIF_READ: u64 = 1 << 20;

/// `GET /v1/images/{id}/exif`: every EXIF field as text (empty when there is none or it
/// is unreadable), and what reconstruction reads from them parsed: `camera` (make and
/// model), `focal_length_mm`, `gps` (`{lat, lon, alt}`, degrees and metres), each null
/// where absent.
pub async fn exif(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let img = owned_image(&s, &caller, &id).await?;
    let b = s
        .engine
        .ports()
        .objects
        .get_range(&img.object_key(), 0..img.byte_size.min(EXIF_READ))
        .await
        .map_err(|e| object_problem(&img, e))?;
    let mut fields = serde_json::Map::new();
    if let Ok(e) = exif::Reader::new().read_from_container(&mut std::io::Cursor::new(&b[..])) {
        for f in e.fields().filter(|f| f.ifd_num == exif::In::PRIMARY) {
            fields.insert(
                f.tag.to_string(),
                f.display_value().with_unit(&e).to_string().into(),
            );
        }
    }
    let (focal, gps) = tessera_jobs::reconstruct::images::exif_facts(&b);
    let tag = |k: &str| {
        fields
            .get(k)
            .and_then(Value::as_str)
            .map(|v| v.trim_matches('"'))
    };
    let camera = camera_name(tag("Make"), tag("Model"));
    Ok(Json(json!({
        "image_id": img.image_id, "exif": fields,
        "camera": camera, "focal_length_mm": focal, "gps": gps,
    })))
}

/// The camera as people name it: make and model, but the make once when the model
/// already starts with it ("Canon PowerShot S95", not "Canon Canon PowerShot S95"; "NIKON
/// D750", not "NIKON CORPORATION NIKON D750").
fn camera_name(make: Option<&str>, model: Option<&str>) -> Option<String> {
    let make = make.map(str::trim).filter(|m| !m.is_empty());
    let model = model.map(str::trim).filter(|m| !m.is_empty());
    let names_make = |make: &str, model: &str| {
        let brand = make.split_whitespace().next().unwrap_or(make);
        model
            .get(..brand.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(brand))
            && model[brand.len()..]
                .chars()
                .next()
                .is_none_or(|c| c.is_whitespace() || c == '-')
    };
    match (make, model) {
        (Some(make), Some(model)) if names_make(make, model) => Some(model.to_string()),
        (Some(make), Some(model)) => Some(format!("{make} {model}")),
        (one, other) => one.or(other).map(String::from),
    }
}

#[cfg(test)]
mod camera_name_tests {
    use super::camera_name;

    #[test]
    fn the_make_is_said_once() {
        let said = |a, b| camera_name(a, b);
        assert_eq!(
            said(Some("Canon"), Some("Canon PowerShot S95")).as_deref(),
            Some("Canon PowerShot S95")
        );
        assert_eq!(
            said(Some("NIKON CORPORATION"), Some("NIKON D750")).as_deref(),
            Some("NIKON D750")
        );
        assert_eq!(
            said(Some("Canon"), Some("Canonet QL17")).as_deref(),
            Some("Canon Canonet QL17")
        );
        assert_eq!(
            said(Some("Apple"), Some("iPhone 15 Pro")).as_deref(),
            Some("Apple iPhone 15 Pro")
        );
        assert_eq!(
            said(Some("DJI"), Some("dji FC6310")).as_deref(),
            Some("dji FC6310")
        );
        assert_eq!(said(Some(" "), Some("X100V")).as_deref(), Some("X100V"));
        assert_eq!(said(Some("Sony"), None).as_deref(), Some("Sony"));
        assert_eq!(said(None, None), None);
        // A model shorter than the make, or a multi-byte make, does not panic.
        assert_eq!(
            said(Some("Olympus"), Some("E-1")).as_deref(),
            Some("Olympus E-1")
        );
        assert_eq!(said(Some("Ünï"), Some("Ü")).as_deref(), Some("Ünï Ü"));
    }
}

#[cfg(test)]
mod thumbnail_cost_tests {
    use super::{THUMBNAIL_BUDGET_MIB, thumbnail_cost_mib};

    #[test]
    fn a_thumbnail_costs_its_file_and_its_pixels_in_bytes() {
        // A 1-megapixel picture padded to 200 MB costs its file, not one megapixel.
        assert!(thumbnail_cost_mib(200 << 20, Some((1000, 1000))) >= 200);
        // A small JPEG of 24 megapixels costs its decoded pixels.
        assert_eq!(thumbnail_cost_mib(8 << 20, Some((6000, 4000))), 100);
        // Unknown sizes count at the decode limit; nothing costs more than the budget
        // (it runs alone) or less than one.
        assert_eq!(
            thumbnail_cost_mib(1, None),
            THUMBNAIL_BUDGET_MIB as u32,
            "unknown pixels are not free"
        );
        assert_eq!(
            thumbnail_cost_mib(u64::MAX, Some((u64::MAX, 2))),
            THUMBNAIL_BUDGET_MIB as u32
        );
        assert_eq!(thumbnail_cost_mib(10, Some((4, 4))), 1);
    }
}
