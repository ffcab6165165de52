//! Starting the HTTP API of embedded mode: the router on a bound listener, with the
//! worker loop beside it. `tessera serve` and the HTTP tests start it here, with the
//! same rules (the browser policy judged on the address bound, the engine this machine
//! has, `/healthz` following the worker loop), so a test's server is the one a user
//! runs; the `api` function builds its state on the AWS adapters
//! (`tessera_lambda::api::state`) and serves the same router.

use crate::{ApiState, AuthMode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tessera_engine::{Engine, LoopState, Worker};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What a server is asked to be: `tessera serve`'s flags.
#[derive(Clone)]
pub struct ServerSetup {
    /// Address to listen on (port 0: one the system picks).
    pub addr: SocketAddr,
    /// How callers are identified.
    pub auth: AuthMode,
    /// Web page origins allowed besides the server's own.
    pub cors_origins: Vec<String>,
    /// Names the server is reached by, besides its address's own.
    pub host_names: Vec<String>,
    /// Whether the rules that keep the server from being everyone's admin are waived.
    pub insecure: bool,
    /// Tasks the worker loop in this process runs at once; `None`: no worker loop
    /// (workers run elsewhere).
    pub workers: Option<usize>,
    /// How long an idle worker loop waits for a message before it asks again.
    pub worker_poll: Duration,
    /// Dataset sources offered besides uploads.
    pub sources: crate::sources::Sources,
    /// Face models for enrolment.
    pub faces: Option<Arc<tessera_jobs::photos::FaceService>>,
}

impl ServerSetup {
    /// A server on `addr` with `auth`, a worker loop of `tessera serve`'s default size,
    /// and nothing else offered.
    pub fn new(addr: SocketAddr, auth: AuthMode) -> Self {
        ServerSetup {
            addr,
            auth,
            cors_origins: Vec::new(),
            host_names: Vec::new(),
            insecure: false,
            workers: Some(2),
            worker_poll: Duration::from_secs(5),
            sources: Default::default(),
            faces: None,
        }
    }

    /// Refuse, before anything is opened, a setup that would make the server everyone's
    /// admin; the error names the flag to add.
    pub fn check(&self) -> Result<(), StartError> {
        self.browser(self.addr).map(|_| ())
    }

    fn browser(&self, addr: SocketAddr) -> Result<crate::browser::BrowserPolicy, StartError> {
        crate::browser::BrowserPolicy::for_server(
            addr,
            self.auth,
            self.cors_origins.clone(),
            &self.host_names,
            self.insecure,
        )
        .map_err(StartError::Refused)
    }
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The setup is refused (see [`ServerSetup::check`]).
    #[error("{0}")]
    Refused(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}; pick another --addr")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A server that answers.
pub struct Running {
    /// The address bound.
    pub addr: SocketAddr,
    /// Cancel to stop: the HTTP server shuts down gracefully and the worker loop ends.
    pub stop: CancellationToken,
    /// Stops only the worker loop, as its death would.
    pub worker_stop: CancellationToken,
    /// Cancelled when the worker loop ended while the server was not stopping: it died,
    /// and a supervisor should restart the process.
    pub worker_died: CancellationToken,
    serving: JoinHandle<std::io::Result<()>>,
    worker: Option<JoinHandle<()>>,
}

/// Bind, start the worker loop and serve `engine`'s API as `setup` says. Answers once
/// the worker loop runs, so `/healthz` is 200 from the first request.
pub async fn start(engine: Engine, setup: ServerSetup) -> Result<Running, StartError> {
    setup.check()?;
    let listener = tokio::net::TcpListener::bind(setup.addr)
        .await
        .map_err(|source| StartError::Listen {
            addr: setup.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen {
        addr: setup.addr,
        source,
    })?;
    // Judged again on the address bound, whose port the system may have chosen.
    let browser = setup.browser(addr)?;
    let worker = setup
        .workers
        .map(|n| Worker::new(engine.clone(), n, Some(setup.worker_poll)));
    let health = worker.as_ref().map(Worker::health);
    // The engine this machine runs reconstructions with: pycolmap (COLMAP 4) where
    // installed, else the COLMAP command line.
    let (backend, capabilities) = crate::detected_engine();
    let app = crate::router(ApiState {
        engine,
        auth: setup.auth,
        capabilities,
        backend,
        faces: setup.faces,
        sources: setup.sources,
        browser,
        workers: health.clone(),
        response_limit: None,
    });
    let stop = CancellationToken::new();
    let worker_stop = stop.child_token();
    let worker_died = CancellationToken::new();
    // The worker loop is supervised: if it ends while the server is not stopping, it
    // died; /healthz says so (503) and `worker_died` tells the process.
    let worker = worker.map(|w| {
        let (s, d, token) = (stop.clone(), worker_died.clone(), worker_stop.clone());
        tokio::spawn(async move {
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
    if let Some(h) = &health {
        let since = std::time::Instant::now();
        while h.state() == LoopState::Starting && since.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let s = stop.clone();
    let serving = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { s.cancelled().await })
            .await
    });
    Ok(Running {
        addr,
        stop,
        worker_stop,
        worker_died,
        serving,
        worker,
    })
}

impl Running {
    /// Stop and wait: the HTTP server once its open connections close (or after
    /// `grace`, where given: a progress stream may stay open for 30 minutes), then the
    /// worker loop.
    pub async fn shut_down(self, grace: Option<Duration>) -> std::io::Result<()> {
        self.stop.cancel();
        let grace = grace.unwrap_or(Duration::MAX);
        let served = match tokio::time::timeout(grace, self.serving).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(std::io::Error::other(e)),
            Err(_) => {
                tracing::warn!("open connections cut after the grace period");
                Ok(())
            }
        };
        if let Some(w) = self.worker {
            let _ = w.await;
        }
        served
    }
}
