//! The memory gate: admits heavy work by measured free memory.
//!
//! Policy, in one place:
//! - A demand is admitted when it fits in `min(capacity − admitted, measured available −
//!   reserve)`. `admitted` counts demands still running, which may not have touched
//!   their memory yet; the measurement catches everything else on the machine.
//! - Waiters queue in arrival order. A waiter may pass the ones ahead of it only when
//!   none of them fits right now ("a small job passes a large one that could not start
//!   anyway"), and only while each of those has been passed fewer than `max_bypass`
//!   times. A waiter passed `max_bypass` times blocks everyone behind it until it fits,
//!   so neither the small nor the large can starve.

use crate::memory_ledger::MemoryLedger;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_core::ports::compute::ComputeError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Where the gate reads how much memory is free.
pub trait MemoryProbe: Send + Sync + 'static {
    /// Bytes available to new work now.
    fn available(&self) -> u64;
}

/// `MemAvailable` from `/proc/meminfo`: the kernel's estimate of memory that can be
/// given to new work without swapping.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcMeminfo;

impl ProcMeminfo {
    /// Parse a `/proc/meminfo` text.
    pub fn parse(text: &str) -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map(|kib| kib * 1024)
    }
}

impl MemoryProbe for ProcMeminfo {
    fn available(&self) -> u64 {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| Self::parse(&t))
            .unwrap_or(0)
    }
}

/// A probe that always reports the same figure: for machines whose free memory is
/// known by configuration, and for deterministic tests of the policy.
#[derive(Debug, Clone, Copy)]
pub struct FixedMemory(pub u64);

impl MemoryProbe for FixedMemory {
    fn available(&self) -> u64 {
        self.0
    }
}

struct Waiter {
    id: u64,
    demand: u64,
    bypassed: u32,
}

#[derive(Default)]
struct GateState {
    admitted: u64,
    waiters: VecDeque<Waiter>,
    next_id: u64,
}

struct Shared {
    state: Mutex<GateState>,
    changed: Notify,
    probe: Box<dyn MemoryProbe>,
    capacity: u64,
    reserve: u64,
    max_bypass: u32,
    /// Reservations shared with the other processes on the state directory, if any.
    ledger: std::sync::OnceLock<MemoryLedger>,
}

/// The gate. Cheap to clone; clones share the same budget.
#[derive(Clone)]
pub struct MemoryGate {
    shared: Arc<Shared>,
}

/// Capacity held by admitted work; dropping it releases the capacity (and the shared
/// reservation, whose renewal stops).
pub struct MemoryPermit {
    shared: Arc<Shared>,
    bytes: u64,
    reservation: Option<(i64, CancellationToken)>,
}

impl Drop for MemoryPermit {
    fn drop(&mut self) {
        if let Some((id, renewal)) = self.reservation.take() {
            renewal.cancel();
            if let Some(ledger) = self.shared.ledger.get()
                && let Err(e) = ledger.release(id)
            {
                // It lapses with its lease instead.
                tracing::warn!(reservation = id, error = %e, "could not release a memory reservation");
            }
        }
        let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        st.admitted = st.admitted.saturating_sub(self.bytes);
        drop(st);
        self.shared.changed.notify_waiters();
    }
}

impl std::fmt::Debug for MemoryPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryPermit({} bytes)", self.bytes)
    }
}

impl MemoryPermit {
    /// Bytes this permit holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A waiter's place in the queue, given up when it is dropped unadmitted.
struct Queued<'a> {
    shared: &'a Shared,
    id: Option<u64>,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.waiters.retain(|w| w.id != id);
            drop(st);
            self.shared.changed.notify_waiters();
        }
    }
}

/// How often a waiter re-reads the probe when nothing else wakes it (memory freed by
/// processes outside the gate).
const REPROBE: Duration = Duration::from_millis(250);

impl MemoryGate {
    /// A gate admitting at most `capacity` bytes at once, keeping `reserve` bytes of the
    /// measured free memory untouched, letting each waiter be passed at most
    /// `max_bypass` times.
    pub fn new(probe: impl MemoryProbe, capacity: u64, reserve: u64, max_bypass: u32) -> Self {
        MemoryGate {
            shared: Arc::new(Shared {
                state: Mutex::new(GateState::default()),
                changed: Notify::new(),
                probe: Box::new(probe),
                capacity,
                reserve,
                max_bypass,
                ledger: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Admit only what also fits in `ledger`'s reservations, shared with the other
    /// processes on the state directory, against this gate's capacity. Set once, before
    /// the first admission.
    pub fn share_through(&self, ledger: MemoryLedger) -> &Self {
        if self.shared.ledger.set(ledger).is_err() {
            tracing::warn!("the memory gate already shares a ledger; keeping the first");
        }
        self
    }

    /// A gate over this machine's memory: capacity is what is available now minus the
    /// reserve.
    pub fn for_this_machine(reserve: u64) -> Self {
        let avail = ProcMeminfo.available();
        MemoryGate::new(
            ProcMeminfo,
            avail.saturating_sub(reserve).max(1),
            reserve,
            8,
        )
    }

    /// Bytes currently admitted.
    pub fn admitted(&self) -> u64 {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admitted
    }

    /// The most one demand can ever be given.
    pub fn capacity(&self) -> u64 {
        self.shared.capacity
    }

    /// Wait until `bytes` may be admitted.
    pub async fn admit(
        &self,
        bytes: u64,
        cancel: &CancellationToken,
    ) -> Result<MemoryPermit, ComputeError> {
        let sh = &self.shared;
        if bytes > sh.capacity {
            return Err(ComputeError::TooLarge {
                needed: bytes,
                capacity: sh.capacity,
            });
        }
        let id = {
            let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
            let id = st.next_id;
            st.next_id += 1;
            st.waiters.push_back(Waiter {
                id,
                demand: bytes,
                bypassed: 0,
            });
            id
        };
        // Whoever stops waiting, by cancel or by dropping this future (a timeout around
        // it), leaves the queue: a waiter left behind would block everyone after it.
        let mut queued = Queued {
            shared: sh,
            id: Some(id),
        };
        loop {
            let notified = sh.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(reservation) = self.try_admit(id) {
                queued.id = None;
                sh.changed.notify_waiters();
                let reservation = reservation.map(|r| (r, self.renew_while_held(r)));
                return Ok(MemoryPermit {
                    shared: sh.clone(),
                    bytes,
                    reservation,
                });
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(REPROBE) => {}
                _ = cancel.cancelled() => return Err(ComputeError::Cancelled),
            }
        }
    }

    /// Renew reservation `id` every third of a lease until the returned token is
    /// cancelled (the permit dropped).
    fn renew_while_held(&self, id: i64) -> CancellationToken {
        let stop = CancellationToken::new();
        if let Some(ledger) = self.shared.ledger.get() {
            let (ledger, s) = (ledger.clone(), stop.clone());
            tokio::spawn(async move {
                let every = ledger.lease() / 3;
                loop {
                    tokio::select! {
                        _ = s.cancelled() => return,
                        _ = tokio::time::sleep(every) => {}
                    }
                    match ledger.renew(id) {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(
                                reservation = id,
                                "memory reservation lapsed while held"
                            );
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(reservation = id, error = %e, "could not renew a memory reservation")
                        }
                    }
                }
            });
        }
        stop
    }

    /// Admit waiter `id` if it may go now: `Some` with its shared reservation (when the
    /// gate shares a ledger), `None` to keep waiting.
    fn try_admit(&self, id: u64) -> Option<Option<i64>> {
        let sh = &self.shared;
        let free_measured = sh.probe.available().saturating_sub(sh.reserve);
        let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
        let free = sh.capacity.saturating_sub(st.admitted).min(free_measured);
        let pos = st.waiters.iter().position(|w| w.id == id)?;
        if st.waiters[pos].demand > free {
            return None;
        }
        let may_pass = st
            .waiters
            .iter()
            .take(pos)
            .all(|w| w.demand > free && w.bypassed < sh.max_bypass);
        if !may_pass {
            return None;
        }
        let reservation = match sh.ledger.get() {
            None => None,
            Some(ledger) => match ledger.try_reserve(st.waiters[pos].demand, sh.capacity) {
                Ok(Some(r)) => Some(r),
                // Another process holds the room: wait, re-reading every REPROBE.
                Ok(None) => return None,
                Err(e) => {
                    // Fail closed: admitting without the ledger could overcommit.
                    tracing::warn!(error = %e, "memory ledger unreadable; not admitting");
                    return None;
                }
            },
        };
        for w in st.waiters.iter_mut().take(pos) {
            w.bypassed += 1;
        }
        let me = st.waiters.remove(pos).expect("position was found");
        st.admitted += me.demand;
        Some(reservation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_is_parsed() {
        let t = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(ProcMeminfo::parse(t), Some(20_000_000 * 1024));
        assert_eq!(ProcMeminfo::parse("garbage"), None);
    }

    #[tokio::test]
    async fn a_demand_larger_than_capacity_is_refused_at_once() {
        let gate = MemoryGate::new(FixedMemory(10), 10, 0, 2);
        let err = gate.admit(11, &CancellationToken::new()).await.unwrap_err();
        assert!(matches!(
            err,
            ComputeError::TooLarge {
                needed: 11,
                capacity: 10
            }
        ));
    }

    #[tokio::test]
    async fn the_measured_reserve_is_respected() {
        // 100 measured, 30 reserved: 80 cannot start although capacity allows it.
        let gate = MemoryGate::new(FixedMemory(100), 1000, 30, 2);
        let cancel = CancellationToken::new();
        let waiting =
            tokio::time::timeout(Duration::from_millis(300), gate.admit(80, &cancel)).await;
        assert!(
            waiting.is_err(),
            "80 bytes must wait when only 70 are free above the reserve"
        );
        assert!(gate.admit(70, &cancel).await.is_ok());
    }
}
