//! Turning one photo's pixels, faces and blur regions into its files: the public file
//! with every face that must be hidden blurred, one file per opted-out subject found
//! with only that subject shown, and a thumbnail cut from each blurred file. Every file
//! is written by Tessera (upright, with the colour profile and only the metadata the
//! project keeps), even when nothing is blurred: the upload itself is never served.

use image::RgbImage;
use tessera_core::SubjectId;
use tessera_core::geometry::FracRect;
use tessera_core::photo::Face;
use tessera_faces::blur::{self, BlurPlan};

/// Longest side of a thumbnail.
pub const THUMB_SIDE: u32 = 320;
pub use tessera_imaging::encode::JPEG_QUALITY;

/// What one file must hide.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantPlan {
    /// `None`: the public file; else the subject shown in it.
    pub variant: Option<SubjectId>,
    /// Faces and regions to blur.
    pub blur: BlurPlan,
}

/// The files a photo needs: the public file (with nothing blurred when nothing must be)
/// plus one per subject shown somewhere — N + 1, never 2^N, because no viewer needs two
/// subjects unblurred at once.
pub fn plan(faces: &[Face], regions: &[FracRect], expand: f32) -> Vec<VariantPlan> {
    let mut subjects: Vec<SubjectId> = Vec::new();
    for f in faces {
        if let Some(s) = f.decision.shown_to()
            && !subjects.contains(&s)
        {
            subjects.push(s);
        }
    }
    let for_variant = |variant: Option<SubjectId>| VariantPlan {
        variant,
        blur: BlurPlan {
            faces: faces
                .iter()
                .filter(|f| f.decision.blurred_in(variant))
                .map(|f| f.bbox)
                .collect(),
            regions: regions.to_vec(),
            expand,
        },
    };
    std::iter::once(for_variant(None))
        .chain(subjects.into_iter().map(|s| for_variant(Some(s))))
        .collect()
}

/// What a photo's files are drawn from, as a digest: every file's plan (whom it is for,
/// the face boxes and regions it blurs, their growth), the metadata the project keeps,
/// the privacy [`RULES`](tessera_core::photo::RULES) and the encoder's quality. Two
/// decisions with the same digest draw the same files from the same upload, so a
/// re-decision that arrives at the digest the published files were drawn from
/// ([`tessera_core::photo::Photo::rendered`]) publishes them again as they are.
pub fn fingerprint(plans: &[VariantPlan], keep: tessera_core::photo::KeepMetadata) -> String {
    use sha2::{Digest, Sha256};
    let files: Vec<serde_json::Value> = plans
        .iter()
        .map(|p| {
            serde_json::json!({
                "variant": p.variant, "faces": p.blur.faces, "regions": p.blur.regions,
                "expand": p.blur.expand,
            })
        })
        .collect();
    let what = serde_json::json!({
        "files": files, "keep_metadata": keep, "rules": tessera_core::photo::RULES,
        "quality": JPEG_QUALITY, "thumb_side": THUMB_SIDE,
    });
    hex::encode(Sha256::digest(what.to_string().as_bytes()))
}

/// A rendered file and its thumbnail, JPEG-encoded.
pub struct Rendered {
    /// The file.
    pub file: Vec<u8>,
    /// Its thumbnail.
    pub thumb: Vec<u8>,
}

/// What a written file carries besides pixels.
#[derive(Debug, Clone, Default)]
pub struct FileMeta {
    /// The upload's colour profile.
    pub icc: Option<Vec<u8>>,
    /// The EXIF fields the project keeps (a TIFF block), if any.
    pub exif: Option<Vec<u8>>,
}

/// Blur a copy of `img` per `plan` and encode it with its thumbnail (the thumbnail
/// keeps the colour profile and no EXIF).
pub fn render(img: &RgbImage, plan: &BlurPlan, meta: &FileMeta) -> Result<Rendered, String> {
    let mut out = img.clone();
    blur::apply(&mut out, plan);
    let icc = meta.icc.as_deref();
    Ok(Rendered {
        file: tessera_imaging::encode::jpeg(&out, icc, meta.exif.as_deref())?,
        thumb: tessera_imaging::encode::jpeg(&thumbnail(&out), icc, None)?,
    })
}

/// The thumbnail of `img` (never upscaled).
pub fn thumbnail(img: &RgbImage) -> RgbImage {
    let (w, h) = img.dimensions();
    let long = w.max(h);
    if long <= THUMB_SIDE {
        return img.clone();
    }
    let s = THUMB_SIDE as f32 / long as f32;
    tessera_imaging::resize::rgb(
        img,
        ((w as f32 * s).round() as u32).max(1),
        ((h as f32 * s).round() as u32).max(1),
    )
}

/// JPEG bytes of `img`, with no metadata.
pub fn jpeg(img: &RgbImage) -> Result<Vec<u8>, String> {
    Ok(tessera_imaging::encode::jpeg(img, None, None)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::privacy::FaceDecision;

    fn face(x: f32, decision: FaceDecision) -> Face {
        Face {
            bbox: FracRect {
                x,
                y: 0.1,
                w: 0.1,
                h: 0.1,
            },
            landmarks: [[0.0; 2]; 5],
            score: 0.9,
            embedding: vec![],
            views: vec![],
            looked_again: true,
            hard_to_recognise: false,
            evidence: None,
            rule: None,
            decision,
            cluster: None,
            ruling: None,
        }
    }

    #[test]
    fn n_subjects_make_n_plus_one_files() {
        let (a, b) = (SubjectId::new(), SubjectId::new());
        let faces = vec![
            face(
                0.1,
                FaceDecision::Subject {
                    subject: a,
                    similarity: 0.8,
                },
            ),
            face(
                0.3,
                FaceDecision::Subject {
                    subject: b,
                    similarity: 0.7,
                },
            ),
            face(
                0.5,
                FaceDecision::Subject {
                    subject: a,
                    similarity: 0.6,
                },
            ),
            face(0.7, FaceDecision::NotOptedOut { best: Some(0.1) }),
        ];
        let plans = plan(&faces, &[], 0.35);
        assert_eq!(plans.len(), 3);
        assert_eq!(plans[0].variant, None);
        assert_eq!(plans[0].blur.faces.len(), 3);
        let pa = plans.iter().find(|p| p.variant == Some(a)).unwrap();
        assert_eq!(pa.blur.faces, vec![faces[1].bbox]);
        let pb = plans.iter().find(|p| p.variant == Some(b)).unwrap();
        assert_eq!(pb.blur.faces, vec![faces[0].bbox, faces[2].bbox]);
    }

    #[test]
    fn nothing_to_blur_still_makes_a_public_file_and_a_region_or_fail_closed_blurs() {
        let shown = vec![face(0.1, FaceDecision::NotOptedOut { best: None })];
        let p = plan(&shown, &[], 0.35);
        assert_eq!((p.len(), p[0].variant), (1, None));
        assert!(p[0].blur.is_empty());
        assert_eq!(plan(&[], &[], 0.35).len(), 1);
        let region = FracRect {
            x: 0.0,
            y: 0.0,
            w: 0.5,
            h: 0.5,
        };
        let p = plan(&shown, &[region], 0.35);
        assert_eq!(
            (p.len(), p[0].blur.regions.len(), p[0].blur.faces.len()),
            (1, 1, 0)
        );
        let closed = vec![face(0.1, FaceDecision::FailClosed)];
        let p = plan(&closed, &[], 0.35);
        assert_eq!((p.len(), p[0].blur.faces.len()), (1, 1));
    }
}
