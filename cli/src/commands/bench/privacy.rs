//! `tessera bench privacy`: does the privacy pipeline hide the people who opted out in
//! the photos phones really produce? Scenes are made from the public-domain portraits
//! in `../shared/testdata/faces` (see `tessera_jobs::photos::scenes`): upright, sideways
//! with EXIF orientation 3/6/8, turned with no tag, heads tilted past 45°, small faces
//! in large photos, and HEIC (through `heif-enc`). Each goes through the product's own
//! decode → detect → decide → blur → encode, and the published public file is judged:
//!
//! - **recall**: faces the product found (its box overlaps the true one) / faces there;
//! - **over-blur**: faces of people who did not opt out that are blurred in the public
//!   file / such faces there, and boxes matching no face at all (spurious);
//! - **leaks**: opted-out faces still recognisable in the public file, judged by the
//!   detector that did *not* run in the product (CenterFace when YuNet ran) plus SFace
//!   at the project's threshold.
//!
//! The same scenes through a single upright detector pass on the stored pixels (what
//! Tessera did before orientation and the turn/tile search) are reported beside, and
//! time per photo as a ratio to a bare decode + encode measured in the same run.

use super::scenes::{Bench, Case, Tally, cases, judge};
use crate::output::emit;
use anyhow::Context;
use image::RgbImage;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tessera_core::geometry::FracRect;
use tessera_core::photo::Face;
use tessera_core::privacy::{MatchPolicy, SubjectEmbeddings};
use tessera_faces::search::Thoroughness;
use tessera_faces::{DetectorKind, FaceModels};
use tessera_jobs::photos::{decide, faces, render, upload};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The shared face test photos (portraits and negatives).
    #[arg(long, default_value = "../shared/testdata/faces")]
    pub faces: PathBuf,
    /// The product's detector (the judge is the other one).
    #[arg(long, default_value = "yunet")]
    pub detector: DetectorKind,
    /// Cosine threshold of matching (and of the judge's recognition).
    #[arg(long, default_value_t = 0.363)]
    pub threshold: f32,
    /// Photos per case.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=200))]
    pub photos: u32,
    /// Add the large cases (24-megapixel group photos with small faces).
    #[arg(long)]
    pub full: bool,
    /// Only the cases whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Leaks and bystander blur per case for every threshold from 0.25 to 0.50, the
    /// similarity of the same and of different people per case, and the threshold to
    /// recommend (`--threshold` is then only the judge's).
    #[arg(long)]
    pub curve: bool,
    /// Also write every scene, as stored (JPEG or HEIC, tagged or not), to this folder:
    /// the same photos for `tessera bench photos` and for other tools.
    #[arg(long)]
    pub save: Option<PathBuf>,
}

#[derive(Serialize)]
struct CaseReport {
    case: String,
    photo: String,
    face_px: u32,
    photos: u32,
    recall: f64,
    over_blur: f64,
    spurious_boxes: usize,
    leaks: usize,
    opted_out_faces: usize,
    single_pass_recall: f64,
    single_pass_leaks: usize,
    /// The same photos searched with every pass, whatever the evidence
    /// ([`Thoroughness::Every`]): what the gates are held to.
    every_pass_recall: f64,
    every_pass_leaks: usize,
    every_pass_over_blur: f64,
    ms_per_photo: f64,
    every_pass_ms_per_photo: f64,
    /// Product time over every-pass time, same photos, same run.
    ratio_vs_every_pass: f64,
    ratio_vs_decode_encode: f64,
    detector_passes_per_photo: f64,
    every_pass_detector_passes_per_photo: f64,
}

/// Faces found in upright `img` by a search as thorough as `how` (or, with `None`, one
/// upright pass), embedded and decided.
fn faces_of(
    models: &FaceModels,
    img: &RgbImage,
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
    how: Option<Thoroughness>,
) -> anyhow::Result<(Vec<Face>, usize)> {
    let (mut faces, passes) = if let Some(how) = how {
        let s = faces::faces_searched(models, img, how, policy)?;
        let passes = s.passes();
        (s.faces, passes)
    } else {
        let (w, h) = img.dimensions();
        let mut v = Vec::new();
        for d in models.detect_once(img)? {
            v.push(Face {
                bbox: FracRect::from_pixels(d.bbox, w, h),
                landmarks: d.landmarks.map(|[x, y]| [x / w as f32, y / h as f32]),
                score: d.score,
                embedding: models.embed(img, &d.landmarks)?,
                views: Vec::new(),
                looked_again: false,
                hard_to_recognise: false,
                evidence: Some(tessera_faces::search::evidence(&d)),
                rule: None,
                decision: tessera_core::privacy::FaceDecision::FailClosed,
                cluster: None,
                ruling: None,
            });
        }
        (v, 1)
    };
    let looked = decide::decide(models, img, &mut faces, subjects, policy)?;
    let looks = tessera_faces::search::SECOND_LOOKS.len();
    Ok((faces, passes + looks * looked.looked_again))
}

/// Writes one scene's stored bytes as `<case>-<i>.jpg` (or `.heic`), the case's name
/// reduced to letters, digits and dashes.
fn save_scene(dir: &std::path::Path, case: &Case, i: u32, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create --save folder {}", dir.display()))?;
    let mut slug = String::new();
    for c in case.name.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let ext = if case.heic { "heic" } else { "jpg" };
    let path = dir.join(format!("{}-{i}.{ext}", slug.trim_matches('-')));
    std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

pub async fn run(json: bool, a: Args) -> anyhow::Result<ExitCode> {
    if a.curve {
        return super::curve::run(json, a).await;
    }
    let report = tokio::task::spawn_blocking(move || -> anyhow::Result<serde_json::Value> {
        let bench = Bench::prepare(&a, false)?;
        let (product, judge_models, judge_kind) = (&bench.product, &bench.judge, bench.judge_kind);
        let (opted, refs, subjects) = (&bench.opted[..], &bench.refs, &bench.subjects);
        let policy = MatchPolicy::from_threshold(Some(a.threshold));
        let mut rows = Vec::new();
        for case in cases(a.full)
            .into_iter()
            .filter(|c| a.only.as_ref().is_none_or(|o| c.name.contains(o.as_str())))
        {
            let (mut now, mut before, mut every) =
                (Tally::default(), Tally::default(), Tally::default());
            let mut base_ms = 0.0;
            for i in 0..a.photos {
                let (scene, bytes) = bench.scene(&case, i)?;
                if let Some(dir) = &a.save {
                    save_scene(dir, &case, i, &bytes)?;
                }
                // The product (decode with orientation applied, search, decide, blur,
                // encode), and the same with every pass.
                let mut decoded = None;
                for (how, tally) in [(Thoroughness::Gated, &mut now), (Thoroughness::Every, &mut every)] {
                    let t0 = Instant::now();
                    let d = upload::decode("scene", &bytes)?;
                    let (faces, passes) = faces_of(product, &d.rgb, subjects, policy, Some(how))?;
                    let plans = render::plan(&faces, &[], tessera_faces::blur::DEFAULT_EXPAND);
                    let public = render::render(&d.rgb, &plans[0].blur, &Default::default())
                        .map_err(anyhow::Error::msg)?;
                    tally.ms += t0.elapsed().as_secs_f64() * 1e3;
                    tally.passes += passes;
                    let shown = upload::decode("public", &public.file)?.rgb;
                    judge(judge_models, &shown, &scene.faces, opted, refs, &faces, a.threshold, tally)?;
                    decoded = Some(d);
                }
                let decoded = decoded.expect("decoded above");

                // Before: stored pixels, one upright pass; a viewer applies the tag.
                let stored = image::load_from_memory(&bytes)
                    .map(|i| i.to_rgb8())
                    .unwrap_or_else(|_| decoded.rgb.clone());
                let (old_faces, _) = faces_of(product, &stored, subjects, policy, None)?;
                let old_plans = render::plan(&old_faces, &[], tessera_faces::blur::DEFAULT_EXPAND);
                let mut old_public = stored.clone();
                tessera_faces::blur::apply(&mut old_public, &old_plans[0].blur);
                let old_shown = tessera_imaging::orient::apply(
                    image::DynamicImage::ImageRgb8(old_public),
                    decoded.orientation,
                )
                .to_rgb8();
                let old_faces_shown: Vec<Face> = old_faces
                    .into_iter()
                    .map(|mut f| {
                        f.bbox = decoded.orientation.map_rect(f.bbox);
                        f
                    })
                    .collect();
                judge(judge_models, &old_shown, &scene.faces, opted, refs, &old_faces_shown, a.threshold, &mut before)?;

                // Baseline in the same run: decode and encode with a thumbnail.
                let t0 = Instant::now();
                let d = upload::decode("scene", &bytes)?;
                render::jpeg(&d.rgb).map_err(anyhow::Error::msg)?;
                render::jpeg(&render::thumbnail(&d.rgb)).map_err(anyhow::Error::msg)?;
                base_ms += t0.elapsed().as_secs_f64() * 1e3;
            }
            let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
            let n = f64::from(a.photos);
            rows.push(CaseReport {
                case: case.name.clone(),
                photo: format!(
                    "{}x{}{}",
                    case.width,
                    case.height,
                    if case.heic { " heic" } else { " jpeg" }
                ),
                face_px: case.face_px,
                photos: a.photos,
                recall: ratio(now.found, now.faces),
                over_blur: ratio(now.bystanders_blurred, now.bystanders),
                spurious_boxes: now.spurious_boxes,
                leaks: now.leaks,
                opted_out_faces: now.opted_out,
                single_pass_recall: ratio(before.found, before.faces),
                single_pass_leaks: before.leaks,
                every_pass_recall: ratio(every.found, every.faces),
                every_pass_leaks: every.leaks,
                every_pass_over_blur: ratio(every.bystanders_blurred, every.bystanders),
                ms_per_photo: now.ms / n,
                every_pass_ms_per_photo: every.ms / n,
                ratio_vs_every_pass: now.ms / every.ms.max(1e-9),
                ratio_vs_decode_encode: now.ms / base_ms.max(1e-9),
                detector_passes_per_photo: now.passes as f64 / n,
                every_pass_detector_passes_per_photo: every.passes as f64 / n,
            });
            eprintln!(
                "{}: recall {:.2} (every pass {:.2}, single pass {:.2}), leaks {}/{} (every pass {}, single pass {}), over-blur {:.2}, spurious {}, {:.2}× every pass's time",
                case.name,
                ratio(now.found, now.faces),
                ratio(every.found, every.faces),
                ratio(before.found, before.faces),
                now.leaks,
                now.opted_out,
                every.leaks,
                before.leaks,
                ratio(now.bystanders_blurred, now.bystanders),
                now.spurious_boxes,
                now.ms / every.ms.max(1e-9),
            );
        }
        Ok(serde_json::json!({
            "detector": a.detector.as_str(),
            "judge": judge_kind.as_str(),
            "threshold": a.threshold,
            "photos_per_case": a.photos,
            "cases": rows,
        }))
    })
    .await??;
    emit(json, &report, || {
        let mut lines = vec![format!(
            "{:<48} {:>14} {:>7} {:>7} {:>9} {:>7} {:>8} {:>8} {:>7} {:>7}",
            "case",
            "photo",
            "recall",
            "every",
            "leaks",
            "every",
            "overblur",
            "×decode",
            "passes",
            "×every"
        )];
        for r in report["cases"].as_array().into_iter().flatten() {
            lines.push(format!(
                "{:<48} {:>14} {:>7.2} {:>7.2} {:>5}/{:<3} {:>7} {:>8.2} {:>8.1} {:>7.1} {:>7.2}",
                r["case"].as_str().unwrap_or(""),
                r["photo"].as_str().unwrap_or(""),
                r["recall"].as_f64().unwrap_or(0.0),
                r["every_pass_recall"].as_f64().unwrap_or(0.0),
                r["leaks"],
                r["opted_out_faces"],
                r["every_pass_leaks"],
                r["over_blur"].as_f64().unwrap_or(0.0),
                r["ratio_vs_decode_encode"].as_f64().unwrap_or(0.0),
                r["detector_passes_per_photo"].as_f64().unwrap_or(0.0),
                r["ratio_vs_every_pass"].as_f64().unwrap_or(0.0),
            ));
        }
        lines.join("\n")
    });
    Ok(ExitCode::SUCCESS)
}
