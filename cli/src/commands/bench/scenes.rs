//! The scenes every privacy benchmark judges (`tessera bench privacy` and its `--curve`):
//! the cases, the portraits and references they start from, and the judge that decides,
//! with the detector that did not run in the product, whether a published face leaks.

use anyhow::{Context, bail};
use image::RgbImage;
use serde::Serialize;
use std::path::Path;
use tessera_core::SubjectId;
use tessera_core::geometry::FracRect;
use tessera_core::photo::Face;
use tessera_core::privacy::{self, SubjectEmbeddings};
use tessera_faces::{DetectorKind, FaceModels};
use tessera_jobs::photos::FaceService;
use tessera_jobs::photos::scenes::{self, Portrait, SceneSpec, Stored};

use super::privacy::Args;

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
        // A turned group photo: its turn is flagged only by a probe that sees faces this
        // small, so this is what the probes' size is held to.
        c(
            "untagged quarter turn, 40 px faces, 12 MP",
            4000,
            3000,
            40,
            0.0,
            12,
            Stored::Untagged(6),
            false,
        ),
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
