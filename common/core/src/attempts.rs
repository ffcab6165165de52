//! How many times a task is tried, and how long it waits between tries, by kind.
//!
//! One table, read when a task is planned (its attempt ceiling is stored with it, so a
//! change of policy never rewrites tasks already submitted) and when a try fails
//! transiently (the back-off). A two-second photo step and an hour-long mapping stage
//! fail for different reasons and cost different amounts to repeat, so they do not
//! share one ceiling. docs/architecture.md's "Attempt policies" table states the same rows; a
//! test keeps the two equal.

use std::time::Duration;

/// The retry rule for the task kinds that start with [`AttemptPolicy::kinds`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptPolicy {
    /// Prefix of the task kinds this row covers; the empty prefix is the fallback.
    pub kinds: &'static str,
    /// Claims at most, retries included; the try after the last one is not made and
    /// the task is dead with the reason.
    pub max_attempts: u32,
    /// Back-off before the second try (before jitter); it doubles with each try.
    pub first_backoff: Duration,
    /// No back-off is longer than this.
    pub longest_backoff: Duration,
    /// Why these numbers, for docs/architecture.md and for whoever changes them.
    pub why: &'static str,
}

/// The policies, most specific first; the last row (empty prefix) matches every kind.
pub const ATTEMPT_POLICIES: &[AttemptPolicy] = &[
    AttemptPolicy {
        kinds: "photo.reblur",
        max_attempts: 10,
        first_backoff: Duration::from_secs(2),
        longest_backoff: Duration::from_secs(60),
        why: "a re-blur sweep part walks a whole project and checkpoints as it goes: a \
              crash (which counts as a try) loses only the photos since its checkpoint, \
              and a dead sweep would leave every photo after it undecided",
    },
    AttemptPolicy {
        kinds: "photo.",
        max_attempts: 3,
        first_backoff: Duration::from_secs(2),
        longest_backoff: Duration::from_secs(60),
        why: "seconds of work on one photo; three tries, as the photo worker's rules say, \
              then the photo stays unpublished with the reason",
    },
    AttemptPolicy {
        kinds: "notify.",
        max_attempts: 40,
        first_backoff: Duration::from_secs(10),
        longest_backoff: Duration::from_secs(60 * 60),
        why: "a webhook delivery to a receiver that may be down for hours: retried for \
              about a day (16 to 31 hours with jitter), then dead with the last answer",
    },
    AttemptPolicy {
        kinds: "sfm.",
        max_attempts: 4,
        first_backoff: Duration::from_secs(10),
        longest_backoff: Duration::from_secs(10 * 60),
        why: "minutes to hours per stage, resumed from checkpoints; an out-of-memory try \
              moves to a bigger class at once, and a lost GPU host or a throttled Batch \
              queue gets up to ten minutes to recover",
    },
    AttemptPolicy {
        kinds: "",
        max_attempts: 5,
        first_backoff: Duration::from_secs(1),
        longest_backoff: Duration::from_secs(5 * 60),
        why: "any other kind (demo, bench): short work that a retry is cheap for",
    },
];

/// The policy for task kind `kind`: the first row whose prefix it starts with.
pub fn attempt_policy(kind: &str) -> &'static AttemptPolicy {
    ATTEMPT_POLICIES
        .iter()
        .find(|p| kind.starts_with(p.kinds))
        .unwrap_or(&ATTEMPT_POLICIES[ATTEMPT_POLICIES.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn photo_jobs_get_three_tries_and_stages_their_own() {
        assert_eq!(attempt_policy("photo.face_process").max_attempts, 3);
        assert_eq!(attempt_policy("photo.reprocess").max_attempts, 3);
        assert_eq!(attempt_policy("photo.reblur").max_attempts, 10);
        assert_eq!(attempt_policy("sfm.map").max_attempts, 4);
        assert_eq!(attempt_policy("sfm.refined_export").max_attempts, 4);
        assert_eq!(attempt_policy("demo").max_attempts, 5);
        assert!(
            attempt_policy("sfm.map").first_backoff > attempt_policy("photo.ingest").first_backoff
        );
    }

    #[test]
    fn the_fallback_is_last_and_every_row_is_reachable() {
        assert_eq!(ATTEMPT_POLICIES.last().unwrap().kinds, "");
        for (i, p) in ATTEMPT_POLICIES.iter().enumerate() {
            assert!(p.max_attempts >= 1);
            assert!(p.first_backoff <= p.longest_backoff);
            assert_eq!(
                attempt_policy(&format!("{}x", p.kinds)),
                &ATTEMPT_POLICIES[i]
            );
        }
    }

    /// docs/architecture.md states the table; a row changed here and not there fails.
    #[test]
    fn the_architecture_doc_states_the_same_table() {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo");
        let readme =
            std::fs::read_to_string(std::path::Path::new(&dir).join("../../docs/architecture.md"))
                .expect("docs/architecture.md");
        for p in ATTEMPT_POLICIES {
            let kinds = if p.kinds.is_empty() {
                "any other".to_string()
            } else {
                format!("`{}*`", p.kinds)
            };
            let row = format!(
                "| {kinds} | {} | {} | {} |",
                p.max_attempts,
                human(p.first_backoff),
                human(p.longest_backoff)
            );
            assert!(
                readme.contains(&row),
                "docs/architecture.md lacks the attempt policy row `{row}`"
            );
        }
    }

    fn human(d: Duration) -> String {
        let s = d.as_secs();
        if s >= 60 && s.is_multiple_of(60) {
            format!("{} min", s / 60)
        } else {
            format!("{s} s")
        }
    }
}
