//! `tessera blur INPUT_DIR --out OUT`: a one-shot privacy run in embedded mode, and
//! `tessera bench photos DIR`: the per-photo cost of face processing on one core.

use super::photos::{drive, photo_error, upload};
use crate::embedded;
use crate::output::emit;
use anyhow::{Context, bail};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_core::photo::Photo;
use tessera_core::privacy::{FaceDecision, MatchPolicy, SubjectEmbeddings};
use tessera_core::{SubjectId, TenantId, records};
use tessera_faces::{DetectorKind, FaceModels};
use tessera_jobs::photos::{FaceService, project, render, upload as photo_upload};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of photos.
    pub input: PathBuf,
    /// Where variants, thumbnails and `manifest.json` go.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub privacy: Privacy,
    /// How much face boxes grow before blurring (0.30..0.40).
    #[arg(long, default_value_t = tessera_faces::blur::DEFAULT_EXPAND)]
    pub blur_expand: f32,
}

/// Who is protected, and how faces are found and matched.
#[derive(clap::Args, Debug)]
pub struct Privacy {
    /// Folder with one sub-folder per person who opted out, holding their reference photos.
    #[arg(long)]
    pub opted_out: Option<PathBuf>,
    /// Cosine similarity at or above which a clear face is an opted-out person (0.363 is
    /// recommended, from `tessera bench privacy --curve`; a small face is held to the
    /// share of it the same person keeps at its size). Without it, every face is blurred
    /// in every file (fail closed) and no match is recorded.
    #[arg(long)]
    pub threshold: Option<f32>,
    /// Face detector.
    #[arg(long, default_value = "yunet")]
    pub detector: DetectorKind,
}

/// One person's reference photos: the sub-folders of `dir`.
fn reference_sets(dir: &Path) -> anyhow::Result<Vec<(String, Vec<PathBuf>)>> {
    if !dir.is_dir() {
        bail!(
            "--opted-out {} is not a folder; give a folder with one sub-folder of reference photos per person",
            dir.display()
        );
    }
    let mut sets = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            let label = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("subject")
                .to_string();
            sets.push((label, crate::photos::list_images(&path)?));
        }
    }
    sets.sort();
    if sets.is_empty() {
        bail!(
            "--opted-out {} has no sub-folders; make one folder per person holding their reference photos",
            dir.display()
        );
    }
    Ok(sets)
}

#[derive(Serialize)]
struct ManifestFace {
    bbox: tessera_core::geometry::FracRect,
    bbox_px: [u32; 4],
    score: f32,
    decision: &'static str,
    subject: Option<String>,
    similarity: Option<f32>,
    /// The threshold it was decided at, and why.
    rule: Option<tessera_core::privacy::RuleReport>,
    blurred_in_public: bool,
}

#[derive(Serialize)]
struct ManifestFile {
    variant: String,
    file: String,
    thumbnail: String,
    unchanged_upload: bool,
}

#[derive(Serialize)]
struct ManifestPhoto {
    file: String,
    photo: Option<String>,
    published: bool,
    error: Option<String>,
    width: Option<u32>,
    height: Option<u32>,
    variant_version: Option<u64>,
    faces: Vec<ManifestFace>,
    files: Vec<ManifestFile>,
}

fn face_entry(
    p: &Photo,
    f: &tessera_core::photo::Face,
    labels: &HashMap<SubjectId, String>,
) -> ManifestFace {
    let b = f.bbox.to_pixels(p.width, p.height);
    let (decision, subject, similarity) = match &f.decision {
        FaceDecision::FailClosed => ("fail_closed", None, None),
        FaceDecision::NotOptedOut { best } => ("not_opted_out", None, *best),
        FaceDecision::Subject {
            subject,
            similarity,
        } => ("opted_out", labels.get(subject).cloned(), Some(*similarity)),
        FaceDecision::Ambiguous { candidates } => (
            "ambiguous",
            Some(
                candidates
                    .iter()
                    .map(|c| labels.get(&c.0).cloned().unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
            candidates.first().map(|c| c.1),
        ),
    };
    ManifestFace {
        bbox: f.bbox,
        bbox_px: b.map(|v| v.round() as u32),
        score: f.score,
        decision,
        subject,
        similarity,
        rule: f.rule.map(|r| r.report(f.evidence)),
        blurred_in_public: f.decision.blurred_in(None),
    }
}

/// The folder a photo's files go to under OUT: its file name (`a.jpg` and `a.png` are
/// different photos), never a name the run itself writes (`manifest.json`,
/// `.tessera-state`), and unique even where the file system ignores case.
fn output_folder(path: &Path, used: &mut HashSet<String>) -> String {
    const RESERVED: [&str; 2] = ["manifest.json", ".tessera-state"];
    let name = path
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or("photo")
        .to_string();
    let mut candidate = name.clone();
    let mut n = 1;
    while RESERVED.contains(&candidate.to_lowercase().as_str())
        || !used.insert(candidate.to_lowercase())
    {
        n += 1;
        candidate = format!("{name}-{n}");
    }
    candidate
}

pub async fn run(json: bool, args: Args) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let images = crate::photos::list_images(&args.input)?;
    let references = args
        .privacy
        .opted_out
        .as_deref()
        .map(reference_sets)
        .transpose()?;
    project::validate_settings(args.privacy.threshold, args.blur_expand)?;
    let models = FaceService::load_from_env(args.privacy.detector, 1)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    // The run's own state, kept for inspection (`tessera --state OUT/.tessera-state jobs list`)
    // and replaced by the next run.
    let state = args.out.join(".tessera-state");
    if state.exists() {
        std::fs::remove_dir_all(&state)
            .with_context(|| format!("cannot clear {}", state.display()))?;
    }
    let (_dir, engine) = embedded::engine_with(
        &state,
        Some(Duration::from_secs(30)),
        Arc::new(FaceService::with_models(models.clone())),
    )
    .await?;
    let store = engine.ports().store.clone();
    let proj = project::create(
        store.as_ref(),
        TenantId::local(),
        "blur",
        args.privacy.threshold,
        args.blur_expand,
    )
    .await?;
    let mut labels = HashMap::new();
    let mut sweeps = Vec::new();
    for (label, paths) in references.unwrap_or_default() {
        let mut refs = Vec::new();
        for p in paths {
            refs.push((
                p.display().to_string(),
                std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?,
            ));
        }
        let (s, change) = project::enrol(
            &engine,
            models.clone(),
            proj.id,
            &label,
            refs,
            &tessera_core::audit::Actor::cli(proj.tenant.clone()),
        )
        .await
        .with_context(|| format!("cannot enrol `{label}`"))?;
        labels.insert(s.id, label);
        sweeps.push(change.reblur_job);
    }
    let proj = project::load(store.as_ref(), proj.id).await?;

    let mut submitted = Vec::new();
    for path in &images {
        submitted.push((path.clone(), upload(&engine, &proj, path).await?));
    }
    let jobs = drive(
        &engine,
        submitted.iter().map(|s| s.1.1).chain(sweeps).collect(),
        !json,
    )
    .await?;

    let mut used = HashSet::new();
    let mut photos = Vec::new();
    for (path, (photo_id, ingest_job)) in &submitted {
        let file = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        let row: Option<Photo> = match store.get(&records::photo_key(*photo_id)).await? {
            Some(item) => Some(records::decode(&item)?),
            None => None,
        };
        let error = photo_error(&engine, &jobs, *ingest_job, *photo_id).await?;
        let mut entry = ManifestPhoto {
            file: file.clone(),
            photo: Some(photo_id.to_string()),
            published: false,
            error,
            width: None,
            height: None,
            variant_version: None,
            faces: Vec::new(),
            files: Vec::new(),
        };
        if let Some(p) = row {
            entry.published = p.published_at.is_some();
            entry.width = Some(p.width);
            entry.height = Some(p.height);
            entry.variant_version = Some(p.variant_version);
            entry.faces = p
                .faces
                .iter()
                .flatten()
                .map(|f| face_entry(&p, f, &labels))
                .collect();
            if entry.published {
                let stem = output_folder(path, &mut used);
                let dir = args.out.join(&stem);
                std::fs::create_dir_all(&dir)?;
                for r in &p.renditions {
                    let variant = match r.variant {
                        None => "public".to_string(),
                        Some(s) => labels.get(&s).cloned().unwrap_or_else(|| s.to_string()),
                    };
                    let unchanged = r.key == p.upload_key;
                    let ext = if unchanged {
                        path.extension().and_then(|e| e.to_str()).unwrap_or("jpg")
                    } else {
                        "jpg"
                    };
                    let name = if r.variant.is_none() {
                        "public".to_string()
                    } else {
                        format!("unblurred-{variant}")
                    };
                    let file_rel = format!("{stem}/{name}.{ext}");
                    let thumb_rel = format!("{stem}/{name}-thumb.jpg");
                    engine
                        .ports()
                        .objects
                        .get_to_file(&r.key, &args.out.join(&file_rel))
                        .await?;
                    engine
                        .ports()
                        .objects
                        .get_to_file(&r.thumb_key, &args.out.join(&thumb_rel))
                        .await?;
                    entry.files.push(ManifestFile {
                        variant,
                        file: file_rel,
                        thumbnail: thumb_rel,
                        unchanged_upload: unchanged,
                    });
                }
            }
        }
        if !entry.published && entry.error.is_none() {
            entry.error = Some("not published; see the jobs in OUT/.tessera-state".into());
        }
        photos.push(entry);
    }
    let published = photos.iter().filter(|p| p.published).count();
    let manifest = serde_json::json!({
        "input": args.input,
        "threshold": args.privacy.threshold,
        "policy": if args.privacy.threshold.is_some() { "threshold" } else { "fail_closed" },
        "detector": args.privacy.detector.as_str(),
        "blur_expand": args.blur_expand,
        "model_load_ms": models.load_ms,
        "onnxruntime": models.runtime_version,
        "subjects": labels.values().collect::<Vec<_>>(),
        "photos": photos,
        "published": published,
        "elapsed_s": started.elapsed().as_secs_f64(),
    });
    let manifest_path = args.out.join("manifest.json");
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(&manifest)?)
        .with_context(|| format!("cannot write {}", manifest_path.display()))?;
    emit(json, &manifest, || {
        let mut lines: Vec<String> = photos
            .iter()
            .map(|p| match &p.error {
                Some(e) if !p.published => format!("{}: NOT published: {e}", p.file),
                _ => format!(
                    "{}: {} face(s), {} blurred in the public file, {} file(s)",
                    p.file,
                    p.faces.len(),
                    p.faces.iter().filter(|f| f.blurred_in_public).count(),
                    p.files.len()
                ),
            })
            .collect();
        if args.privacy.threshold.is_none() {
            lines.push("no --threshold: failed closed, every face is blurred in every file".into());
        }
        lines.push(format!(
            "{published}/{} published; manifest: {}",
            photos.len(),
            manifest_path.display()
        ));
        lines.join("\n")
    });
    Ok(if published == photos.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[derive(clap::Args, Debug)]
pub struct PhotosBench {
    /// Folder of photos.
    pub dir: PathBuf,
    #[command(flatten)]
    pub privacy: Privacy,
    /// Timed passes over the folder (after one warm-up pass).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
}

/// Keep this thread (and ONNX Runtime's single intra-op thread, which is this one) on
/// one core, so the figures are per core.
fn pin_to_one_core() -> bool {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; pid 0 is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

struct Timed {
    total_ms: f64,
    detect_ms: f64,
    faces: usize,
    files: usize,
}

/// Everything face_process does to one photo's bytes, without storage.
fn process_once(
    models: &FaceModels,
    name: &str,
    bytes: &[u8],
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) -> anyhow::Result<Timed> {
    let t0 = Instant::now();
    let img = photo_upload::decode(name, bytes)
        .map_err(anyhow::Error::msg)?
        .rgb;
    let t1 = Instant::now();
    let mut faces = tessera_jobs::photos::process::faces_in(models, &img)?;
    for f in &mut faces {
        f.redecide(subjects, policy);
    }
    let t2 = Instant::now();
    let plans = render::plan(&faces, &[], tessera_faces::blur::DEFAULT_EXPAND);
    let mut files = 0;
    for p in &plans {
        render::render(&img, &p.blur, &render::FileMeta::default()).map_err(anyhow::Error::msg)?;
        files += 1;
    }
    Ok(Timed {
        total_ms: t0.elapsed().as_secs_f64() * 1e3,
        detect_ms: (t2 - t1).as_secs_f64() * 1e3,
        faces: faces.len(),
        files,
    })
}

/// The least any publisher does with a photo: decode it, encode it and a thumbnail.
fn baseline_once(name: &str, bytes: &[u8]) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let img = photo_upload::decode(name, bytes)
        .map_err(anyhow::Error::msg)?
        .rgb;
    render::jpeg(&img).map_err(anyhow::Error::msg)?;
    render::jpeg(&render::thumbnail(&img)).map_err(anyhow::Error::msg)?;
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

pub async fn bench(json: bool, b: PhotosBench) -> anyhow::Result<ExitCode> {
    let images = crate::photos::list_images(&b.dir)?;
    let refs = b
        .privacy
        .opted_out
        .as_deref()
        .map(reference_sets)
        .transpose()?
        .unwrap_or_default();
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<serde_json::Value> {
        let pinned = pin_to_one_core();
        let load = Instant::now();
        let models = FaceService::load_from_env(b.privacy.detector, 1)?;
        let first_load_ms = load.elapsed().as_secs_f64() * 1e3;
        let mut subjects = Vec::new();
        for (_, paths) in &refs {
            let mut embeddings = Vec::new();
            for p in paths {
                embeddings.push(project::reference_embedding(
                    &models,
                    &p.display().to_string(),
                    &std::fs::read(p)?,
                )?);
            }
            subjects.push(SubjectEmbeddings {
                subject: SubjectId::new(),
                embeddings,
            });
        }
        let policy = MatchPolicy::from_threshold(b.privacy.threshold);
        let mut inputs = Vec::new();
        for p in &images {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("photo")
                .to_string();
            let bytes = std::fs::read(p)?;
            // Photos the pipeline would refuse are left out of the timing.
            if photo_upload::decode(&name, &bytes).is_ok() {
                inputs.push((name, bytes));
            }
        }
        if inputs.is_empty() {
            bail!(
                "no photo in {} decodes; nothing to measure",
                b.dir.display()
            );
        }
        for (name, bytes) in &inputs {
            process_once(&models, name, bytes, &subjects, policy)?;
        }
        let (mut totals, mut detects, mut bases) = (Vec::new(), Vec::new(), Vec::new());
        let (mut faces, mut files) = (0, 0);
        let wall = Instant::now();
        for _ in 0..b.rounds {
            for (name, bytes) in &inputs {
                let t = process_once(&models, name, bytes, &subjects, policy)?;
                totals.push(t.total_ms);
                detects.push(t.detect_ms);
                faces += t.faces;
                files += t.files;
            }
        }
        let wall_s = wall.elapsed().as_secs_f64();
        for _ in 0..b.rounds {
            for (name, bytes) in &inputs {
                bases.push(baseline_once(name, bytes)?);
            }
        }
        for v in [&mut totals, &mut detects, &mut bases] {
            v.sort_by(f64::total_cmp);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        Ok(serde_json::json!({
            "photos": inputs.len(),
            "rounds": b.rounds,
            "pinned_to_one_core": pinned,
            "detector": b.privacy.detector.as_str(),
            "policy": if b.privacy.threshold.is_some() { "threshold" } else { "fail_closed" },
            "onnxruntime": models.runtime_version,
            "model_load_ms": models.load_ms,
            "first_load_ms_with_runtime": first_load_ms,
            "photos_per_sec": totals.len() as f64 / wall_s,
            "p50_ms": percentile(&totals, 0.5),
            "p95_ms": percentile(&totals, 0.95),
            "mean_ms": mean(&totals),
            "detect_embed_p50_ms": percentile(&detects, 0.5),
            "baseline_decode_encode_p50_ms": percentile(&bases, 0.5),
            "ratio_p50_vs_baseline": percentile(&totals, 0.5) / percentile(&bases, 0.5),
            "faces_per_round": faces / b.rounds as usize,
            "files_per_round": files / b.rounds as usize,
        }))
    })
    .await??;
    emit(json, &result, || {
        format!(
            "{} photos × {} rounds on one core ({}): {:.2} photos/s, p50 {:.1} ms, p95 {:.1} ms; model load {:.0} ms; {:.2}× the bare decode+encode baseline (p50 {:.1} ms)",
            result["photos"],
            result["rounds"],
            result["detector"].as_str().unwrap_or(""),
            result["photos_per_sec"].as_f64().unwrap_or(0.0),
            result["p50_ms"].as_f64().unwrap_or(0.0),
            result["p95_ms"].as_f64().unwrap_or(0.0),
            result["model_load_ms"].as_f64().unwrap_or(0.0),
            result["ratio_p50_vs_baseline"].as_f64().unwrap_or(0.0),
            result["baseline_decode_encode_p50_ms"]
                .as_f64()
                .unwrap_or(0.0)
        )
    });
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::output_folder;
    use std::collections::HashSet;
    use std::path::Path;

    #[test]
    fn output_folders_never_collide_with_each_other_or_the_run_s_own_files() {
        let mut used = HashSet::new();
        let names: Vec<String> = [
            "a.jpg",
            "a.png",
            "a-2.jpg",
            "A.JPG",
            "manifest.json.jpg",
            "x/a.jpg",
        ]
        .iter()
        .map(|n| output_folder(Path::new(n), &mut used))
        .collect();
        assert_eq!(
            names,
            [
                "a.jpg",
                "a.png",
                "a-2.jpg",
                "A.JPG-2",
                "manifest.json.jpg",
                "a.jpg-3"
            ]
        );
        let mut used = HashSet::new();
        assert_eq!(
            output_folder(Path::new("manifest.json"), &mut used),
            "manifest.json-2"
        );
        assert_eq!(
            output_folder(Path::new(".tessera-state"), &mut used),
            ".tessera-state-2"
        );
    }
}
