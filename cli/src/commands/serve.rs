//! `tessera serve`: the HTTP API on a local port in embedded mode, with workers in the
//! same process unless `--no-workers`.

use crate::embedded;
use anyhow::Context;
use std::future::IntoFuture;
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
    // Refused before anything is opened.
    tessera_api::browser::BrowserPolicy::for_server(
        args.addr,
        args.auth,
        args.cors_origins.clone(),
        &args.host_names,
        args.insecure,
    )
    .map_err(anyhow::Error::msg)?;
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
    let worker = (!args.no_workers).then(|| {
        Worker::new(
            engine.clone(),
            args.concurrency as usize,
            Some(Duration::from_secs(5)),
        )
    });
    let health = worker.as_ref().map(Worker::health);
    let app = tessera_api::router(ApiState {
        workers: health.clone(),
        engine: engine.clone(),
        auth: args.auth,
        capabilities,
        backend,
        faces: Some(faces),
        sources,
        // Judged again on the address bound, whose port the system may have chosen.
        browser: tessera_api::browser::BrowserPolicy::for_server(
            listener.local_addr()?,
            args.auth,
            args.cors_origins.clone(),
            &args.host_names,
            args.insecure,
        )
        .map_err(anyhow::Error::msg)?,
        response_limit: None,
    });
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    // The worker loop is supervised: if it ends while the server is not stopping (it
    // died), the server stops too and exits non-zero, so a supervisor restarts the
    // process instead of it answering HTTP while no job runs.
    let died = CancellationToken::new();
    let worker = worker.map(|w| {
        let s = stop.clone();
        let d = died.clone();
        tokio::spawn(async move {
            let token = s.clone();
            let ended = tokio::spawn(async move { w.run(token).await }).await;
            if !s.is_cancelled() {
                match &ended {
                    Err(e) => tracing::error!(error = %e, "the worker loop died"),
                    Ok(()) => tracing::error!("the worker loop ended on its own"),
                }
                d.cancel();
            }
        })
    });
    // The address is printed once the loop runs, so that what reads it (a test, a
    // supervisor) finds /healthz answering 200 at once.
    if let Some(h) = &health {
        let since = std::time::Instant::now();
        while h.state() == tessera_engine::LoopState::Starting
            && since.elapsed() < Duration::from_secs(10)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // One write: a reader that stops at the address line (a test, a supervisor) may
    // close the pipe, and a second write to it would end the server.
    eprintln!(
        "console: open http://{addr}/ in a browser\nserving the Tessera API on http://{addr}"
    );
    let s = stop.clone();
    let d = died.clone();
    let serving = axum::serve(listener, app).with_graceful_shutdown(async move {
        tokio::select! {
            _ = super::interrupted() => {}
            _ = d.cancelled() => {}
        }
        s.cancel();
    });
    // A graceful shutdown waits for open connections, and a progress stream may stay
    // open for 30 minutes: after the loop died, the process leaves within 10 s anyway.
    tokio::select! {
        served = serving.into_future() => served.context("the HTTP server failed")?,
        _ = async {
            died.cancelled().await;
            tokio::time::sleep(Duration::from_secs(10)).await;
        } => tracing::warn!("open connections cut: the worker loop died"),
    }
    let worker_died = died.is_cancelled();
    stop.cancel();
    if let Some(w) = worker {
        let _ = w.await;
    }
    if worker_died {
        anyhow::bail!(
            "the worker loop stopped while the server was running (see the log above); exiting so that a supervisor restarts tessera serve"
        );
    }
    Ok(ExitCode::SUCCESS)
}
