//! How long a progress stream (SSE, WebSocket) may stay open.
//!
//! A stream outlives the request that authorised it, so it re-checks its key every
//! [`KEY_RECHECK`] and ends once the key is revoked; and it ends after [`MAX_STREAM`]
//! whatever the job does (a job that is never sealed would otherwise hold a connection,
//! and on AWS a Lambda invocation, forever). Either way the client resumes from the last
//! event id it saw, so ending a stream loses nothing.

use crate::auth::Caller;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_core::ports::StateStore;

/// How often an open stream re-checks its key.
pub const KEY_RECHECK: Duration = Duration::from_secs(30);
/// The longest a stream stays open.
pub const MAX_STREAM: Duration = Duration::from_secs(30 * 60);

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
            Ended::TooLong => "streams last at most 30 minutes; reconnect with the last event id",
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
        Self::with_limits(caller, store, MAX_STREAM, KEY_RECHECK)
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
}
