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
    if std::env::var(FAULT_ENV).is_ok_and(|v| v == point) {
        tracing::error!(point, "injected crash");
        std::process::abort();
    }
}
