//! `tessera clusters`: the people a project's photos show, as an admin reviews them, and
//! opting one out. The same use cases as `GET …/clusters` and `POST …/clusters/{id}/opt-out`
//! ([`tessera_jobs::photos::clusters`]); the CLI acts as the local tenant's admin.

use super::subjects::report_change;
use crate::embedded;
use crate::output::emit;
use std::path::Path;
use std::process::ExitCode;
use tessera_core::audit::Actor;
use tessera_core::{ClusterId, TenantId};
use tessera_jobs::photos::{clusters, project};

#[derive(clap::Subcommand, Debug)]
pub enum ClustersCommand {
    /// List a project's people (the same person across its photos), in most photos first.
    List {
        /// Project name.
        #[arg(long)]
        project: String,
        /// How many to list.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Skip the first N (the `next` of an earlier page).
        #[arg(long, default_value_t = 0)]
        skip: usize,
    },
    /// Opt a cluster's person out: enrol them from its clear views, and decide every
    /// photo of the project again.
    OptOut {
        /// Project name.
        #[arg(long)]
        project: String,
        /// The cluster id (from `tessera clusters list`).
        cluster: String,
        /// A label for the new subject (who asked, in the organiser's words).
        #[arg(long)]
        label: String,
        /// Only commit the re-decision; `tessera worker` runs it.
        #[arg(long)]
        submit_only: bool,
    },
}

pub async fn run(state: &Path, json: bool, cmd: ClustersCommand) -> anyhow::Result<ExitCode> {
    let (_dir, engine) = embedded::engine(state, None).await?;
    let store = engine.ports().store.clone();
    match cmd {
        ClustersCommand::List {
            project: name,
            limit,
            skip,
        } => {
            let p = project::by_name(store.as_ref(), &TenantId::local(), &name).await?;
            let (people, next) = clusters::list(store.as_ref(), &p, skip, limit).await?;
            let value = serde_json::json!({ "clusters": people, "next": next });
            emit(json, &value, || {
                let mut lines: Vec<String> = people
                    .iter()
                    .map(|c| {
                        let who = c
                            .subjects
                            .iter()
                            .map(|(_, label, sim)| format!("{label} ({sim:.3})"))
                            .collect::<Vec<_>>()
                            .join(", ");
                        format!(
                            "{}  in {} photo(s), {} face(s), {} clear view(s): {}{}",
                            c.cluster_id,
                            c.photos,
                            c.faces,
                            c.clear_views,
                            c.standing,
                            if who.is_empty() {
                                String::new()
                            } else {
                                format!(" as {who}")
                            }
                        )
                    })
                    .collect();
                if people.is_empty() {
                    lines.push(format!("no people in project `{name}` yet"));
                }
                if let Some(n) = next {
                    lines.push(format!("more: --skip {n}"));
                }
                lines.join("\n")
            });
            Ok(ExitCode::SUCCESS)
        }
        ClustersCommand::OptOut {
            project: name,
            cluster,
            label,
            submit_only,
        } => {
            let p = project::by_name(store.as_ref(), &TenantId::local(), &name).await?;
            let id: ClusterId = cluster.parse().map_err(|_| {
                anyhow::anyhow!(
                    "`{cluster}` is not a cluster id; `tessera clusters list --project {name}` lists them"
                )
            })?;
            if clusters::load(store.as_ref(), id)
                .await?
                .is_none_or(|(c, _)| c.project != p.id)
            {
                anyhow::bail!(
                    "cluster {id} is not in project `{name}`; `tessera clusters list --project {name}` lists them"
                );
            }
            let (subject, change) =
                clusters::opt_out(&engine, p.id, id, &label, &Actor::cli(p.tenant.clone())).await?;
            report_change(
                &engine,
                json,
                change,
                submit_only,
                format!(
                    "cluster {id} opted out as `{}` (subject {})",
                    subject.label, subject.id
                ),
            )
            .await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
