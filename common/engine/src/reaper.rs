//! The reaper: the safety net under at-least-once delivery.
//!
//! - A running task whose lease expired belonged to a worker presumed dead: it goes back
//!   to queued (that attempt counts), or to dead on its final attempt. Heartbeats renew
//!   the lease without touching the due index, so a running task's entry says when its
//!   lease *was* due; one found due with its lease still held is moved to the lease's
//!   expiry, once a pass instead of once a heartbeat.
//! - A queued task that has been due for longer than the grace period may have lost its
//!   message (a crash between a commit and a send): it is offered again. Duplicates are
//!   harmless; only one claim can win. It may also only be waiting behind a backlog, so
//!   each re-offer doubles the wait before the next (`lifecycle::reoffered`).
//! - A succeeded task with dependents not yet told (a crash inside a large fan-out)
//!   finishes advancing.
//! - Expired uploads and blobs are collected (`tessera_core::catalog::uploads`).
//!
//! Scheduled by EventBridge on AWS; a loop beside each local worker.
//!
//! A pass is bounded in time as well as in count ([`ReapBudget`]): under a burst, tens
//! of thousands of entries can be due at once (every queued task behind a backlog, each
//! shard of each kind), and a pass that tried them all would outrun its function's
//! timeout and be killed half-way, every minute. Each kind may work until its share of
//! the budget ([`SHARES`]): dead workers' leases first, so a flood of re-offers cannot
//! starve them, but each later kind keeps a slice of its own. The partitions are
//! visited from a starting shard that turns with the clock, so a pass cut short does
//! not always leave the same shards for last.

use crate::{Engine, EngineError};
use serde::Serialize;
use std::time::{Duration, Instant};
use tessera_core::Millis;
use tessera_core::clock::ShareOfPass;
use tessera_core::ports::state_store::{Condition, Index, Query, StoreError};
use tessera_core::records;
use tessera_core::task::TaskState;

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReapReport {
    /// Expired leases put back in line.
    pub requeued: usize,
    /// Expired leases on the final attempt, now dead.
    pub dead: usize,
    /// Running tasks whose lease is still held, whose due-index entry was moved to the
    /// lease's expiry.
    pub reindexed: usize,
    /// Queued tasks offered again.
    pub reoffered: usize,
    /// Dependents advanced for crashed fan-outs.
    pub advanced: usize,
    /// Expired uploads (with their chunks), upload records and blobs removed.
    pub collected: usize,
    /// Due entries whose task record could not be read, skipped.
    pub unreadable: usize,
    /// Tasks whose release, offer or advance failed this pass, skipped (retried next).
    pub failed: usize,
    /// The pass stopped at its time budget before it had read every due partition, so
    /// entries may be left for the next pass.
    pub cut_short: bool,
}

/// How much one reaper pass may do.
#[derive(Debug, Clone, Copy)]
pub struct ReapBudget {
    /// Entries read from each due partition (one page: a bound on memory and reads).
    pub per_partition: usize,
    /// When the pass started.
    pub start: Instant,
    /// How long it may go on starting work; work in flight finishes after it.
    pub time: Duration,
}

impl ReapBudget {
    /// A pass that may start work for `time`.
    pub fn within(per_partition: usize, time: Duration) -> Self {
        ReapBudget {
            per_partition,
            start: Instant::now(),
            time,
        }
    }

    /// When the kind that may work until `share` of the budget must stop starting work.
    fn until(&self, share: f64) -> Instant {
        self.start + self.time.mul_f64(share)
    }
}

/// The share of a pass's time budget by which each kind of work must stop, in the order
/// a pass does them: expired leases (dead workers' tasks), lost messages, unfinished
/// fan-outs, then expired uploads and blobs. A kind that finishes early leaves its time
/// to the kinds after it; none starts work in the time of those after it, except its
/// first entry of the pass (each kind acts on at least one, [`ShareOfPass`]), and work in
/// flight at its deadline finishes.
pub const SHARES: [(&str, f64); 4] = [
    ("running", 0.5),
    ("queued", 0.75),
    ("advance", 0.9),
    ("expiry", 1.0),
];

fn share(kind: &str) -> f64 {
    SHARES
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(1.0, |(_, s)| *s)
}

impl Engine {
    /// One pass over what is due at `now`, at most `limit` items of each due partition,
    /// with no time budget (a test's or a tool's pass).
    pub async fn reap_once(&self, now: Millis, limit: usize) -> Result<ReapReport, EngineError> {
        self.reap(now, ReapBudget::within(limit, Duration::from_secs(86_400)))
            .await
    }

    /// One pass over what is due at `now`, within `budget`.
    pub async fn reap(&self, now: Millis, budget: ReapBudget) -> Result<ReapReport, EngineError> {
        let mut report = ReapReport::default();
        let limit = budget.per_partition;
        let grace_cutoff = Millis(now.0 - self.config.reoffer_grace.as_millis() as i64);
        for (kind, due_by) in [
            (DueKind::Running, now),
            (DueKind::Queued, grace_cutoff),
            (DueKind::Advance, grace_cutoff),
        ] {
            self.reap_kind(kind, due_by, now, &budget, &mut report)
                .await;
        }

        // Collection is housekeeping: a failure is logged and retried next pass, never a
        // reason to leave dead workers' tasks unreaped.
        // It collects at least one item however late it starts, as the kinds above act
        // on at least one entry each.
        {
            let until = budget.until(share(tessera_core::catalog::EXPIRY));
            match tessera_core::catalog::collect::collect_expired_until(
                self.ports.store.as_ref(),
                self.ports.objects.as_ref(),
                now,
                limit,
                until,
            )
            .await
            {
                Ok(c) => {
                    report.collected =
                        c.uploads + c.records + c.blobs + c.erasures + c.originals + c.refusals;
                    report.cut_short |= c.cut_short;
                    if c.failed > 0 {
                        tracing::warn!(failed = c.failed, last_error = ?c.last_error, "some expired items could not be collected; retried in an hour");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "collecting expired uploads failed"),
            }
        }
        if report.cut_short {
            tracing::warn!(
                ?report,
                budget_ms = budget.time.as_millis() as u64,
                "reaper pass cut short by its time budget; the next pass goes on"
            );
        }
        Ok(report)
    }
}

/// The kinds of due-index entry a pass walks, in its order.
#[derive(Debug, Clone, Copy)]
enum DueKind {
    /// Running tasks: leases of workers presumed dead.
    Running,
    /// Queued tasks past the grace period: messages maybe lost.
    Queued,
    /// Ended tasks whose dependents are not all told: fan-outs cut by a crash.
    Advance,
}

impl DueKind {
    /// The state its entries are indexed under (and its share's name in [`SHARES`]).
    fn name(self) -> &'static str {
        match self {
            DueKind::Running => "running",
            DueKind::Queued => "queued",
            DueKind::Advance => "advance",
        }
    }
}

impl Engine {
    /// Walk `kind`'s due partitions (from the turning start shard), acting on each task
    /// due by `due_by`, until the kind's share of the budget is up.
    async fn reap_kind(
        &self,
        kind: DueKind,
        due_by: Millis,
        now: Millis,
        budget: &ReapBudget,
        report: &mut ReapReport,
    ) {
        let limit = budget.per_partition;
        let mut time = ShareOfPass::until(budget.until(share(kind.name())));
        'partitions: for partition in records::due_partitions_turned(kind.name(), now) {
            if time.is_up() {
                report.cut_short = true;
                break;
            }
            let mut q = Query::partition(Index::ByDue, partition, limit);
            q.sk_max = Some(format!("{}#~", due_by.sort_key()));
            for (item_rev, task) in self.due_tasks(q, limit, report).await {
                if time.is_up() {
                    report.cut_short = true;
                    break 'partitions;
                }
                time.act();
                match kind {
                    DueKind::Running => self.reap_lease(&task, item_rev, now, report).await,
                    DueKind::Queued => {
                        self.reoffer_lost(&task, item_rev, due_by, now, report)
                            .await
                    }
                    DueKind::Advance => match self.advance(task.id).await {
                        Ok(n) => report.advanced += n,
                        Err(e) => skipped(&task, "advance its dependents", &e, report),
                    },
                }
            }
        }
    }

    /// A running task found due: released when its lease expired, else its entry moved
    /// to the lease's expiry.
    async fn reap_lease(
        &self,
        task: &tessera_core::task::Task,
        item_rev: u64,
        now: Millis,
        report: &mut ReapReport,
    ) {
        if task.state != TaskState::Running {
            return;
        }
        let expired = task.lease.as_ref().is_none_or(|l| l.expires_at <= now);
        if !expired {
            // Heartbeats renew the lease without moving the index entry (the claim put
            // it at the first expiry): move it to the lease's expiry now, one index
            // write per task per reaper pass instead of one per heartbeat. A heartbeat
            // landing meanwhile wins; the next pass moves it then.
            let _ = self
                .ports
                .store
                .put(records::task_item(task), Condition::Rev(item_rev))
                .await;
            report.reindexed += 1;
            return;
        }
        match self.release(task, now).await {
            Ok(Released::Requeued) => report.requeued += 1,
            Ok(Released::Dead) => report.dead += 1,
            Ok(Released::Raced) => {}
            Err(e) => skipped(task, "release its lease", &e, report),
        }
    }

    /// A queued task found due past the grace period (`grace_cutoff`): offered again.
    async fn reoffer_lost(
        &self,
        task: &tessera_core::task::Task,
        item_rev: u64,
        grace_cutoff: Millis,
        now: Millis,
        report: &mut ReapReport,
    ) {
        // Read again after the (eventually consistent) index: a task another pass
        // re-offered a moment ago is no longer due.
        let due = task.due_at().is_some_and(|d| d <= grace_cutoff);
        if task.state == TaskState::Queued && due {
            match self.reoffer(task, item_rev, now).await {
                Ok(true) => report.reoffered += 1,
                Ok(false) => {}
                Err(e) => skipped(task, "offer it again", &e, report),
            }
        }
    }
}

/// Pages a due partition reads at most in one pass: past up to this many pages' worth of
/// unreadable entries, which stay where they are and would otherwise fill every page.
const MAX_DUE_PAGES: usize = 10;

impl Engine {
    /// Up to `limit` readable tasks (with their items' revisions) that a due query finds,
    /// paging past unreadable entries (at most [`MAX_DUE_PAGES`] pages). A query that
    /// fails ends this partition for the pass (logged, counted in `failed`), not the
    /// pass: the kinds and partitions after it, and collection, still get their turn.
    async fn due_tasks(
        &self,
        mut q: Query,
        limit: usize,
        report: &mut ReapReport,
    ) -> Vec<(u64, tessera_core::task::Task)> {
        let mut out = Vec::new();
        for _ in 0..MAX_DUE_PAGES {
            let page = match self.ports.store.query(&q).await {
                Ok(page) => page,
                Err(e) => {
                    report.failed += 1;
                    tracing::warn!(partition = %q.pk, error = %e, "the reaper could not read a due partition; retried next pass");
                    break;
                }
            };
            for item in &page.items {
                if let Some(task) = readable(item, report) {
                    out.push((item.rev, task));
                }
            }
            match page.next {
                Some(next) if out.len() < limit => q.after = Some(next),
                _ => break,
            }
        }
        out
    }
}

/// The task a due entry points at, or `None` (counted, logged with its key, and raised
/// as a metric) when its record cannot be read.
fn readable(
    item: &tessera_core::ports::state_store::Item,
    report: &mut ReapReport,
) -> Option<tessera_core::task::Task> {
    match records::task_from(item) {
        Ok(t) => Some(t),
        Err(e) => {
            report.unreadable += 1;
            tracing::error!(pk = %item.key.pk, sk = %item.key.sk, error = %e, "due entry's record unreadable; skipped by the reaper");
            crate::outcomes::unreadable(&item.key.pk);
            None
        }
    }
}

/// One task the reaper could not act on this pass: counted and logged; the next pass
/// tries again.
fn skipped(task: &tessera_core::task::Task, what: &str, e: &EngineError, report: &mut ReapReport) {
    report.failed += 1;
    tracing::warn!(task_id = %task.id, job_id = %task.job_id, epoch = task.epoch, error = %e, "the reaper could not {what}; retried next pass");
}

impl Engine {
    /// Put back in line the running tasks of `job` whose lease holder `is_dead` says is
    /// gone, without waiting for the lease to lapse. Embedded mode knows its own
    /// workers: a holder on this host whose process no longer exists is dead for sure.
    pub async fn release_dead_leases(
        &self,
        job: tessera_core::JobId,
        is_dead: impl Fn(&str) -> bool,
    ) -> Result<usize, EngineError> {
        let mut released = 0;
        for task in self.job_tasks(job).await? {
            let Some(lease) = task
                .lease
                .as_ref()
                .filter(|_| task.state == TaskState::Running)
            else {
                continue;
            };
            if !is_dead(&lease.owner) {
                continue;
            }
            if self.release(&task, Millis::now()).await? != Released::Raced {
                released += 1;
                tracing::info!(task_id = %task.id, job_id = %job, owner = %lease.owner, "lease of a dead local worker released");
            }
        }
        Ok(released)
    }
}

/// What releasing one lease did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Released {
    /// Back in line, that attempt counted.
    Requeued,
    /// It was the final attempt.
    Dead,
    /// Someone changed the task first; nothing was written.
    Raced,
}

impl Engine {
    /// Offer queued `task` (read at `item_rev`) again, then record the re-offer so the
    /// next pass leaves it alone for longer. `false` when the task changed meanwhile (a
    /// claim took it): the message sent is a duplicate the claim makes harmless.
    async fn reoffer(
        &self,
        task: &tessera_core::task::Task,
        item_rev: u64,
        now: Millis,
    ) -> Result<bool, EngineError> {
        let next = crate::lifecycle::reoffered(task, now, self.config.reoffer_grace);
        // Send first: a send that fails leaves the task due, so the next pass tries
        // again; a put that then loses to a claim has only added a harmless duplicate.
        self.offer(&next, Duration::ZERO).await?;
        match self
            .ports
            .store
            .put(records::task_item(&next), Condition::Rev(item_rev))
            .await
        {
            Ok(()) => {}
            Err(StoreError::Conflict { .. }) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        tracing::info!(task_id = %task.id, job_id = %task.job_id, times = next.reoffered.map_or(0, |r| r.times), "queued task offered again");
        Ok(true)
    }

    /// Take a running task's lease away from a worker presumed dead: queued again with
    /// that attempt counted (and offered), or dead on the final attempt.
    async fn release(
        &self,
        task: &tessera_core::task::Task,
        now: Millis,
    ) -> Result<Released, EngineError> {
        let back = crate::lifecycle::lapsed(task, now);
        if back.state == TaskState::Dead {
            let done = self.finish_dead(back, Condition::Rev(task.rev)).await?;
            return Ok(if done {
                Released::Dead
            } else {
                Released::Raced
            });
        }
        match self
            .ports
            .store
            .put(records::task_item(&back), Condition::Rev(task.rev))
            .await
        {
            Ok(()) => {
                tracing::info!(task_id = %task.id, job_id = %task.job_id, epoch = task.epoch, "expired lease re-offered");
                self.offer(&back, Duration::ZERO).await?;
                Ok(Released::Requeued)
            }
            Err(StoreError::Conflict { .. }) => Ok(Released::Raced),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_grow_in_pass_order_to_the_whole_budget() {
        assert!(SHARES.windows(2).all(|w| w[0].1 < w[1].1));
        assert_eq!(SHARES.last().map(|s| s.1), Some(1.0));
        assert_eq!(share(tessera_core::catalog::EXPIRY), 1.0);
        assert_eq!(share(TaskState::Running.as_str()), SHARES[0].1);
    }

    /// `share` falls back to the whole budget for a name it does not know, so a kind
    /// named apart from its share would quietly lose its slice.
    #[test]
    fn every_kind_a_pass_walks_has_its_share_in_order() {
        let kinds = [DueKind::Running, DueKind::Queued, DueKind::Advance];
        for (i, kind) in kinds.into_iter().enumerate() {
            assert_eq!(SHARES[i].0, kind.name(), "{kind:?}");
        }
        assert_eq!(DueKind::Running.name(), TaskState::Running.as_str());
        assert_eq!(DueKind::Queued.name(), TaskState::Queued.as_str());
    }
}
