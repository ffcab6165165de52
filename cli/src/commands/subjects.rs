//! `tessera subjects`: the people of a project who asked not to be published, in
//! embedded mode.

use super::photos::{drive, files_of};
use crate::embedded;
use crate::output::emit;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tessera_core::TenantId;
use tessera_core::audit::Actor;
use tessera_engine::Engine;
use tessera_jobs::photos::{self, kinds, project};

#[derive(clap::Subcommand, Debug)]
pub enum SubjectsCommand {
    /// Enrol a person who asked not to be published, from reference photos of them;
    /// every photo of the project is re-blurred.
    Add {
        /// Project name.
        #[arg(long)]
        project: String,
        /// Their name, as people know them.
        #[arg(long)]
        label: String,
        /// Reference photos (one face each; the largest face is used).
        #[arg(required = true)]
        references: Vec<PathBuf>,
        /// Only submit the re-blur jobs; `tessera worker` runs them.
        #[arg(long)]
        submit_only: bool,
    },
    /// Remove an opted-out person (they agreed to be shown, or were enrolled by
    /// mistake); every photo of the project is re-decided.
    Remove {
        /// Project name.
        #[arg(long)]
        project: String,
        /// Subject id (`tessera projects show` lists them).
        subject: String,
        /// Only submit the re-blur jobs; `tessera worker` runs them.
        #[arg(long)]
        submit_only: bool,
    },
}

pub async fn subjects(state: &Path, json: bool, cmd: SubjectsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SubjectsCommand::Add {
            project: name,
            label,
            references,
            submit_only,
        } => {
            let models = photos::FaceService::load_from_env(tessera_faces::DetectorKind::Yunet, 1)?;
            let (_dir, engine) = embedded::engine_with(
                state,
                None,
                Arc::new(photos::FaceService::with_models(models.clone())),
            )
            .await?;
            let p =
                project::by_name(engine.ports().store.as_ref(), &TenantId::local(), &name).await?;
            let mut refs = Vec::new();
            for path in files_of(&references)? {
                let bytes = std::fs::read(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                refs.push((path.display().to_string(), bytes));
            }
            let (s, change) = project::enrol(
                &engine,
                models,
                p.id,
                &label,
                refs,
                &Actor::cli(p.tenant.clone()),
            )
            .await?;
            for w in project::enrolment_warnings(&s) {
                eprintln!("warning: {w}");
            }
            report_change(
                &engine,
                json,
                change,
                submit_only,
                format!(
                    "subject `{label}` ({}) enrolled from {} photo(s)",
                    s.id,
                    s.references.len()
                ),
            )
            .await?;
        }
        SubjectsCommand::Remove {
            project: name,
            subject,
            submit_only,
        } => {
            let (_dir, engine) = embedded::engine(state, None).await?;
            let p =
                project::by_name(engine.ports().store.as_ref(), &TenantId::local(), &name).await?;
            let sid = subject.parse().map_err(|_| {
                anyhow::anyhow!(
                    "`{subject}` is not a subject id; `tessera projects show {name}` lists them"
                )
            })?;
            let change =
                project::remove_subject(&engine, p.id, sid, &Actor::cli(p.tenant.clone())).await?;
            report_change(
                &engine,
                json,
                change,
                submit_only,
                format!("subject {subject} removed"),
            )
            .await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Run (unless `submit_only`) the sweep a subject change committed, and say what it did.
pub(super) async fn report_change(
    engine: &Engine,
    json: bool,
    change: project::SubjectChange,
    submit_only: bool,
    what: String,
) -> anyhow::Result<()> {
    let reprocessed = if submit_only {
        None
    } else {
        let done = drive(engine, vec![change.reblur_job], !json).await?;
        Some(
            done.iter()
                .filter(|j| j.kind == kinds::REPROCESS_JOB)
                .count(),
        )
    };
    let value = serde_json::json!({
        "subjects_rev": change.subjects_rev, "reblur_job": change.reblur_job,
        "photos_reprocessed": reprocessed,
    });
    emit(json, &value, || match reprocessed {
        Some(n) => format!(
            "{what}; {n} photo(s) re-decided at subjects rev {}",
            change.subjects_rev
        ),
        None => format!(
            "{what}; re-blur job {} committed (subjects rev {}); `tessera worker` runs it",
            change.reblur_job, change.subjects_rev
        ),
    });
    Ok(())
}
