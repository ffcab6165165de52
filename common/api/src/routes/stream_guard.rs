//! How long a progress stream (SSE, WebSocket) may stay open.
//!
//! A stream outlives the request that authorised it, so it re-checks its key every
//! [`KEY_RECHECK`] and ends once the key is revoked; and it ends after [`stream_limit`]
//! whatever the job does (a job that is never sealed would otherwise hold a connection,
//! and on AWS a Lambda invocation, forever). Either way the client resumes from the last
//! event id it saw, so ending a stream loses nothing.

use crate::auth::Caller;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_core::ports::StateStore;

/// How often an open stream re-checks its key.
pub const KEY_RECHECK: Duration = Duration::from_secs(30);
/// The longest a stream stays open where [`STREAM_LIMIT_ENV`] says nothing.
pub const MAX_STREAM: Duration = Duration::from_secs(30 * 60);
/// Seconds a stream may stay open in this process. A server behind a function that is
/// killed at its timeout must end its streams before that, cleanly, so the client
/// resumes from its last event id instead of seeing a cut-off response: the SAM template
/// sets it below the api function's timeout (checked by `infra/check_template.py`).
pub const STREAM_LIMIT_ENV: &str = "TESSERA_STREAM_LIMIT_S";

/// The longest a stream stays open here: [`STREAM_LIMIT_ENV`], else [`MAX_STREAM`].
pub fn stream_limit() -> Duration {
    static LIMIT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var(STREAM_LIMIT_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|s| *s > 0)
            .map_or(MAX_STREAM, |s| Duration::from_secs(s).min(MAX_STREAM))
    })
}

/// How long an idle stream waits before reading again, after `idle` empty reads in a
/// row: 200 ms, doubling to at most 2 s. A live job is followed closely; a stream left
/// open on a quiet job costs about one read of the job and one of its events a second,
/// not ten.
pub fn idle_delay(idle: u32) -> Duration {
    Duration::from_millis((200u64 << idle.min(4)).min(2000))
}

/// Why a stream ends early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its key was revoked.
    Revoked,
    /// It was open for [`MAX_STREAM`].
    TooLong,
}

impl Ended {
    /// What to tell the client.
    pub fn reason(self) -> &'static str {
        match self {
            Ended::Revoked => "the API key was revoked",
            Ended::TooLong => {
                "this stream reached its time limit; reconnect with the last event id"
            }
        }
    }
}

/// One stream's limits.
pub struct StreamGuard {
    caller: Caller,
    store: Arc<dyn StateStore>,
    opened: Instant,
    checked: Instant,
    max: Duration,
    recheck: Duration,
}

impl StreamGuard {
    /// Limits for a stream opened now by `caller`.
    pub fn new(caller: Caller, store: Arc<dyn StateStore>) -> Self {
        Self::with_limits(caller, store, stream_limit(), KEY_RECHECK)
    }

    /// With other limits (tests).
    pub fn with_limits(
        caller: Caller,
        store: Arc<dyn StateStore>,
        max: Duration,
        recheck: Duration,
    ) -> Self {
        let now = Instant::now();
        StreamGuard {
            caller,
            store,
            opened: now,
            checked: now,
            max,
            recheck,
        }
    }

    /// Whether the stream must end now.
    pub async fn check(&mut self) -> Option<Ended> {
        if self.opened.elapsed() >= self.max {
            return Some(Ended::TooLong);
        }
        if self.checked.elapsed() >= self.recheck {
            self.checked = Instant::now();
            if !self.caller.still_valid(self.store.as_ref()).await {
                return Some(Ended::Revoked);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::TenantId;
    use tessera_core::catalog::api_keys;

    #[tokio::test]
    async fn a_stream_ends_when_its_key_is_revoked_or_it_is_open_too_long() {
        let dir = tempfile::tempdir().unwrap();
        let state = tessera_local::StateDir::open(dir.path()).unwrap();
        let store: Arc<dyn StateStore> =
            Arc::new(tessera_local::SqliteStateStore::open(&state.state_db()).unwrap());
        let tenant: TenantId = "tenant-a".parse().unwrap();
        let (_admin, _) = api_keys::create(store.as_ref(), &tenant, true)
            .await
            .unwrap();
        let (key, _) = api_keys::create(store.as_ref(), &tenant, false)
            .await
            .unwrap();
        let caller = Caller {
            tenant: tenant.clone(),
            admin: false,
            key_id: Some(key.key_id.clone()),
        };
        let mut guard =
            StreamGuard::with_limits(caller.clone(), store.clone(), MAX_STREAM, Duration::ZERO);
        assert_eq!(guard.check().await, None);
        api_keys::revoke(store.as_ref(), &tenant, &key.key_id)
            .await
            .unwrap();
        assert_eq!(guard.check().await, Some(Ended::Revoked));
        let mut short = StreamGuard::with_limits(caller, store, Duration::ZERO, KEY_RECHECK);
        assert_eq!(short.check().await, Some(Ended::TooLong));
    }

    #[test]
    fn an_idle_stream_reads_less_often_and_never_waits_past_two_seconds() {
        let delays: Vec<u64> = (0..8).map(|n| idle_delay(n).as_millis() as u64).collect();
        assert_eq!(delays, [200, 400, 800, 1600, 2000, 2000, 2000, 2000]);
        assert_eq!(idle_delay(u32::MAX), Duration::from_secs(2));
    }
}
