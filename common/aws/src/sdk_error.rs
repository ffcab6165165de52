//! What an AWS SDK error means for Tessera: the same classes as every other port error.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_types::error::display::DisplayErrorContext;

/// The kind of an SDK failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The request can never succeed as sent (validation, access denied, missing resource).
    Invalid,
    /// Throttling, a 5xx, a timeout, a connection failure: retrying may help.
    Transient,
}

/// The service's error code, if the service answered.
pub fn code<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> Option<&str> {
    match e {
        SdkError::ServiceError(s) => s.err().code(),
        _ => None,
    }
}

/// Classify an SDK error.
pub fn classify<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> Failure {
    match e {
        SdkError::ConstructionFailure(_) => Failure::Invalid,
        SdkError::ServiceError(s) => match s.err().code() {
            Some(
                "ThrottlingException"
                | "Throttling"
                | "ProvisionedThroughputExceededException"
                | "RequestLimitExceeded"
                | "InternalServerError"
                | "InternalError"
                | "ServiceUnavailable"
                | "SlowDown"
                | "RequestTimeout"
                | "TransactionInProgressException",
            ) => Failure::Transient,
            _ => Failure::Invalid,
        },
        _ => Failure::Transient,
    }
}

/// The error in one line: the service's code and message when it answered, else the
/// chain of causes (connection refused, timeout…).
pub fn describe<E, R>(e: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    match e {
        SdkError::ServiceError(s) => format!(
            "{}: {}",
            s.err().code().unwrap_or("error"),
            s.err().message().unwrap_or("(no message)")
        ),
        other => format!("{}", DisplayErrorContext(other)),
    }
}
