//! `tessera jobs list|show|cancel|resume`.

use crate::embedded;
use crate::output::emit;
use std::path::Path;
use std::process::ExitCode;
use tessera_core::TenantId;
use tessera_core::job::{CancelMode, Job};

#[derive(clap::Subcommand, Debug)]
pub enum JobsCommand {
    /// List jobs, oldest first.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        /// Continue after this cursor (printed at the end of the previous page).
        #[arg(long)]
        after: Option<String>,
    },
    /// Show one job and its tasks.
    Show {
        /// Job id.
        job: String,
    },
    /// Cancel a job: queued tasks now, running ones at their next checkpoint.
    Cancel {
        /// Job id.
        job: String,
        /// Revoke running tasks' leases now and kill their subprocesses.
        #[arg(long)]
        force: bool,
    },
    /// Put a job's failed, dead and cancelled tasks back in line.
    Resume {
        /// Job id.
        job: String,
    },
}

fn summary(j: &Job) -> serde_json::Value {
    serde_json::json!({
        "id": j.id, "kind": j.kind, "label": j.label, "status": j.status(),
        "tasks_total": j.tasks_total, "succeeded": j.counters.succeeded, "failed": j.counters.failed,
        "dead": j.counters.dead, "cancelled": j.counters.cancelled,
        "created_at": j.created_at.to_rfc3339(), "fingerprint": j.fingerprint,
    })
}

pub async fn run(state: &Path, json: bool, cmd: JobsCommand) -> anyhow::Result<ExitCode> {
    let (_dir, engine) = embedded::engine(state, None).await?;
    match cmd {
        JobsCommand::List { limit, after } => {
            let (jobs, next) = engine
                .list_jobs(&TenantId::local(), after, limit as usize)
                .await?;
            let value = serde_json::json!({ "jobs": jobs.iter().map(summary).collect::<Vec<_>>(), "next": next });
            emit(json, &value, || {
                let mut s = format!(
                    "{:<26}  {:<10}  {:<9}  {:>11}  label",
                    "job", "kind", "status", "done/total"
                );
                for j in &jobs {
                    s += &format!(
                        "\n{:<26}  {:<10}  {:<9}  {:>5}/{:<5}  {}",
                        j.id,
                        j.kind,
                        j.status().to_string(),
                        j.finished(),
                        j.tasks_total,
                        j.label
                    );
                }
                if jobs.is_empty() {
                    s += "\n(no jobs yet: `tessera demo` runs one)";
                }
                if let Some(n) = &next {
                    s += &format!("\nmore: tessera jobs list --after {n}");
                }
                s
            });
        }
        JobsCommand::Show { job } => {
            let id = super::parse_job(&job)?;
            let j = engine.job(id).await?;
            let tasks = engine.job_tasks(id).await?;
            let mut value = summary(&j);
            value["tasks"] = serde_json::to_value(&tasks)?;
            emit(json, &value, || {
                let mut s = format!(
                    "job {}  {}  {}  ({} of {} tasks finished)\nfingerprint {}",
                    j.id,
                    j.kind,
                    j.status(),
                    j.finished(),
                    j.tasks_total,
                    j.fingerprint
                );
                for t in &tasks {
                    let err = t.last_error.as_ref().map_or(String::new(), |e| {
                        format!("  last error ({}): {}", e.class, e.message)
                    });
                    s += &format!(
                        "\n  {:<24} {:<16} {:<9} attempt {}/{} epoch {}{err}",
                        t.name,
                        t.kind,
                        t.state.to_string(),
                        t.attempts,
                        t.max_attempts,
                        t.epoch
                    );
                }
                s
            });
        }
        JobsCommand::Cancel { job, force } => {
            let id = super::parse_job(&job)?;
            let mode = if force {
                CancelMode::Force
            } else {
                CancelMode::Cooperative
            };
            let r = engine.cancel(id, mode).await?;
            emit(json, &r, || {
                format!(
                    "job {id}: {} tasks cancelled, {} running tasks stop at their next checkpoint",
                    r.cancelled, r.stopping
                )
            });
        }
        JobsCommand::Resume { job } => {
            let id = super::parse_job(&job)?;
            let r = engine.resume(id).await?;
            emit(json, &r, || {
                format!(
                    "job {id}: {} tasks requeued; run `tessera worker` to process them",
                    r.requeued
                )
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}
