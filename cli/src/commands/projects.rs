//! `tessera projects`: a project's privacy settings in embedded mode.

use super::subjects::report_change;
use crate::embedded;
use crate::output::emit;
use std::path::Path;
use std::process::ExitCode;
use tessera_core::TenantId;
use tessera_core::audit::Actor;
use tessera_jobs::photos::project;

#[derive(clap::Subcommand, Debug)]
pub enum ProjectsCommand {
    /// Create a project.
    Create {
        /// Unique name.
        name: String,
        /// Cosine similarity at or above which a face is an opted-out subject. Without
        /// it the project fails closed: every face is blurred in every file.
        #[arg(long)]
        threshold: Option<f32>,
        /// How much face boxes grow before blurring (0.30..0.40).
        #[arg(long, default_value_t = tessera_faces::blur::DEFAULT_EXPAND)]
        blur_expand: f32,
    },
    /// Show a project, its subjects and photos, and how many photos are not yet
    /// re-decided at its current subjects.
    Show {
        /// Project name.
        name: String,
    },
    /// Re-decide every photo of a project (photos made under older rules, such as rows
    /// from before EXIF orientation was applied, are migrated and re-published).
    Reblur {
        /// Project name.
        name: String,
        /// Only commit the re-blur job; `tessera worker` runs it.
        #[arg(long)]
        submit_only: bool,
    },
    /// Erase a project and everything in it: photos with every file made from them,
    /// datasets with their images, opted-out subjects with their reference photos.
    Erase {
        /// Project name.
        name: String,
    },
}

pub async fn projects(state: &Path, json: bool, cmd: ProjectsCommand) -> anyhow::Result<ExitCode> {
    let (_dir, engine) = embedded::engine(state, None).await?;
    let store = engine.ports().store.clone();
    match cmd {
        ProjectsCommand::Create {
            name,
            threshold,
            blur_expand,
        } => {
            let p = project::create(
                store.as_ref(),
                TenantId::local(),
                &name,
                threshold,
                blur_expand,
            )
            .await?;
            emit(json, &p, || match threshold {
                Some(t) => format!("project `{name}` ({}) created; match threshold {t}", p.id),
                None => format!(
                    "project `{name}` ({}) created with no match threshold: it fails closed (every face is blurred everywhere)",
                    p.id
                ),
            });
        }
        ProjectsCommand::Show { name } => {
            let p = project::by_name(store.as_ref(), &TenantId::local(), &name).await?;
            let subjects = project::subjects(store.as_ref(), p.id).await?;
            let status = project::privacy_status(store.as_ref(), p.id).await?;
            let value = serde_json::json!({
                "project": p,
                "subjects": subjects.iter().map(|s| serde_json::json!({"id": s.id, "label": s.label, "references": s.references})).collect::<Vec<_>>(),
                "photos": status.photos,
                "published": status.published,
                "subjects_rev": status.subjects_rev,
                "photos_not_current": status.not_current,
                "sweep_stalled": status.sweep_stalled,
            });
            emit(json, &value, || {
                let stalled = status
                    .sweep_stalled
                    .as_ref()
                    .map(|s| format!("\nphotos not yet re-decided are {}", s.explain()))
                    .unwrap_or_default();
                format!(
                    "project `{}` ({})\nthreshold: {}\nopted-out subjects: {}\nphotos: {} ({} published, {} not yet re-decided at subjects rev {}){}",
                    p.name,
                    p.id,
                    p.match_threshold
                        .map_or("none (fails closed)".to_string(), |t| t.to_string()),
                    subjects
                        .iter()
                        .map(|s| format!("{} ({})", s.label, s.id))
                        .collect::<Vec<_>>()
                        .join(", "),
                    status.photos,
                    status.published,
                    status.not_current,
                    status.subjects_rev,
                    stalled,
                )
            });
        }
        ProjectsCommand::Erase { name } => {
            let p = project::by_name(store.as_ref(), &TenantId::local(), &name).await?;
            let done = tessera_jobs::photos::erase::erase_project(
                store.as_ref(),
                engine.ports().objects.as_ref(),
                p.id,
                &Actor::cli(p.tenant.clone()),
            )
            .await?;
            emit(json, &done, || {
                format!(
                    "project `{name}` erased: {} photo(s), {} dataset(s), {} subject(s), {} object(s)",
                    done.photos, done.datasets, done.subjects, done.objects
                )
            });
        }
        ProjectsCommand::Reblur { name, submit_only } => {
            drop(engine);
            let (_dir, engine) = embedded::engine(state, None).await?;
            let p =
                project::by_name(engine.ports().store.as_ref(), &TenantId::local(), &name).await?;
            let change = project::reblur_all(&engine, p.id).await?;
            report_change(
                &engine,
                json,
                change,
                submit_only,
                format!("project `{name}`"),
            )
            .await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
