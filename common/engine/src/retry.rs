//! Back-off for transient failures: exponential with full jitter, capped.

use std::time::Duration;

/// Exponential back-off with jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay before the second attempt (before jitter).
    pub base: Duration,
    /// No delay is longer than this.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// The back-off the attempt policy table gives task kind `kind`.
    pub fn for_kind(kind: &str) -> Self {
        let p = tessera_core::attempts::attempt_policy(kind);
        RetryPolicy {
            base: p.first_backoff,
            cap: p.longest_backoff,
        }
    }

    /// The delay after `attempt` (1-based) failed, with `jitter` in [0, 1) drawn by the
    /// caller: between half and all of `base · 2^(attempt−1)`, capped. Half-jitter keeps
    /// retries of many tasks that failed together apart without ever retrying at once.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let exp =
            self.base.as_millis() as f64 * 2f64.powi(attempt.saturating_sub(1).min(30) as i32);
        let full = exp.min(self.cap.as_millis() as f64);
        let jitter = jitter.clamp(0.0, 1.0);
        Duration::from_millis((full * (0.5 + 0.5 * jitter)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn delays_grow_are_jittered_and_capped(attempt in 1u32..60, j in 0.0f64..1.0) {
            let p = RetryPolicy { base: Duration::from_millis(100), cap: Duration::from_secs(10) };
            let d = p.delay(attempt, j);
            prop_assert!(d <= p.cap);
            let nominal = (100u128 << (attempt - 1).min(30)).min(10_000);
            prop_assert!(d.as_millis() * 2 >= nominal - 1);
            prop_assert!(d.as_millis() <= nominal);
        }
    }
}
