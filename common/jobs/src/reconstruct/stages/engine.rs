//! Which engine runs a stage (COLMAP's command line or pycolmap, detected once per
//! process) and running it as part of a task: its lines become progress events, and how
//! it ended is classified from more than its exit code.

use super::*;

/// The engine backend a spec names, detected once per process. A version in the spec
/// must match the installed engine's, so a job never resumes on another engine's output.
pub fn backend_for(spec: &BackendSpec) -> Result<&'static dyn EngineBackend, TaskError> {
    static COLMAP: OnceLock<Result<ColmapBackend, String>> = OnceLock::new();
    static PYCOLMAP: OnceLock<Result<PycolmapBackend, String>> = OnceLock::new();
    let b: &'static dyn EngineBackend = match spec.name.as_str() {
        "colmap" => COLMAP
            .get_or_init(|| ColmapBackend::detect().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| TaskError::permanent(e.clone()))?,
        "pycolmap" => PYCOLMAP
            .get_or_init(|| PycolmapBackend::detect().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| TaskError::permanent(e.clone()))?,
        other => {
            return Err(TaskError::permanent(format!(
                "unknown engine backend `{other}`; Tessera knows `pycolmap` (COLMAP 4) and `colmap` (the command line)"
            )));
        }
    };
    if let Some(v) = &spec.version
        && !(b.info().version == *v || b.info().version.starts_with(&format!("{v}.")))
    {
        return Err(TaskError::permanent(format!(
            "the job asks for {} {v}, and this worker has {} {}",
            spec.name,
            spec.name,
            b.info().version
        )));
    }
    Ok(b)
}

/// The backend a job gets when it names none, with its version resolved now, at
/// submission, so the fingerprint names the engine that will run (a changed engine never
/// reuses another engine's cached stages): pycolmap (COLMAP 4) where it is installed,
/// for its faster matching and its global mapper; else the COLMAP command line.
/// `TESSERA_ENGINE=colmap|pycolmap` chooses instead.
pub fn default_backend() -> Result<BackendSpec, TaskError> {
    let choose = resolve;
    match std::env::var("TESSERA_ENGINE").ok().as_deref() {
        Some(name) if !name.is_empty() && name != "auto" => choose(name),
        _ => choose("pycolmap").or_else(|py| {
            choose("colmap").map_err(|c| {
                TaskError::permanent(format!(
                    "no reconstruction engine is installed: {} / {}",
                    py.message, c.message
                ))
            })
        }),
    }
}

/// The backend `name` with the installed version pinned, as a job submitted now names it.
pub fn resolve(name: &str) -> Result<BackendSpec, TaskError> {
    backend_for(&BackendSpec {
        name: name.into(),
        version: None,
    })
    .map(|b| BackendSpec {
        name: name.into(),
        version: Some(b.info().version.clone()),
    })
}

/// The default backend of this machine (see [`default_backend`]).
pub fn backend() -> Result<&'static dyn EngineBackend, TaskError> {
    backend_for(&default_backend()?)
}

/// Run COLMAP in `cwd` as part of the task, turning its lines into progress events and
/// classifying how it ended (COLMAP's exit code is only one of the signals).
pub async fn run_backend(
    ctx: &TaskContext,
    backend: &dyn EngineBackend,
    cwd: &Path,
    invocation: Invocation,
    phase: Phase,
    total: Option<u64>,
) -> Result<ProcessReport, TaskError> {
    let command = invocation.name().to_string();
    let mut spec = ProcessSpec::new(invocation.program, invocation.args);
    spec.cwd = Some(cwd.to_path_buf());
    // The memory model's estimate is for admission; the hard limit leaves it twice the
    // room, and without an estimate the class's whole budget.
    let task = ctx.task();
    spec.rss_limit = Some(task.memory_estimate.map_or_else(
        || task.resource_class.memory_bytes(),
        |e| e.saturating_mul(2),
    ));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let sink = move |_s: Stream, line: &str| {
        let _ = tx.send(line.to_string());
    };
    let done = tokio::sync::Notify::new();
    let run = async {
        let r = ctx.run_process(spec, &sink).await;
        done.notify_one();
        r
    };
    let drain = async {
        let mut tail: VecDeque<String> = VecDeque::new();
        // The engine's own sub-phases (registration, bundle adjustment, …), each with
        // when it was first seen: completed together when the command succeeds, so every
        // phase a client saw start also ends.
        let mut seen: Vec<(Phase, Instant)> = Vec::new();
        let mut last_progress = Instant::now() - Duration::from_secs(1);
        let mut handle =
            async |line: String, tail: &mut VecDeque<String>, seen: &mut Vec<(Phase, Instant)>| {
                let event = backend.parse_line(&line, total);
                if let Some(
                    tessera_sfm::backend::LineEvent::Progress { phase: p, .. }
                    | tessera_sfm::backend::LineEvent::Started(p),
                ) = &event
                    && *p != phase
                    && !seen.iter().any(|(s, _)| s == p)
                {
                    seen.push((*p, Instant::now()));
                }
                match event {
                    Some(tessera_sfm::backend::LineEvent::Progress {
                        phase,
                        current,
                        total,
                    }) => {
                        let last = total == Some(current);
                        if last || last_progress.elapsed() >= Duration::from_millis(250) {
                            last_progress = Instant::now();
                            let _ = ctx.progress(phase, current, total, None).await;
                        }
                    }
                    Some(tessera_sfm::backend::LineEvent::Started(p)) => {
                        let _ = ctx.emit(EventKind::PhaseStarted { phase: p }).await;
                    }
                    Some(tessera_sfm::backend::LineEvent::Figure(name, v)) => {
                        let _ = ctx.metric(name, v, None).await;
                    }
                    Some(tessera_sfm::backend::LineEvent::Warning(w)) => {
                        let _ = ctx.emit(EventKind::Warning { message: w }).await;
                    }
                    None => {}
                }
                tail.push_back(line);
                if tail.len() > 12 {
                    tail.pop_front();
                }
            };
        loop {
            tokio::select! {
                l = rx.recv() => match l {
                    Some(l) => handle(l, &mut tail, &mut seen).await,
                    None => break,
                },
                _ = done.notified() => {
                    while let Ok(l) = rx.try_recv() {
                        handle(l, &mut tail, &mut seen).await;
                    }
                    break;
                }
            }
        }
        (tail, seen)
    };
    let started = ctx.phase_started(phase).await?;
    let (report, (tail, seen)) = tokio::join!(run, drain);
    let report = report?;
    let stage = ctx.task().name.clone();
    ctx.metric(
        &format!("{stage}.{command}_peak_rss_bytes"),
        report.peak_rss_bytes as f64,
        Some("bytes"),
    )
    .await?;
    ctx.metric(
        &format!("{stage}.{command}_cpu_s"),
        report.cpu.as_secs_f64(),
        Some("s"),
    )
    .await?;
    let tail: Vec<String> = tail.into_iter().collect();
    let said = tail.join(" | ");
    match (report.killed_for, report.exit_code, report.signal) {
        (Some(KillReason::Cancelled), ..) => {
            return Err(TaskError::cancelled(format!(
                "COLMAP {command} was stopped by cancel"
            )));
        }
        (Some(KillReason::RssLimit), ..) => {
            return Err(TaskError::resource(format!(
                "COLMAP {command} exceeded the memory limit of its resource class ({:?}); retrying one class up",
                ctx.task().resource_class
            )));
        }
        (Some(KillReason::Timeout), ..) => {
            return Err(TaskError::resource(format!(
                "COLMAP {command} ran past its time limit"
            )));
        }
        (None, _, Some(9)) => {
            return Err(TaskError::resource(format!(
                "COLMAP {command} was killed by SIGKILL (the kernel's out-of-memory killer?)"
            )));
        }
        (None, Some(134), _) | (None, _, Some(6)) => {
            return Err(TaskError::permanent(format!(
                "COLMAP {command} aborted (exit 134) — usually empty or unusable input; it said: {said}"
            )));
        }
        (None, Some(0), _) => {}
        (None, code, sig) => {
            return Err(TaskError::permanent(format!(
                "COLMAP {command} failed (exit {code:?}, signal {sig:?}); it said: {said}"
            )));
        }
    }
    for (p, at) in seen {
        ctx.phase_completed(p, at).await?;
    }
    ctx.phase_completed(phase, started).await?;
    Ok(report)
}
