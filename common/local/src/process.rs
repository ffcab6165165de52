//! Running one subprocess under control: its own process group, output lines streamed,
//! peak RSS and CPU from `wait4`'s rusage, and the whole group killed on cancel, timeout
//! or RSS limit — and after a normal exit too, so no grandchild outlives the call.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_core::ports::compute::{
    ComputeError, KillReason, LineSink, ProcessReport, ProcessSpec, Stream,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

struct Exit {
    status: libc::c_int,
    rusage: libc::rusage,
}

fn wait_for(pid: libc::pid_t) -> std::io::Result<Exit> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain old data; wait4 fills it for our own child.
        let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut rusage) };
        if r == pid {
            return Ok(Exit { status, rusage });
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Kills the process group when dropped: if the future running the process is dropped
/// (its task was cancelled from outside), the processes still die.
struct GroupGuard(libc::pid_t);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

fn kill_group(pgid: libc::pid_t) {
    // SAFETY: signalling a process group we created; ESRCH (already gone) is fine.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

/// Resident memory of one process from `/proc/<pid>/status`, in bytes.
fn rss_of(pid: libc::pid_t) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// How often the RSS limit is checked.
const RSS_POLL: Duration = Duration::from_millis(100);

/// Run `spec` to completion; see the module docs.
pub async fn run(
    spec: ProcessSpec,
    cancel: &CancellationToken,
    lines: LineSink<'_>,
) -> Result<ProcessReport, ComputeError> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: only async-signal-safe calls between fork and exec. If this worker dies
    // (even by SIGKILL), the kernel kills the child too: no orphaned COLMAP.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|source| ComputeError::Spawn {
        program: spec.program.clone(),
        source,
    })?;
    let pid = child.id() as libc::pid_t;
    let _guard = GroupGuard(pid);

    let (line_tx, mut line_rx) = mpsc::unbounded_channel::<(Stream, String)>();
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        let tx = line_tx.clone();
        readers.push(std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((Stream::Stdout, l));
            }
        }));
    }
    if let Some(err) = child.stderr.take() {
        let tx = line_tx.clone();
        readers.push(std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send((Stream::Stderr, l));
            }
        }));
    }
    drop(line_tx);
    // `child` is reaped by wait4 below, not by std; forget it so nothing else waits.
    std::mem::forget(child);
    let (exit_tx, mut exit_rx) = oneshot::channel();
    std::thread::spawn(move || {
        let _ = exit_tx.send(wait_for(pid));
    });

    let deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut killed_for = None;
    let mut rss_tick = tokio::time::interval(RSS_POLL);
    let mut lines_open = true;
    let exit = loop {
        tokio::select! {
            biased;
            exit = &mut exit_rx => break exit,
            _ = cancel.cancelled(), if killed_for.is_none() => {
                killed_for = Some(KillReason::Cancelled);
                kill_group(pid);
            }
            _ = async { tokio::time::sleep_until(deadline.expect("guarded")).await }, if deadline.is_some() && killed_for.is_none() => {
                killed_for = Some(KillReason::Timeout);
                kill_group(pid);
            }
            _ = rss_tick.tick(), if spec.rss_limit.is_some() && killed_for.is_none() => {
                if rss_of(pid).is_some_and(|rss| rss > spec.rss_limit.expect("guarded")) {
                    killed_for = Some(KillReason::RssLimit);
                    kill_group(pid);
                }
            }
            line = line_rx.recv(), if lines_open => match line {
                Some((stream, l)) => lines(stream, &l),
                None => lines_open = false,
            },
        }
    };
    // Whatever the child left behind in its group goes with it.
    kill_group(pid);
    for r in readers {
        let _ = tokio::task::spawn_blocking(move || r.join()).await;
    }
    while let Ok((stream, l)) = line_rx.try_recv() {
        lines(stream, &l);
    }
    let exit = exit
        .map_err(|_| ComputeError::Spawn {
            program: spec.program.clone(),
            source: std::io::Error::other("waiter thread vanished"),
        })?
        .map_err(|source| ComputeError::Spawn {
            program: spec.program.clone(),
            source,
        })?;
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    let (exit_code, signal) = if libc::WIFEXITED(exit.status) {
        (Some(libc::WEXITSTATUS(exit.status)), None)
    } else if libc::WIFSIGNALED(exit.status) {
        (None, Some(libc::WTERMSIG(exit.status)))
    } else {
        (None, None)
    };
    Ok(ProcessReport {
        exit_code,
        signal,
        killed_for,
        wall: started.elapsed(),
        peak_rss_bytes: exit.rusage.ru_maxrss.max(0) as u64 * 1024,
        cpu: tv(exit.rusage.ru_utime) + tv(exit.rusage.ru_stime),
    })
}
