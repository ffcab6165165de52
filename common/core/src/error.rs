//! Error classes: what the engine does with a failure is decided by its class, never by
//! matching on message text.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a failure must be handled. Every error that can reach the engine is classified
/// before any retry decision is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Might succeed unchanged later (network blip, throttling, lock contention): retry
    /// with back-off.
    Transient,
    /// Ran out of memory or time: retry only in a larger resource class, never unchanged.
    Resource,
    /// Bad input or a request that can never succeed: fail now with a message a person can
    /// act on.
    Permanent,
    /// A message or task the system cannot even interpret (unparsable, unknown kind,
    /// missing upload): archive on the first try.
    Poison,
    /// Stopped on request.
    Cancelled,
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Resource => "resource",
            ErrorClass::Permanent => "permanent",
            ErrorClass::Poison => "poison",
            ErrorClass::Cancelled => "cancelled",
        })
    }
}

/// Implemented by every error type that can decide a retry.
pub trait Classify {
    /// The class of this error.
    fn class(&self) -> ErrorClass;
}
