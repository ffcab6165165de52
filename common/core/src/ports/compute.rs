//! Compute: where heavy work runs and how much of it may run at once.
//!
//! Locally this is a process pool behind a memory gate; on AWS heavy stages go to Batch.
//! Handlers ask for admission with the memory they expect to need and run subprocesses
//! through [`Compute::run`], which kills the whole process group on cancel.

use crate::error::{Classify, ErrorClass};
use crate::task::ResourceClass;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a task asks of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceDemand {
    /// Its class.
    pub class: ResourceClass,
    /// Expected peak memory in bytes.
    pub memory_bytes: u64,
}

/// Held while admitted work runs; dropping it gives the capacity back.
pub struct ComputePermit(#[allow(dead_code)] Box<dyn Send + Sync>);

impl ComputePermit {
    /// Wrap an adapter's guard.
    pub fn new(guard: impl Send + Sync + 'static) -> Self {
        ComputePermit(Box::new(guard))
    }
}

impl std::fmt::Debug for ComputePermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ComputePermit")
    }
}

/// A subprocess to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// Program (looked up on PATH).
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Kill it after this long.
    pub timeout: Option<Duration>,
    /// Kill it when its resident memory exceeds this many bytes.
    pub rss_limit: Option<u64>,
}

impl ProcessSpec {
    /// A program with arguments and nothing else set.
    pub fn new(
        program: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        ProcessSpec {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            cwd: None,
            env: Vec::new(),
            timeout: None,
            rss_limit: None,
        }
    }
}

/// Why the runner killed a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KillReason {
    /// Cancelled (cooperative cancel escalated, forced cancel, lost lease).
    Cancelled,
    /// Ran past its timeout.
    Timeout,
    /// Exceeded its RSS limit.
    RssLimit,
}

/// How a subprocess ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessReport {
    /// Exit code, if it exited.
    pub exit_code: Option<i32>,
    /// Terminating signal, if it was signalled.
    pub signal: Option<i32>,
    /// Set when the runner killed it.
    pub killed_for: Option<KillReason>,
    /// Wall time.
    pub wall: Duration,
    /// Peak resident memory in bytes (from the child's rusage).
    pub peak_rss_bytes: u64,
    /// User plus system CPU time.
    pub cpu: Duration,
}

impl ProcessReport {
    /// True when it exited with status 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && self.killed_for.is_none()
    }
}

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Errors of compute.
#[derive(Debug, thiserror::Error)]
pub enum ComputeError {
    /// The demand is larger than this machine could ever admit.
    #[error(
        "task needs {needed} bytes of memory but at most {capacity} can ever be admitted here; run it on a larger machine or lower its size"
    )]
    TooLarge {
        /// Asked.
        needed: u64,
        /// The most this gate admits.
        capacity: u64,
    },
    /// The program could not be started.
    #[error("could not start `{program}`: {source}; is it installed and on PATH?")]
    Spawn {
        /// Program.
        program: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Waiting was cancelled.
    #[error("cancelled while waiting for admission")]
    Cancelled,
}

impl Classify for ComputeError {
    fn class(&self) -> ErrorClass {
        match self {
            ComputeError::TooLarge { .. } => ErrorClass::Resource,
            ComputeError::Spawn { .. } => ErrorClass::Permanent,
            ComputeError::Cancelled => ErrorClass::Cancelled,
        }
    }
}

/// Receives output lines as they are printed.
pub type LineSink<'a> = &'a (dyn Fn(Stream, &str) + Send + Sync);

/// The compute port.
#[async_trait]
pub trait Compute: Send + Sync + 'static {
    /// Wait until work of this demand may start; the permit holds the capacity.
    async fn admit(
        &self,
        demand: ResourceDemand,
        cancel: &CancellationToken,
    ) -> Result<ComputePermit, ComputeError>;

    /// Run a subprocess to completion, feeding its output lines to `lines`. On cancel,
    /// timeout or RSS limit the whole process group is killed and the report says why;
    /// no process outlives this call.
    async fn run(
        &self,
        spec: ProcessSpec,
        cancel: &CancellationToken,
        lines: LineSink<'_>,
    ) -> Result<ProcessReport, ComputeError>;
}
