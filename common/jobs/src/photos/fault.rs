//! Crash injection for tests of what a crash between two steps leaves behind.
//!
//! A crash between uploading a file and recording its key cannot be caused from outside
//! at a precise moment, so the real worker process aborts itself (SIGABRT, no unwinding,
//! no cleanup) at a named point when `TESSERA_FAULT` names it. Unset, this is one
//! environment lookup.

/// The environment variable naming the crash point.
pub const FAULT_ENV: &str = "TESSERA_FAULT";

/// After a rendition's file and thumbnail are stored, before the row points at them.
pub const AFTER_VARIANT_UPLOAD: &str = "after-variant-upload";

/// Abort the process here if `TESSERA_FAULT` names `point`.
pub fn crash_point(point: &str) {
    if injected(point) {
        tracing::error!(point, "injected crash");
        std::process::abort();
    }
}

/// Whether `TESSERA_FAULT` names `point`: for a fault that is a wrong result, not a
/// crash, which the code at `point` then makes itself.
pub fn injected(point: &str) -> bool {
    std::env::var(FAULT_ENV).is_ok_and(|v| v == point)
}

/// In the map stage of a split run, once the clusters are joined and before the points
/// are triangulated again: the first photo by name is moved three times the camera
/// centres' extent along the model's first axis, as a cluster that registered it with a
/// wrong pose would have left it.
pub const MISPLACE_AFTER_JOIN: &str = "misplace-after-join";

/// After a photo's erasure is committed (its row gone), before the rest of it is
/// taken away.
pub const AFTER_ERASURE_COMMIT: &str = "after-erasure-commit";

/// After a photo's files are stored and its decision made, before the task's success
/// publishes them.
pub const BEFORE_PUBLISH: &str = "before-publish";
/// After a photo is decided, before the run stages its new version (the row's version
/// it read then still unchanged by this run).
pub const BEFORE_STAGING: &str = "before-staging";

/// In ingest, after the project was read and the follow-up chosen, before the photo's
/// row is written.
pub const INGEST_BEFORE_ROW: &str = "ingest-before-row";

/// In a map stage, right after a snapshot was sealed, while COLMAP still maps: a crash
/// here is a worker dying mid-map with something to resume from.
pub const AFTER_SNAPSHOT_SEALED: &str = "after-snapshot-sealed";

/// A point where a test holds a running task while it changes the world, to make a
/// race deterministic: [`hold`] arms it, the task calls [`pause_point`] and waits there
/// until the test releases it. Unarmed, a pause point is one lock and a map lookup.
pub struct Held {
    /// Notified when a task reaches the point.
    pub reached: std::sync::Arc<tokio::sync::Notify>,
    /// Notify to let the task go on.
    pub release: std::sync::Arc<tokio::sync::Notify>,
    /// Whether the task, once released, fails there for good instead of going on: a
    /// run that ends failed at a chosen moment (its attempts spent by errors a test
    /// cannot cause on cue), so that what its failure commits meets the world the test
    /// set up meanwhile.
    pub fails: bool,
}

/// What arming a pause point gives the test: (reached, release) of [`Held`].
pub type Hold = (
    std::sync::Arc<tokio::sync::Notify>,
    std::sync::Arc<tokio::sync::Notify>,
);

type Armed = std::collections::HashMap<&'static str, Held>;

fn armed() -> &'static std::sync::Mutex<Armed> {
    static ARMED: std::sync::OnceLock<std::sync::Mutex<Armed>> = std::sync::OnceLock::new();
    ARMED.get_or_init(Default::default)
}

/// Arm `point` for the next task that reaches it (once); returns (reached, release).
pub fn hold(point: &'static str) -> Hold {
    arm(point, false)
}

/// [`hold`], and once released the task fails at `point` with a permanent error.
pub fn hold_then_fail(point: &'static str) -> Hold {
    arm(point, true)
}

fn arm(point: &'static str, fails: bool) -> Hold {
    let held = Held {
        reached: Default::default(),
        release: Default::default(),
        fails,
    };
    let pair = (held.reached.clone(), held.release.clone());
    armed()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(point, held);
    pair
}

/// Wait here if a test armed `point` (disarming it), else go on at once; the error is
/// the failure [`hold_then_fail`] asked for.
pub async fn pause_point(point: &'static str) -> Result<(), tessera_engine::TaskError> {
    let held = armed()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(point);
    if let Some(h) = held {
        tracing::warn!(point, "held at a test pause point");
        h.reached.notify_one();
        h.release.notified().await;
        if h.fails {
            tracing::error!(point, "injected failure");
            return Err(tessera_engine::TaskError::permanent(format!(
                "injected failure at `{point}`"
            )));
        }
    }
    crash_point(point);
    Ok(())
}
