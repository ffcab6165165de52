//! The catalog: what a tenant may read into Tessera and from where. The rules here are the
//! tenancy boundary for bytes that do not arrive through an upload: an `s3_key` photo and
//! an `s3` dataset source read objects Tessera did not write, so who may name which
//! object is decided once, here, and every entry point (HTTP, CLI, Lambda) asks.

pub mod incoming;
pub mod source_grants;

use crate::error::{Classify, ErrorClass};
use crate::ports::state_store::StoreError;

/// Why a catalog request was refused.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The caller's tenant may not read what it named.
    #[error("{0}")]
    Forbidden(String),
    /// The request names something malformed.
    #[error("{0}")]
    Invalid(String),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Classify for CatalogError {
    fn class(&self) -> ErrorClass {
        match self {
            CatalogError::Forbidden(_) | CatalogError::Invalid(_) => ErrorClass::Permanent,
            CatalogError::Store(e) => e.class(),
        }
    }
}
