//! Tessera's domain model and ports.
//!
//! Everything that is a *rule* of the system and does not depend on where it runs lives
//! here: typed ids, tasks and jobs with their states, progress events, job specs with
//! validation and fingerprints, error classes, and the traits (ports) that the embedded
//! and AWS adapters implement. Nothing in this crate knows SQLite, S3 or DynamoDB.
#![deny(missing_docs)]

pub mod attempts;
pub mod audit;
pub mod camera;
pub mod catalog;
pub mod clock;
pub mod clusters;
pub mod crs;
pub mod domain;
pub mod embeddings;
pub mod error;
pub mod event;
pub mod gcp;
pub mod geodesy;
pub mod geometry;
pub mod ids;
pub mod job;
pub mod notify;
pub mod photo;
pub mod ports;
pub mod privacy;
pub mod privacy_view;
pub mod projects;
pub mod records;
pub mod spec;
pub mod task;
pub mod testing;
pub mod weakening;

pub use clock::Millis;
pub use error::{Classify, ErrorClass};
pub use ids::{
    ClusterId, DatasetId, ImageId, JobId, PhotoId, ProjectId, SubjectId, TaskId, TenantId,
    WebhookId,
};
