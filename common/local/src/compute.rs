//! Compute on this machine: the memory gate for admission, the process runner for work.

use crate::memory_gate::MemoryGate;
use crate::process;
use async_trait::async_trait;
use tessera_core::ports::compute::{
    Compute, ComputeError, ComputePermit, LineSink, ProcessReport, ProcessSpec, ResourceDemand,
};
use tokio_util::sync::CancellationToken;

/// Local compute: admission by measured memory, subprocesses in their own process group.
#[derive(Clone)]
pub struct LocalCompute {
    gate: MemoryGate,
}

impl LocalCompute {
    /// Compute behind `gate`.
    pub fn new(gate: MemoryGate) -> Self {
        LocalCompute { gate }
    }

    /// The gate.
    pub fn gate(&self) -> &MemoryGate {
        &self.gate
    }
}

#[async_trait]
impl Compute for LocalCompute {
    async fn admit(
        &self,
        demand: ResourceDemand,
        cancel: &CancellationToken,
    ) -> Result<ComputePermit, ComputeError> {
        // A class never asks more than this machine has: here the largest class is
        // the whole machine, so a demand over the gate's capacity waits for all of it
        // instead of failing as too large for a class no local retry could change.
        let bytes = demand.memory_bytes.min(self.gate.capacity());
        let permit = self.gate.admit(bytes, cancel).await?;
        Ok(ComputePermit::new(permit))
    }

    async fn run(
        &self,
        spec: ProcessSpec,
        cancel: &CancellationToken,
        lines: LineSink<'_>,
    ) -> Result<ProcessReport, ComputeError> {
        process::run(spec, cancel, lines).await
    }
}
