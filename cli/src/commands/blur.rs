//! `tessera blur INPUT_DIR --out OUT`: a one-shot privacy run in embedded mode.

use super::photos::{check_files, drive, photo_error, upload};
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
use tessera_core::privacy::FaceDecision;
use tessera_core::{SubjectId, TenantId, records};
use tessera_faces::DetectorKind;
use tessera_jobs::photos::{FaceService, project};

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
pub(super) fn reference_sets(dir: &Path) -> anyhow::Result<Vec<(String, Vec<PathBuf>)>> {
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
    check_files(&images)?;
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
