//! The nouns of the photo and reconstruction products that other issues fill in with
//! behaviour: projects, datasets, images, photos and opted-out subjects.

use crate::clock::Millis;
use crate::ids::{DatasetId, ImageId, PhotoId, ProjectId, SubjectId, TenantId};
use serde::{Deserialize, Serialize};

/// A project: scope of datasets, photos, subjects and privacy settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Project {
    /// Id.
    pub id: ProjectId,
    /// Owner.
    pub tenant: TenantId,
    /// Human name.
    pub name: String,
    /// Cosine similarity at or above which a face is taken to be an opted-out subject.
    /// `None` means *fail closed*: every face is blurred and no match is recorded.
    pub match_threshold: Option<f32>,
    /// Created.
    pub created_at: Millis,
}

/// A named set of images to reconstruct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    /// Id.
    pub id: DatasetId,
    /// Project.
    pub project: ProjectId,
    /// Human name.
    pub name: String,
    /// Created.
    pub created_at: Millis,
}

/// One image of a dataset, stored in the object store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Image {
    /// Id.
    pub id: ImageId,
    /// Dataset.
    pub dataset: DatasetId,
    /// Original file name.
    pub name: String,
    /// Object-store key of the bytes.
    pub key: String,
    /// SHA-256 of the bytes, hex.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

/// An uploaded photo and its publication state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Photo {
    /// Id.
    pub id: PhotoId,
    /// Project.
    pub project: ProjectId,
    /// Object-store key of the upload; never deleted by processing.
    pub upload_key: String,
    /// Bumped on every write of derived files and part of every derived key, so a key a
    /// row points at is never overwritten.
    pub variant_version: u64,
    /// Written last, after every file is stored; cleared by a final failure.
    pub published_at: Option<Millis>,
}

/// A person who asked not to be published in one project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    /// Id.
    pub id: SubjectId,
    /// The only project they are matched in.
    pub project: ProjectId,
    /// A label for people.
    pub label: String,
    /// Created.
    pub created_at: Millis,
}
