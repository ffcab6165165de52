//! `tessera serve`: the HTTP API on a local port in embedded mode, with workers in the
//! same process unless `--no-workers`.

use crate::embedded;
use anyhow::Context;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;
use tessera_api::{ApiState, AuthMode};
use tessera_engine::Worker;
use tokio_util::sync::CancellationToken;

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
    /// Allow `--auth none` on an address other machines can reach: anyone who can
    /// connect is then the local tenant with admin rights.
    #[arg(long)]
    pub insecure: bool,
}

pub async fn run(state: &Path, args: Args) -> anyhow::Result<ExitCode> {
    if args.auth == AuthMode::None && !args.addr.ip().is_loopback() && !args.insecure {
        anyhow::bail!(
            "--auth none on {} would make anyone who can reach this machine the local tenant, with admin rights; use --auth api_key, or --addr 127.0.0.1:PORT, or add --insecure if you mean it",
            args.addr
        );
    }
    // One set of face models for the photo tasks and for enrolment, loaded on first use.
    let faces = std::sync::Arc::new(tessera_jobs::photos::FaceService::from_env());
    let (_dir, engine) = embedded::engine_with(state, None, faces.clone()).await?;
    // The engine a reconstruction gets here: pycolmap (COLMAP 4) where installed, else
    // the COLMAP command line (`TESSERA_ENGINE` chooses).
    let (backend, capabilities) = tessera_api::detected_engine();
    if args.auth == AuthMode::ApiKey {
        let store = engine.ports().store.as_ref();
        if tessera_core::catalog::api_keys::list(store, &tessera_core::TenantId::local())
            .await?
            .iter()
            .all(|k| !k.admin || k.revoked_at.is_some())
        {
            let (key, secret) =
                tessera_api::auth::create_key(store, tessera_core::TenantId::local(), true)
                    .await
                    .map_err(|p| anyhow::anyhow!(p.detail))?;
            eprintln!(
                "created the first admin API key ({}) for tenant `local`; it is shown only now:\n{secret}",
                key.key_id
            );
        }
    } else {
        eprintln!(
            "warning: --auth none: every caller is the local tenant; use --auth api_key beyond this machine"
        );
    }
    let mut sources = tessera_api::sources::Sources::default();
    if !args.local_roots.is_empty() {
        let folders = tessera_api::sources::LocalFolders::new(&args.local_roots)
            .context("--local-root must name existing folders")?;
        sources.0.push(std::sync::Arc::new(folders));
    }
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}; pick another --addr", args.addr))?;
    let app = tessera_api::router(ApiState {
        engine: engine.clone(),
        auth: args.auth,
        capabilities,
        backend,
        faces: Some(faces),
        sources,
        browser: tessera_api::browser::BrowserPolicy::for_listener(
            listener.local_addr()?,
            args.cors_origins.clone(),
        ),
    });
    let addr = listener.local_addr()?;
    // One write: a reader that stops at the address line (a test, a supervisor) may
    // close the pipe, and a second write to it would end the server.
    eprintln!(
        "console: open http://{addr}/ in a browser\nserving the Tessera API on http://{addr}"
    );
    let stop = CancellationToken::new();
    let worker = (!args.no_workers).then(|| {
        let w = Worker::new(
            engine.clone(),
            args.concurrency as usize,
            Some(Duration::from_secs(5)),
        );
        let s = stop.clone();
        tokio::spawn(async move { w.run(s).await })
    });
    let s = stop.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            super::interrupted().await;
            s.cancel();
        })
        .await
        .context("the HTTP server failed")?;
    stop.cancel();
    if let Some(w) = worker {
        let _ = w.await;
    }
    Ok(ExitCode::SUCCESS)
}
