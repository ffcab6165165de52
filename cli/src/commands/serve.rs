//! `tessera serve`: the HTTP API on a local port in embedded mode, with workers in the
//! same process unless `--no-workers`.

use crate::embedded;
use anyhow::Context;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;
use tessera_api::AuthMode;
use tessera_api::server::ServerSetup;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// `none` (every caller is the local tenant) or `api_key` (Bearer keys).
    #[arg(long, default_value = "none")]
    pub auth: AuthMode,
    /// Do not run workers in this process (run `tessera worker` beside it).
    #[arg(long)]
    pub no_workers: bool,
    /// Tasks run at once by the in-process worker.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub concurrency: u32,
    /// Offer `local` dataset sources below this folder (repeatable); without it, a
    /// `local` source answers 501.
    #[arg(long = "local-root")]
    pub local_roots: Vec<std::path::PathBuf>,
    /// Let web pages at this origin (`https://host[:port]`, or `*`) call the API
    /// (repeatable); without it only the server's own pages may.
    #[arg(long = "cors-origin")]
    pub cors_origins: Vec<String>,
    /// A name this server is reached by (`photos.example.org`, with or without the
    /// port; repeatable). Needed when `--addr` is every interface (`0.0.0.0`, `[::]`):
    /// requests under any other name are refused, as a DNS name rebound to it would be.
    #[arg(long = "host-name")]
    pub host_names: Vec<String>,
    /// Allow `--auth none` on an address other machines can reach, or with
    /// `--cors-origin '*'`: anyone who can connect, or any web page, is then the local
    /// tenant with admin rights.
    #[arg(long)]
    pub insecure: bool,
}

pub async fn run(state: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let mut sources = tessera_api::sources::Sources::default();
    if !args.local_roots.is_empty() {
        // The state folder and its objects are made here rather than at open, so that
        // they exist to be withheld: the objects are every original, unblurred. Both are
        // withheld, as each resolves: an objects folder linked elsewhere is withheld
        // where it is.
        let objects = state.join("objects");
        std::fs::create_dir_all(&objects)
            .with_context(|| format!("making the state folder {}", state.display()))?;
        let folders =
            tessera_api::sources::LocalFolders::new(&args.local_roots, &[state.into(), objects])
                .context("--local-root must name existing folders")?;
        sources.0.push(std::sync::Arc::new(folders));
    }
    // One set of face models for the photo tasks and for enrolment, loaded on first use.
    let faces = std::sync::Arc::new(tessera_jobs::photos::FaceService::from_env());
    let setup = ServerSetup {
        cors_origins: args.cors_origins.clone(),
        host_names: args.host_names.clone(),
        insecure: args.insecure,
        workers: (!args.no_workers).then_some(args.concurrency as usize),
        sources,
        faces: Some(faces.clone()),
        ..ServerSetup::new(args.addr, args.auth)
    };
    // Refused before anything is opened.
    setup.check()?;
    let (_dir, engine) = embedded::engine_with(state, None, faces).await?;
    if args.auth == AuthMode::ApiKey {
        first_admin_key(&engine).await?;
    } else {
        eprintln!(
            "warning: --auth none: every caller is the local tenant; use --auth api_key beyond this machine"
        );
    }
    let server = tessera_api::server::start(engine, setup).await?;
    // One write, once /healthz answers 200: a reader that stops at the address line (a
    // test, a supervisor) may close the pipe, and a second write to it would end the
    // server.
    let addr = server.addr;
    eprintln!(
        "console: open http://{addr}/ in a browser\nserving the Tessera API on http://{addr}"
    );
    // If the worker loop dies while the server runs, the server stops too and exits
    // non-zero, so a supervisor restarts the process instead of it answering HTTP while
    // no job runs; open connections are then cut after 10 s.
    let died = server.worker_died.clone();
    let grace = tokio::select! {
        _ = super::interrupted() => None,
        _ = died.cancelled() => Some(Duration::from_secs(10)),
    };
    server
        .shut_down(grace)
        .await
        .context("the HTTP server failed")?;
    if died.is_cancelled() {
        anyhow::bail!(
            "the worker loop stopped while the server was running (see the log above); exiting so that a supervisor restarts tessera serve"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--auth api_key` on a tenant with no admin key: make one and show it, once.
async fn first_admin_key(engine: &tessera_engine::Engine) -> anyhow::Result<()> {
    let store = engine.ports().store.as_ref();
    let tenant = tessera_core::TenantId::local();
    if tessera_core::catalog::api_keys::list(store, &tenant)
        .await?
        .iter()
        .all(|k| !k.admin || k.revoked_at.is_some())
    {
        let (key, secret) = tessera_api::auth::create_key(store, tenant, true)
            .await
            .map_err(|p| anyhow::anyhow!(p.detail))?;
        eprintln!(
            "created the first admin API key ({}) for tenant `local`; it is shown only now:\n{secret}",
            key.key_id
        );
    }
    Ok(())
}
