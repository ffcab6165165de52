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

use crate::output::emit;
use anyhow::{Context, bail};
use image::RgbImage;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tessera_core::SubjectId;
use tessera_core::geometry::FracRect;
use tessera_core::photo::Face;
use tessera_core::privacy::{self, MatchPolicy, SubjectEmbeddings};
use tessera_faces::{DetectorKind, FaceModels};
use tessera_jobs::photos::scenes::{self, Portrait, SceneSpec, Stored};
use tessera_jobs::photos::{FaceService, process, render, upload};

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
}

#[derive(Debug, Clone)]
pub(super) struct Case {
    pub(super) name: String,
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) face_px: u32,
    /// Above `face_px`: faces of mixed sizes up to this (a crowd).
    pub(super) face_px_max: u32,
    pub(super) tilt: f32,
    pub(super) people: usize,
    pub(super) stored: Stored,
    pub(super) heic: bool,
}

#[derive(Debug, Default, Serialize, Clone)]
pub(super) struct Tally {
    pub(super) faces: usize,
    pub(super) found: usize,
    pub(super) bystanders: usize,
    pub(super) bystanders_blurred: usize,
    pub(super) spurious_boxes: usize,
    pub(super) opted_out: usize,
    pub(super) leaks: usize,
    /// Of `leaks`, those the product found and decided to show.
    pub(super) leaks_shown: usize,
    pub(super) ms: f64,
    pub(super) passes: usize,
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
    ms_per_photo: f64,
    ratio_vs_decode_encode: f64,
    detector_passes_per_photo: f64,
}

pub(super) fn cases(full: bool) -> Vec<Case> {
    let c = |name: &str, w, h, face_px, tilt, people, stored, heic| Case {
        name: name.into(),
        width: w,
        height: h,
        face_px,
        face_px_max: 0,
        tilt,
        people,
        stored,
        heic,
    };
    let mut v = vec![
        c("upright", 1600, 1200, 90, 0.0, 6, Stored::Upright, false),
        c(
            "exif-6 (portrait, rotated 90 cw)",
            1200,
            1600,
            90,
            0.0,
            6,
            Stored::Tagged(6),
            false,
        ),
        c(
            "exif-8 (portrait, rotated 270 cw)",
            1200,
            1600,
            90,
            0.0,
            6,
            Stored::Tagged(8),
            false,
        ),
        c(
            "exif-3 (upside down)",
            1600,
            1200,
            90,
            0.0,
            6,
            Stored::Tagged(3),
            false,
        ),
        c(
            "untagged quarter turn (90)",
            1600,
            1200,
            90,
            0.0,
            6,
            Stored::Untagged(6),
            false,
        ),
        c(
            "untagged quarter turn (270)",
            1600,
            1200,
            90,
            0.0,
            6,
            Stored::Untagged(8),
            false,
        ),
        c(
            "untagged half turn",
            1600,
            1200,
            90,
            0.0,
            6,
            Stored::Untagged(3),
            false,
        ),
        c(
            "heads tilted 60",
            1600,
            1200,
            90,
            60.0,
            6,
            Stored::Upright,
            false,
        ),
        c(
            "heads tilted 120",
            1600,
            1200,
            90,
            120.0,
            6,
            Stored::Upright,
            false,
        ),
        c(
            "heads tilted 35",
            1600,
            1200,
            90,
            35.0,
            6,
            Stored::Upright,
            false,
        ),
        c(
            "small faces 40 px, 12 MP",
            4000,
            3000,
            40,
            0.0,
            12,
            Stored::Upright,
            false,
        ),
        c(
            "small faces 24 px, 12 MP",
            4000,
            3000,
            24,
            0.0,
            12,
            Stored::Upright,
            false,
        ),
        c(
            "small faces 32 px, 12 MP",
            4000,
            3000,
            32,
            0.0,
            12,
            Stored::Upright,
            false,
        ),
        c(
            "faces 64 px, 12 MP",
            4000,
            3000,
            64,
            0.0,
            12,
            Stored::Upright,
            false,
        ),
        Case {
            face_px_max: 60,
            ..c(
                "crowd of 30, 22-60 px, 24 MP",
                6000,
                4000,
                22,
                0.0,
                30,
                Stored::Upright,
                false,
            )
        },
        c(
            "heic, upright",
            1600,
            1200,
            90,
            0.0,
            6,
            Stored::Upright,
            true,
        ),
        c(
            "heic, turned (no irot)",
            1600,
            1200,
            90,
            0.0,
            6,
            Stored::Untagged(6),
            true,
        ),
    ];
    if full {
        for px in [16, 20, 24, 32] {
            v.push(c(
                &format!("small faces {px} px, 24 MP"),
                6000,
                4000,
                px,
                0.0,
                20,
                Stored::Upright,
                false,
            ));
        }
        v.push(c(
            "small faces 24 px, 24 MP, untagged quarter turn",
            6000,
            4000,
            24,
            0.0,
            20,
            Stored::Untagged(6),
            false,
        ));
    }
    v
}

pub(super) fn load(path: &Path) -> anyhow::Result<RgbImage> {
    Ok(image::open(path)
        .with_context(|| format!("cannot open {}", path.display()))?
        .to_rgb8())
}

/// A portrait and its one face, as the product's detector finds it.
pub(super) fn portrait(models: &FaceModels, dir: &Path, file: &str) -> anyhow::Result<Portrait> {
    let pixels = load(&dir.join(file))?;
    let face = models
        .detect_once(&pixels)?
        .into_iter()
        .next()
        .with_context(|| format!("no face in {file}"))?
        .bbox;
    Ok(Portrait { pixels, face })
}

pub(super) fn heic_of(jpeg: &[u8]) -> anyhow::Result<Vec<u8>> {
    let dir = tempfile::tempdir()?;
    let (src, dst) = (dir.path().join("in.jpg"), dir.path().join("out.heic"));
    std::fs::write(&src, jpeg)?;
    let out = std::process::Command::new("heif-enc")
        .arg("-q")
        .arg("80")
        .arg(&src)
        .arg("-o")
        .arg(&dst)
        .output()
        .context("heif-enc (Debian's libheif-examples; scripts/setup installs it)")?;
    if !out.status.success() {
        bail!("heif-enc failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(std::fs::read(&dst)?)
}

pub(super) fn overlaps(a: &FracRect, b: &FracRect) -> bool {
    a.iou(b) > 0.2 || {
        let (cx, cy) = (b.x + b.w / 2.0, b.y + b.h / 2.0);
        cx > a.x && cx < a.x + a.w && cy > a.y && cy < a.y + a.h
    }
}

/// Faces found in upright `img` by the product's search (or, for the comparison, one
/// upright pass), embedded and decided.
fn faces_of(
    models: &FaceModels,
    img: &RgbImage,
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
    single_pass: bool,
) -> anyhow::Result<(Vec<Face>, usize)> {
    let (mut faces, passes) = if single_pass {
        let (w, h) = img.dimensions();
        let mut v = Vec::new();
        for d in models.detect_once(img)? {
            v.push(Face {
                bbox: FracRect::from_pixels(d.bbox, w, h),
                landmarks: d.landmarks.map(|[x, y]| [x / w as f32, y / h as f32]),
                score: d.score,
                embedding: models.embed(img, &d.landmarks)?,
                views: Vec::new(),
                hard_to_recognise: false,
                evidence: Some(tessera_faces::search::evidence(&d)),
                rule: None,
                decision: tessera_core::privacy::FaceDecision::FailClosed,
            });
        }
        (v, 1)
    } else {
        process::faces_and_passes(models, img)?
    };
    for f in &mut faces {
        f.redecide(subjects, policy);
    }
    Ok((faces, passes))
}

/// Judge one published public file against the truth.
#[allow(clippy::too_many_arguments)]
pub(super) fn judge(
    judge: &FaceModels,
    public: &RgbImage,
    truth: &[(usize, FracRect)],
    opted: &[bool],
    refs: &[Vec<Vec<f32>>],
    faces: &[Face],
    threshold: f32,
    t: &mut Tally,
) -> anyhow::Result<()> {
    let (w, h) = public.dimensions();
    let seen = judge.detect(public)?;
    for (who, r) in truth {
        t.faces += 1;
        let product = faces.iter().find(|f| overlaps(&f.bbox, r));
        if product.is_some() {
            t.found += 1;
        }
        if opted[*who] {
            t.opted_out += 1;
            let recognised = seen.iter().any(|d| {
                let b = FracRect::from_pixels(d.bbox, w, h);
                overlaps(&b, r)
                    && judge.embed(public, &d.landmarks).is_ok_and(|e| {
                        refs[*who]
                            .iter()
                            .any(|x| privacy::cosine(&e, x) >= threshold)
                    })
            });
            if recognised {
                t.leaks += 1;
                // Shown by a decision (found, matched below the threshold): the leaks a
                // threshold can change. The rest were missed or blurred too weakly.
                if product.is_some_and(|f| !f.decision.blurred_in(None)) {
                    t.leaks_shown += 1;
                }
                if std::env::var_os("TESSERA_BENCH_DEBUG").is_some() {
                    eprintln!(
                        "leak: truth {r:?} product {:?}",
                        product.map(|f| (&f.bbox, &f.decision, f.views.len(), f.rule, f.landmarks))
                    );
                }
            }
        } else {
            t.bystanders += 1;
            if product.is_some_and(|f| f.decision.blurred_in(None)) {
                t.bystanders_blurred += 1;
            }
        }
    }
    t.spurious_boxes += faces
        .iter()
        .filter(|f| truth.iter().all(|(_, r)| !overlaps(&f.bbox, r)))
        .count();
    Ok(())
}

/// Another picture of the person in `portrait`, as a second photo of them would differ:
/// seen from the other side (mirrored), turned 6°, in other light (darker, flatter),
/// slightly soft and re-encoded as a phone's JPEG. The judge keeps the portrait itself, so
/// a leak is still judged against the very pixels that were published.
pub(super) fn another_picture(portrait: &RgbImage) -> anyhow::Result<RgbImage> {
    let mirrored = image::imageops::flip_horizontal(portrait);
    let (w, h) = mirrored.dimensions();
    let (c, s) = (6f32.to_radians().cos(), 6f32.to_radians().sin());
    let (cx, cy) = (w as f32 / 2.0, h as f32 / 2.0);
    let turned = RgbImage::from_fn(w, h, |x, y| {
        let (dx, dy) = (x as f32 - cx, y as f32 - cy);
        tessera_faces::search::sample(&mirrored, cx + c * dx - s * dy, cy + s * dx + c * dy)
    });
    let lit = image::imageops::contrast(&image::imageops::brighten(&turned, -25), -20.0);
    let soft = image::imageops::blur(&lit, 1.2);
    let jpeg = tessera_imaging::encode::jpeg(&soft, None, None).map_err(anyhow::Error::msg)?;
    Ok(image::load_from_memory(&jpeg)?.to_rgb8())
}

/// What every privacy benchmark starts from: the product's models and the judge's, the
/// portraits (Astronaut and Hopper opted out, the cameraman a bystander), each person's
/// references as both recognisers see them, and the scenes' background.
pub(super) struct Bench {
    pub(super) product: std::sync::Arc<FaceModels>,
    pub(super) judge: std::sync::Arc<FaceModels>,
    pub(super) judge_kind: DetectorKind,
    pub(super) portraits: Vec<Portrait>,
    pub(super) opted: [bool; 3],
    pub(super) refs: Vec<Vec<Vec<f32>>>,
    pub(super) subjects: Vec<SubjectEmbeddings>,
    /// For each portrait, its index in `subjects` when it opted out.
    pub(super) subject_of: [Option<usize>; 3],
    pub(super) background: RgbImage,
}

impl Bench {
    /// With `other_reference`, each opted-out person is enrolled from another picture of
    /// them than the one placed in the scenes (see [`another_picture`]): the same pixels
    /// on both sides would score about 0.95 at any size and say nothing about a real
    /// enrolment.
    pub(super) fn prepare(a: &Args, other_reference: bool) -> anyhow::Result<Bench> {
        let judge_kind = match a.detector {
            DetectorKind::Yunet => DetectorKind::Centerface,
            DetectorKind::Centerface => DetectorKind::Yunet,
        };
        let product = FaceService::load_from_env(a.detector, 1)?;
        let judge_models = FaceService::load_from_env(judge_kind, 1)?;
        let portraits = vec![
            portrait(&product, &a.faces, "astronaut.png")?,
            portrait(&product, &a.faces, "grace_hopper.jpg")?,
            portrait(&product, &a.faces, "camera.png")?,
        ];
        let opted = [true, true, false];
        let mut refs = Vec::new();
        let mut subjects = Vec::new();
        let mut subject_of = [None; 3];
        for (i, p) in portraits.iter().enumerate() {
            let d = product.detect_once(&p.pixels)?.remove(0);
            let e = product.embed(&p.pixels, &d.landmarks)?;
            let enrolled = if other_reference {
                let other = another_picture(&p.pixels)?;
                let d = product
                    .detect_once(&other)?
                    .into_iter()
                    .next()
                    .context("no face in the other picture of a portrait")?;
                product.embed(&other, &d.landmarks)?
            } else {
                e.clone()
            };
            let je = judge_models
                .detect_once(&p.pixels)?
                .first()
                .map(|j| judge_models.embed(&p.pixels, &j.landmarks))
                .transpose()?
                .unwrap_or_else(|| e.clone());
            refs.push(vec![e.clone(), je]);
            if opted[i] {
                subject_of[i] = Some(subjects.len());
                subjects.push(SubjectEmbeddings {
                    subject: SubjectId::new(),
                    embeddings: vec![enrolled],
                });
            }
        }
        Ok(Bench {
            product,
            judge: judge_models,
            judge_kind,
            portraits,
            opted,
            refs,
            subjects,
            subject_of,
            background: load(&a.faces.join("negatives/coffee.png"))?,
        })
    }

    /// Photo `i` of `case`: the scene (with its truth) and the stored file.
    pub(super) fn scene(&self, case: &Case, i: u32) -> anyhow::Result<(scenes::Scene, Vec<u8>)> {
        let spec = SceneSpec {
            width: case.width,
            height: case.height,
            face_px: case.face_px,
            face_px_max: case.face_px_max,
            tilt_deg: case.tilt,
            people: (0..case.people).map(|k| (k + i as usize) % 3).collect(),
            stored: case.stored,
            seed: u64::from(i) * 7919 + case.face_px as u64,
        };
        let scene = scenes::make(&self.portraits, &self.background, &spec);
        let bytes = if case.heic {
            heic_of(&scene.jpeg)?
        } else {
            scene.jpeg.clone()
        };
        Ok((scene, bytes))
    }
}

pub async fn run(json: bool, a: Args) -> anyhow::Result<ExitCode> {
    if a.curve {
        return super::bench_curve::run(json, a).await;
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
            let (mut now, mut before) = (Tally::default(), Tally::default());
            let mut base_ms = 0.0;
            for i in 0..a.photos {
                let (scene, bytes) = bench.scene(&case, i)?;
                // The product: decode (orientation applied), search, decide, blur, encode.
                let t0 = Instant::now();
                let decoded = upload::decode("scene", &bytes)?;
                let (faces, passes) = faces_of(product, &decoded.rgb, subjects, policy, false)?;
                let plans = render::plan(&faces, &[], tessera_faces::blur::DEFAULT_EXPAND);
                let public = render::render(&decoded.rgb, &plans[0].blur, &Default::default())
                    .map_err(anyhow::Error::msg)?;
                now.ms += t0.elapsed().as_secs_f64() * 1e3;
                now.passes += passes;
                let shown = upload::decode("public", &public.file)?.rgb;
                judge(judge_models, &shown, &scene.faces, opted, refs, &faces, a.threshold, &mut now)?;

                // Before: stored pixels, one upright pass; a viewer applies the tag.
                let stored = image::load_from_memory(&bytes)
                    .map(|i| i.to_rgb8())
                    .unwrap_or_else(|_| decoded.rgb.clone());
                let (old_faces, _) = faces_of(product, &stored, subjects, policy, true)?;
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
                ms_per_photo: now.ms / n,
                ratio_vs_decode_encode: now.ms / base_ms.max(1e-9),
                detector_passes_per_photo: now.passes as f64 / n,
            });
            eprintln!(
                "{}: recall {:.2} (single pass {:.2}), leaks {}/{} (single pass {}), over-blur {:.2}, spurious {}",
                case.name,
                ratio(now.found, now.faces),
                ratio(before.found, before.faces),
                now.leaks,
                now.opted_out,
                before.leaks,
                ratio(now.bystanders_blurred, now.bystanders),
                now.spurious_boxes
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
            "{:<48} {:>14} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8}",
            "case", "photo", "recall", "1-pass", "leaks", "1p-leaks", "overblur", "×decode"
        )];
        for r in report["cases"].as_array().into_iter().flatten() {
            lines.push(format!(
                "{:<48} {:>14} {:>7.2} {:>9.2} {:>5}/{:<3} {:>9} {:>8.2} {:>8.1}",
                r["case"].as_str().unwrap_or(""),
                r["photo"].as_str().unwrap_or(""),
                r["recall"].as_f64().unwrap_or(0.0),
                r["single_pass_recall"].as_f64().unwrap_or(0.0),
                r["leaks"],
                r["opted_out_faces"],
                r["single_pass_leaks"],
                r["over_blur"].as_f64().unwrap_or(0.0),
                r["ratio_vs_decode_encode"].as_f64().unwrap_or(0.0),
            ));
        }
        lines.join("\n")
    });
    Ok(ExitCode::SUCCESS)
}
