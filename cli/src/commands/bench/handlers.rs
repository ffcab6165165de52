//! `tessera bench handlers`: what each Lambda handler binary costs to ship and to
//! start. For every binary in `--dir`: its size and stripped size, and the time from
//! exec until it asks the Lambda Runtime API for its first invocation (the end of the
//! init phase), measured against a minimal Runtime API on 127.0.0.1 that this command
//! serves. The face functions are measured twice: with their models loaded at init
//! (`TESSERA_PRELOAD_FACES=1`) and without. The baseline in the same run is the same
//! measurement for the smallest handler, so the figures survive a noisy machine.

use crate::output::emit;
use anyhow::Context;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder with the handler binaries (`target/release` after
    /// `cargo build --release -p 'tessera-fn-*'`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Starts per measurement (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
}

/// The handler binaries, in the order of the template.
pub const HANDLERS: [&str; 9] = [
    "ingest",
    "thumbnail-dims",
    "face-process",
    "reprocess",
    "stage-runner",
    "orchestrator",
    "reaper",
    "dlq-archiver",
    "api",
];

/// Handlers that can load the face models at init.
const FACE_HANDLERS: [&str; 3] = ["face-process", "reprocess", "api"];

#[derive(Serialize)]
struct Row {
    handler: String,
    bytes: u64,
    stripped_bytes: Option<u64>,
    /// Median exec → first `invocation/next`, models loaded lazily.
    ready_ms: f64,
    /// The same with `TESSERA_PRELOAD_FACES=1` (face handlers only).
    ready_with_faces_ms: Option<f64>,
    /// ready_ms / the smallest handler's ready_ms, same run.
    ratio_vs_baseline: f64,
}

/// Run it.
pub async fn run(json: bool, args: Args) -> anyhow::Result<ExitCode> {
    let mut rows = Vec::new();
    for name in HANDLERS {
        let bin = args.dir.join(name);
        anyhow::ensure!(
            bin.exists(),
            "{} is missing: build the handlers first (cargo build --release -p 'tessera-fn-*')",
            bin.display()
        );
        let bytes = std::fs::metadata(&bin)?.len();
        let ready = median(&bin, args.rounds, false).await?;
        let with_faces = if FACE_HANDLERS.contains(&name) {
            Some(median(&bin, args.rounds, true).await?)
        } else {
            None
        };
        rows.push(Row {
            handler: name.into(),
            bytes,
            stripped_bytes: stripped_size(&bin),
            ready_ms: ready,
            ready_with_faces_ms: with_faces,
            ratio_vs_baseline: 0.0,
        });
    }
    let baseline = rows
        .iter()
        .min_by_key(|r| r.stripped_bytes.unwrap_or(r.bytes))
        .map(|r| r.ready_ms)
        .unwrap_or(1.0);
    for r in &mut rows {
        r.ratio_vs_baseline = r.ready_ms / baseline;
    }
    emit(json, &rows, || {
        let mut s = String::from("handler          stripped   ready   with faces\n");
        for r in &rows {
            s += &format!(
                "{:<16} {:>6.1} MB {:>6.1} ms {}\n",
                r.handler,
                r.stripped_bytes.unwrap_or(r.bytes) as f64 / 1e6,
                r.ready_ms,
                r.ready_with_faces_ms
                    .map_or(String::from("-"), |f| format!("{f:.1} ms")),
            );
        }
        s
    });
    Ok(ExitCode::SUCCESS)
}

fn stripped_size(bin: &Path) -> Option<u64> {
    let out = std::env::temp_dir().join(format!("tessera-strip-{}", tessera_core::JobId::new()));
    let ok = std::process::Command::new("strip")
        .arg("-o")
        .arg(&out)
        .arg(bin)
        .status()
        .ok()?
        .success();
    let size = ok
        .then(|| std::fs::metadata(&out).ok().map(|m| m.len()))
        .flatten();
    let _ = std::fs::remove_file(&out);
    size
}

async fn median(bin: &Path, rounds: u32, faces: bool) -> anyhow::Result<f64> {
    let mut times = Vec::new();
    for _ in 0..rounds {
        times.push(start_to_ready(bin, faces).await?.as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Exec the handler against a Runtime API of our own and wait for its first
/// `GET …/runtime/invocation/next`. The graceful-shutdown extension registers first
/// (`POST …/extension/register`), which is answered; its event poll is held open.
async fn start_to_ready(bin: &Path, faces: bool) -> anyhow::Result<Duration> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut cmd = tokio::process::Command::new(bin);
    let name = bin
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("handler");
    cmd.env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", name)
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("TESSERA_TABLE", "bench")
        .env("TESSERA_BUCKET", "bench")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "bench")
        .env("AWS_SECRET_ACCESS_KEY", "bench")
        .env("RUST_LOG", "error")
        .env("TESSERA_PRELOAD_FACES", if faces { "1" } else { "0" })
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut held = Vec::new();
    let serve = async {
        loop {
            let (mut sock, _) = listener.accept().await?;
            let mut buf = vec![0u8; 8192];
            let n = sock.read(&mut buf).await?;
            let head = String::from_utf8_lossy(&buf[..n]);
            if head.contains("/runtime/invocation/next") {
                return Ok::<Duration, std::io::Error>(started.elapsed());
            }
            if head.contains("/extension/register") {
                let body = format!(
                    r#"{{"functionName":"{name}","functionVersion":"$LATEST","handler":"bootstrap"}}"#
                );
                sock.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nLambda-Extension-Identifier: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await?;
            }
            held.push(sock);
        }
    };
    let mut stderr = child.stderr.take();
    let outcome = tokio::select! {
        r = tokio::time::timeout(Duration::from_secs(60), serve) => match r {
            Ok(Ok(d)) => Ok(d),
            Ok(Err(e)) => Err(anyhow::Error::from(e)),
            Err(_) => Err(anyhow::anyhow!("{} did not become ready within 60 s", bin.display())),
        },
        status = child.wait() => Err(anyhow::anyhow!("{} exited during init ({:?})", bin.display(), status.ok())),
    };
    let _ = child.kill().await;
    match outcome {
        Ok(d) => Ok(d),
        Err(e) => {
            let mut err = String::new();
            if let Some(s) = stderr.as_mut() {
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), s.read_to_string(&mut err)).await;
            }
            Err(e.context(err))
        }
    }
}
