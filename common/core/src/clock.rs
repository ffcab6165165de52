//! Wall-clock time as milliseconds since the Unix epoch.
//!
//! Stored times are plain integers so that every store can compare them in a condition
//! (DynamoDB numbers, SQLite integers) and sort them in an index key.

use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An injected fault for rehearsals: seconds every [`Millis::now`] of this process adds
/// to the system clock. What is due in a day or a week (originals past retention, an
/// erasure's second sweep, expired uploads) cannot otherwise be made due in a test of
/// the deployed functions; the deploy rehearsal sets it for the reaper alone. Unset in
/// production: one environment lookup per process.
pub const CLOCK_OFFSET_ENV: &str = "TESSERA_CLOCK_OFFSET_S";

fn offset_ms() -> i64 {
    static OFFSET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| {
        std::env::var(CLOCK_OFFSET_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .map_or(0, |s| s.saturating_mul(1000))
    })
}

/// Milliseconds since the Unix epoch (UTC).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(transparent)]
pub struct Millis(pub i64);

impl Millis {
    /// The current time from the system clock, moved by [`CLOCK_OFFSET_ENV`] seconds
    /// where that is set.
    pub fn now() -> Self {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Millis((d.as_millis() as i64).saturating_add(offset_ms()))
    }

    /// This time plus a duration (saturating).
    pub fn plus(self, d: Duration) -> Self {
        Millis(
            self.0
                .saturating_add(d.as_millis().min(i64::MAX as u128) as i64),
        )
    }

    /// The duration from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: Millis) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    /// A fixed-width, lexically sortable rendering for index sort keys.
    pub fn sort_key(self) -> String {
        format!("{:015}", self.0.max(0))
    }

    /// The time an RFC 3339 text names (as [`Millis::to_rfc3339`] writes it), if it
    /// parses.
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let t = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
            .ok()?;
        Some(Millis((t.unix_timestamp_nanos() / 1_000_000) as i64))
    }

    /// RFC 3339 rendering for people.
    pub fn to_rfc3339(self) -> String {
        let nanos = (self.0 as i128) * 1_000_000;
        time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_else(|| self.0.to_string())
    }
}

/// A share of a function's time for work done one item at a time (the reaper's kinds,
/// the collector's expired items). It is up only once an item was acted on: a slow
/// store, or earlier work running past its own share, then still leaves one item of
/// progress per pass, never none for ever.
#[derive(Debug, Clone, Copy)]
pub struct ShareOfPass {
    until: std::time::Instant,
    acted: bool,
}

impl ShareOfPass {
    /// A share that ends at `until`.
    pub fn until(until: std::time::Instant) -> Self {
        ShareOfPass {
            until,
            acted: false,
        }
    }

    /// Note that an item is being acted on.
    pub fn act(&mut self) {
        self.acted = true;
    }

    /// Whether to start no new item.
    pub fn is_up(&self) -> bool {
        self.acted && std::time::Instant::now() >= self.until
    }
}

#[cfg(test)]
mod tests {
    use super::{Millis, ShareOfPass};
    use std::time::{Duration, Instant};

    #[test]
    fn a_share_past_its_end_still_allows_one_item() {
        let mut late = ShareOfPass::until(Instant::now() - Duration::from_secs(1));
        assert!(!late.is_up(), "nothing acted on yet: one item is allowed");
        late.act();
        assert!(late.is_up());
        let mut early = ShareOfPass::until(Instant::now() + Duration::from_secs(3600));
        early.act();
        assert!(!early.is_up());
    }

    #[test]
    fn rfc3339_round_trips_and_garbage_is_none() {
        let t = Millis(1_764_547_200_123);
        assert_eq!(Millis::parse_rfc3339(&t.to_rfc3339()), Some(t));
        assert_eq!(Millis::parse_rfc3339("yesterday"), None);
    }
}
