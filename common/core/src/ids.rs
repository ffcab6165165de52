//! Typed identifiers.
//!
//! Every id is a ULID: unique without coordination, and sortable by creation time, so a
//! listing ordered by id is ordered by age in every store.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The error for a string that is not a valid id of the expected kind.
#[derive(Debug, thiserror::Error)]
#[error(
    "`{value}` is not a valid {kind} id: expected a 26-character ULID such as 01J9Z8Q4M3W6T7V2X5Y8Z0A1B2"
)]
pub struct ParseIdError {
    /// Which kind of id was expected.
    pub kind: &'static str,
    /// What was given.
    pub value: String,
}

macro_rules! ulid_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub ulid::Ulid);

        impl $name {
            /// A fresh id.
            pub fn new() -> Self {
                Self(ulid::Ulid::new())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = ParseIdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                ulid::Ulid::from_string(s.trim())
                    .map(Self)
                    .map_err(|_| ParseIdError { kind: $kind, value: s.to_string() })
            }
        }
    };
}

ulid_id!(
    /// A job: one submitted unit of work (a reconstruction, a photo's processing, a demo).
    JobId, "job");
ulid_id!(
    /// A task: one stage of one job, the unit the engine claims and runs.
    TaskId, "task");
ulid_id!(
    /// A project: the scope of datasets, photos and opted-out subjects.
    ProjectId, "project");
ulid_id!(
    /// A dataset: a named set of images for reconstruction.
    DatasetId, "dataset");
ulid_id!(
    /// An image inside a dataset.
    ImageId, "image");
ulid_id!(
    /// An uploaded photo on its way to publication.
    PhotoId, "photo");
ulid_id!(
    /// A person who asked not to be published.
    SubjectId, "subject");
ulid_id!(
    /// One person as a project's photos show them: faces of several photos that look
    /// alike ([`crate::clusters`]).
    ClusterId, "cluster");
ulid_id!(
    /// A webhook: where a tenant's notices are delivered.
    WebhookId, "webhook");

/// A tenant: the owner of projects; every read and write is scoped to one.
///
/// Tenants are named by people (`acme`), so this is a validated slug rather than a ULID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

impl TenantId {
    /// The tenant used in embedded mode when none is named.
    pub fn local() -> Self {
        TenantId("local".into())
    }

    /// The tenant's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TenantId {
    type Error = ParseIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if ok {
            Ok(TenantId(s))
        } else {
            Err(ParseIdError {
                kind: "tenant",
                value: s,
            })
        }
    }
}

impl From<TenantId> for String {
    fn from(t: TenantId) -> String {
        t.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TenantId {
    type Err = ParseIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TenantId::try_from(s.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reject_garbage() {
        let id = JobId::new();
        assert_eq!(id.to_string().parse::<JobId>().unwrap(), id);
        let err = "not-a-ulid".parse::<JobId>().unwrap_err();
        assert!(err.to_string().contains("not a valid job id"));
    }

    #[test]
    fn tenant_names_are_slugs() {
        assert!("acme-01".parse::<TenantId>().is_ok());
        assert!("Acme".parse::<TenantId>().is_err());
        assert!("../etc".parse::<TenantId>().is_err());
        assert!("".parse::<TenantId>().is_err());
    }
}
