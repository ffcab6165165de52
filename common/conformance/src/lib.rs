//! The conformance suites.
//!
//! The ports': written once against the traits in `tessera_core::ports`; every adapter
//! set (the embedded one here, the AWS one against a local AWS-compatible server) runs it
//! unchanged. Each function panics with a message naming the broken rule.
//!
//! sfmapi's event schema ([`sfmapi_event`]): what every event Tessera sends must satisfy,
//! checked by the tests of each way out.

mod event_log;
pub mod moto;
mod object_store;
pub mod observed;
mod queue;
pub mod sfmapi_event;
mod state_store;

pub use event_log::event_log;
pub use object_store::object_store;
pub use queue::queue;
pub use state_store::state_store;

use bytes::Bytes;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tessera_core::event::EventKind;
use tessera_core::ids::{JobId, TaskId};
use tessera_core::ports::event_log::{EventLog, EventLogError, Fence};
use tessera_core::ports::object_store::{ObjectStore, ObjectStoreError};
use tessera_core::ports::queue::{Queue, QueueError, QueueSettings};
use tessera_core::ports::state_store::{
    Condition, Index, Item, ItemKey, Query, StateStore, StoreError, Write,
};
use tessera_core::records;

fn unique(prefix: &str) -> String {
    format!("{prefix}{}", ulid_like())
}

fn ulid_like() -> String {
    TaskId::new().to_string()
}
