//! `tessera photos` in embedded mode, and the driver that runs photo jobs (and the
//! follow-ups ingest starts) to the end; `projects` and `subjects` are beside it.

use crate::embedded;
use crate::output::emit;
use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tessera_core::audit::Actor;
use tessera_core::domain::Project;
use tessera_core::geometry::FracRect;
use tessera_core::job::Job;
use tessera_core::photo::Photo;
use tessera_core::{JobId, PhotoId, TenantId, records};
use tessera_engine::{Engine, Worker};
use tessera_jobs::photos::{self, intake, kinds, project};
use tokio_util::sync::CancellationToken;

#[derive(clap::Subcommand, Debug)]
pub enum PhotosCommand {
    /// Upload photos (files or folders) into a project and process them.
    Add {
        /// Project name.
        #[arg(long)]
        project: String,
        /// Photo files or folders of photos.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Only submit the ingest jobs; `tessera worker` runs them.
        #[arg(long)]
        submit_only: bool,
    },
    /// List a project's photos, newest first, with the uploads refused before they got
    /// a row (`failed`). Read a page at a time and printed as it is read.
    List {
        /// Project name.
        #[arg(long)]
        project: String,
        /// Photos read from the store at a time.
        #[arg(long, default_value_t = LIST_PAGE, value_parser = clap::value_parser!(u32).range(1..=1000))]
        page_size: u32,
    },
    /// Show one photo: faces, decisions, files, publication.
    Show {
        /// Photo id.
        photo: String,
    },
    /// Erase a photo: its upload and every file made from it.
    Erase {
        /// Photo id.
        photo: String,
    },
    /// Re-blur a photo from its stored faces, optionally with new manual blur regions.
    Reprocess {
        /// Photo id.
        photo: String,
        /// A manual blur region `x,y,w,h` in fractions of the image (repeatable);
        /// replaces the photo's regions.
        #[arg(long = "region", value_parser = parse_region)]
        regions: Vec<FracRect>,
        /// Remove every manual region.
        #[arg(long, conflicts_with = "regions")]
        clear_regions: bool,
        /// Only submit the job; `tessera worker` runs it.
        #[arg(long)]
        submit_only: bool,
    },
}

fn parse_region(s: &str) -> Result<FracRect, String> {
    let v: Vec<f32> = s
        .split(',')
        .map(|p| p.trim().parse::<f32>())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            format!("region `{s}` must be four numbers x,y,w,h (fractions of the image)")
        })?;
    let [x, y, w, h] = v[..] else {
        return Err(format!("region `{s}` must be four numbers x,y,w,h"));
    };
    let r = FracRect { x, y, w, h };
    match r.problem() {
        Some(p) => Err(format!("region `{s}` {p}")),
        None => Ok(r),
    }
}

fn parse_photo(s: &str) -> anyhow::Result<PhotoId> {
    s.parse().map_err(|_| {
        anyhow::anyhow!("`{s}` is not a photo id; `tessera photos list --project NAME` shows them")
    })
}

/// The name a file is added under, and why it cannot be a photo if it cannot: too large
/// (checked before it is read) or a name no key can hold.
fn admissible(path: &Path) -> anyhow::Result<String> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    if size > intake::MAX_BYTES {
        return Err(intake::IntakeError::TooLarge {
            what: path.display().to_string(),
            size,
        }
        .into());
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "photo".into());
    intake::check_name(&name).with_context(|| format!("cannot add {}", path.display()))?;
    Ok(name)
}

/// Check every file before the first is added: a refusal halfway would leave the files
/// before it stored, counted against the quota and never processed.
pub fn check_files(paths: &[PathBuf]) -> anyhow::Result<()> {
    paths.iter().try_for_each(|p| admissible(p).map(|_| ()))
}

/// Add one file to `project` as a new photo (the intake every way in uses) and submit
/// its ingest job. A file larger than any photo may be is refused before it is read.
pub async fn upload(
    engine: &Engine,
    project: &Project,
    path: &Path,
) -> anyhow::Result<(PhotoId, JobId)> {
    let name = admissible(path)?;
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let added = intake::add(engine, project, &name, bytes.into())
        .await
        .with_context(|| format!("cannot add {}", path.display()))?;
    Ok((added.photo, added.job))
}

/// Run photo jobs with in-process workers until they, and the follow-up jobs their
/// ingest tasks start, have ended. Returns every job that ran, in the order they ended.
pub async fn drive(engine: &Engine, jobs: Vec<JobId>, ui: bool) -> anyhow::Result<Vec<Job>> {
    let stop = CancellationToken::new();
    let worker = Worker::new(engine.clone(), 1, Some(Duration::from_secs(5)));
    let s = stop.clone();
    let worker_task = tokio::spawn(async move { worker.run(s).await });
    let bar = if ui {
        ProgressBar::new(0)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] photo jobs {pos}/{len} {msg}")
            .expect("template"),
    );
    let mut pending: BTreeSet<JobId> = jobs.into_iter().collect();
    let mut seen = pending.clone();
    let mut done = Vec::new();
    let interrupted = super::interrupted();
    tokio::pin!(interrupted);
    while !pending.is_empty() {
        bar.set_length(seen.len() as u64);
        for id in pending.clone() {
            let job = engine.job(id).await?;
            if !job.is_over() {
                continue;
            }
            pending.remove(&id);
            bar.inc(1);
            if job.kind == kinds::REBLUR_JOB {
                for f in reprocess_jobs_of(engine, &job).await? {
                    if seen.insert(f) {
                        pending.insert(f);
                    }
                }
            }
            // An ingest names its follow-up job; a sweep part names the next part.
            if job.kind == kinds::INGEST_JOB || job.kind == kinds::REBLUR_JOB {
                for t in engine.job_tasks(id).await? {
                    if let Some(f) = t
                        .result
                        .as_ref()
                        .and_then(|r| r["follow_up"].as_str())
                        .and_then(|f| f.parse::<JobId>().ok())
                        && seen.insert(f)
                    {
                        pending.insert(f);
                    }
                }
            }
            done.push(job);
        }
        tokio::select! {
            _ = &mut interrupted => {
                stop.cancel();
                let _ = worker_task.await;
                bar.finish_and_clear();
                bail!("interrupted; the jobs continue when `tessera worker` runs on this state directory");
            }
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    stop.cancel();
    let _ = worker_task.await;
    bar.finish_and_clear();
    Ok(done)
}

/// The reprocess jobs a finished re-blur sweep submitted: those of its project at its
/// subject revision.
async fn reprocess_jobs_of(engine: &Engine, sweep: &Job) -> anyhow::Result<Vec<JobId>> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let (jobs, next) = engine.list_jobs(&sweep.tenant, after, 500).await?;
        out.extend(
            jobs.into_iter()
                .filter(|j| {
                    j.kind == kinds::REPROCESS_JOB
                        && j.project == sweep.project
                        && j.spec["subjects_rev"] == sweep.spec["subjects_rev"]
                })
                .map(|j| j.id),
        );
        match next {
            Some(n) => after = Some(n),
            None => return Ok(out),
        }
    }
}

/// The first failure message of a job's tasks.
pub async fn job_error(engine: &Engine, job: &Job) -> anyhow::Result<Option<String>> {
    Ok(engine.job_tasks(job.id).await?.into_iter().find_map(|t| {
        t.last_error
            .filter(|_| {
                t.state.is_terminal() && t.state != tessera_core::task::TaskState::Succeeded
            })
            .map(|e| e.message)
    }))
}

/// Why a photo's jobs failed, if they did: its ingest job, or a follow-up naming it.
pub async fn photo_error(
    engine: &Engine,
    jobs: &[Job],
    ingest: JobId,
    photo: PhotoId,
) -> anyhow::Result<Option<String>> {
    let photo = photo.to_string();
    let mut error = None;
    for j in jobs
        .iter()
        .filter(|j| j.id == ingest || j.spec["photo"].as_str() == Some(photo.as_str()))
    {
        if let Some(e) = job_error(engine, j).await? {
            error = Some(e);
        }
    }
    Ok(error)
}

async fn load_photo(engine: &Engine, id: PhotoId) -> anyhow::Result<Photo> {
    let item = engine
        .ports()
        .store
        .get(&records::photo_key(id))
        .await?
        .with_context(|| {
            format!(
                "photo {id} does not exist (or its upload was refused; see `tessera jobs list`)"
            )
        })?;
    Ok(records::decode(&item)?)
}

pub(crate) fn files_of(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            out.extend(crate::photos::list_images(p)?);
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            bail!(
                "{} does not exist; give photo files or folders",
                p.display()
            );
        }
    }
    Ok(out)
}

/// A photo as the CLI shows it, with its state in `project` as the project is now (the
/// API's `status`, from the same rule).
fn photo_view(p: &Photo, project: &Project) -> serde_json::Value {
    let mut v = serde_json::json!({
        "id": p.id, "file_name": p.file_name, "width": p.width, "height": p.height,
        "pipeline": p.pipeline, "variant_version": p.variant_version,
        "orientation": p.orientation, "subjects_rev": p.subjects_rev, "rules": p.rules,
        "published_at": p.published_at,
        "faces": p.faces.as_ref().map(|f| f.iter().map(|f| serde_json::json!({
            "bbox": f.bbox, "score": f.score, "decision": f.decision,
            "rule": f.rule.map(|r| r.report(f.evidence)),
            // The operator of the state folder sees what an admin key sees in the API.
            "cluster_id": f.cluster,
            "ruling": f.ruling.as_ref().map(|r| serde_json::json!({ "ruling": r, "why": r.explain() })),
        })).collect::<Vec<_>>()),
        "blur_regions": p.blur_regions,
        "renditions": p.renditions,
        "embeddings_key": p.embeddings_key,
    });
    if let Ok(serde_json::Value::Object(state)) =
        serde_json::to_value(tessera_jobs::photos::status::current(p, project))
    {
        v.as_object_mut().expect("an object").extend(state);
    }
    v
}

/// Photos `tessera photos list` reads at a time.
const LIST_PAGE: u32 = 200;

/// Print `project`'s photos a page at a time (a JSON array with `--json`), so a project
/// of any size costs one page of memory. Refused uploads are listed as the API lists
/// them: `failed`, with the reason.
async fn list(
    store: &dyn tessera_core::ports::StateStore,
    project: &Project,
    page_size: usize,
    json: bool,
) -> anyhow::Result<()> {
    use std::io::Write;
    use tessera_jobs::photos::status::{Listed, project_photos_page};
    let mut out = std::io::stdout().lock();
    let mut after = None;
    let mut first = true;
    if json {
        write!(out, "[")?;
    }
    loop {
        let (page, next) = project_photos_page(store, project, after, page_size).await?;
        for listed in &page {
            if json {
                let v = match listed {
                    Listed::Row(p, _) => photo_view(p, project),
                    Listed::Refused(r) => serde_json::json!({
                        "id": r.photo_id, "file_name": r.name, "status": "failed",
                        "error": r.reason, "published_at": null, "faces": null,
                    }),
                };
                write!(out, "{}{v}", if first { "" } else { "," })?;
            } else {
                match listed {
                    Listed::Row(p, _) => writeln!(
                        out,
                        "{}  {}  v{}  {}",
                        p.id,
                        p.file_name,
                        p.variant_version,
                        status_name(p, project)
                    )?,
                    Listed::Refused(r) => {
                        writeln!(out, "{}  {}  -  failed: {}", r.photo_id, r.name, r.reason)?
                    }
                }
            }
            first = false;
        }
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    if json {
        writeln!(out, "]")?;
    }
    Ok(())
}

/// The name of a photo's state (`published`, `processing`, …).
fn status_name(p: &Photo, project: &Project) -> String {
    serde_json::to_value(tessera_jobs::photos::status::current(p, project))
        .ok()
        .and_then(|v| v["status"].as_str().map(str::to_string))
        .unwrap_or_default()
}

pub async fn photos_cmd(state: &Path, json: bool, cmd: PhotosCommand) -> anyhow::Result<ExitCode> {
    let (_dir, engine) = embedded::engine(state, None).await?;
    let store = engine.ports().store.clone();
    match cmd {
        PhotosCommand::Add {
            project: name,
            paths,
            submit_only,
        } => {
            let p = project::by_name(store.as_ref(), &TenantId::local(), &name).await?;
            let mut submitted = Vec::new();
            let files = files_of(&paths)?;
            check_files(&files)?;
            for path in files {
                let (photo, job) = upload(&engine, &p, &path).await?;
                submitted.push((path, photo, job));
            }
            if submit_only {
                let v: Vec<_> = submitted
                    .iter()
                    .map(|(f, p, j)| serde_json::json!({"file": f, "photo": p, "ingest_job": j}))
                    .collect();
                emit(json, &v, || {
                    submitted
                        .iter()
                        .map(|(f, p, j)| format!("{} → photo {p} (job {j})", f.display()))
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                return Ok(ExitCode::SUCCESS);
            }
            let jobs = drive(&engine, submitted.iter().map(|s| s.2).collect(), !json).await?;
            let mut rows = Vec::new();
            let mut failed = 0;
            // Published means servable at the project's subjects as they are now: an
            // opt-out committed while these were decided leaves them unpublished.
            let rev = project::load(store.as_ref(), p.id).await?.subjects_rev;
            for (file, photo, job) in &submitted {
                let row = match load_photo(&engine, *photo).await {
                    Ok(r) if r.servable(rev) => {
                        serde_json::json!({"file": file, "photo": photo, "published": true})
                    }
                    _ => {
                        failed += 1;
                        let err = photo_error(&engine, &jobs, *job, *photo).await?;
                        serde_json::json!({"file": file, "photo": photo, "published": false, "error": err})
                    }
                };
                rows.push(row);
            }
            emit(json, &rows, || {
                rows.iter()
                    .map(|r| match r["error"].as_str() {
                        Some(e) => {
                            format!("{}: not published: {e}", r["file"].as_str().unwrap_or(""))
                        }
                        None => format!(
                            "{}: photo {} published",
                            r["file"].as_str().unwrap_or(""),
                            r["photo"].as_str().unwrap_or("")
                        ),
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            Ok(if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        PhotosCommand::List {
            project: name,
            page_size,
        } => {
            let p = project::by_name(store.as_ref(), &TenantId::local(), &name).await?;
            list(store.as_ref(), &p, page_size as usize, json).await?;
            Ok(ExitCode::SUCCESS)
        }
        PhotosCommand::Erase { photo } => {
            let p = load_photo(&engine, parse_photo(&photo)?).await?;
            let tenant = project::load(store.as_ref(), p.project).await?.tenant;
            let swept =
                tessera_jobs::photos::erase::erase_photo(&engine, &p, &Actor::cli(tenant)).await?;
            emit(
                json,
                &serde_json::json!({ "photo": p.id, "objects": swept.objects }),
                || format!("photo {} erased ({} object(s))", p.id, swept.objects),
            );
            Ok(ExitCode::SUCCESS)
        }
        PhotosCommand::Show { photo } => {
            let p = load_photo(&engine, parse_photo(&photo)?).await?;
            let proj = project::load(store.as_ref(), p.project).await?;
            let v = photo_view(&p, &proj);
            emit(json, &v, || {
                serde_json::to_string_pretty(&v).expect("serializable")
            });
            Ok(ExitCode::SUCCESS)
        }
        PhotosCommand::Reprocess {
            photo,
            regions,
            clear_regions,
            submit_only,
        } => {
            let id = parse_photo(&photo)?;
            let mut p = load_photo(&engine, id).await?;
            if clear_regions || !regions.is_empty() {
                p.edits_rev = tessera_jobs::photos::regions::set_regions(
                    &engine,
                    id,
                    &regions,
                    &Actor::cli(project::load(store.as_ref(), p.project).await?.tenant),
                )
                .await?;
            }
            let proj = project::load(store.as_ref(), p.project).await?;
            let job = engine
                .submit(photos::reprocess_plan(
                    proj.tenant.clone(),
                    proj.id,
                    id,
                    proj.subjects_rev,
                    p.edits_rev,
                ))
                .await?
                .job_id;
            if submit_only {
                emit(json, &serde_json::json!({"job": job}), || {
                    format!("reprocess job {job} submitted")
                });
                return Ok(ExitCode::SUCCESS);
            }
            let jobs = drive(&engine, vec![job], !json).await?;
            let p = load_photo(&engine, id).await?;
            let proj = project::load(store.as_ref(), p.project).await?;
            let mut v = photo_view(&p, &proj);
            if let Some(j) = jobs.first()
                && let Some(e) = job_error(&engine, j).await?
            {
                v["error"] = e.clone().into();
                emit(json, &v, || format!("reprocess failed: {e}"));
                return Ok(ExitCode::FAILURE);
            }
            emit(json, &v, || {
                format!(
                    "photo {id} re-blurred: version {}, {} file(s), {}",
                    p.variant_version,
                    p.renditions.len(),
                    status_name(&p, &proj)
                )
            });
            Ok(ExitCode::SUCCESS)
        }
    }
}
