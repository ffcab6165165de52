//! The object store: immutable-by-convention blobs under slash-separated keys (S3, or a
//! folder in embedded mode).

use crate::error::{Classify, ErrorClass};
use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::Path;

/// What the store knows of one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// The key.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// An opaque tag that changes whenever the content changes (quoted as in HTTP).
    pub etag: String,
}

/// An object's bytes as they are read, a chunk at a time.
pub type ByteChunks = futures_util::stream::BoxStream<'static, Result<Bytes, ObjectStoreError>>;

/// A read that streams ([`ObjectStore::get_stream`]): nothing of the object is held
/// but the chunk on its way, so a slow reader costs one chunk, not the object.
pub struct ObjectStream {
    /// Bytes of the whole object.
    pub size: u64,
    /// The bytes asked for (the whole object, or the range).
    pub body: ByteChunks,
}

impl std::fmt::Debug for ObjectStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStream")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// Errors of the object store.
#[derive(Debug, thiserror::Error)]
pub enum ObjectStoreError {
    /// No object under that key.
    #[error("no object at key `{0}`")]
    NotFound(String),
    /// `put_if_absent` found an object already there.
    #[error("an object already exists at key `{0}`")]
    AlreadyExists(String),
    /// The key is not acceptable (empty, `..`, absolute, control characters, too long).
    #[error("invalid object key `{key}`: {why}")]
    InvalidKey {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A range outside the object.
    #[error("range {start}..{end} is outside object `{key}` of {size} bytes")]
    BadRange {
        /// Key.
        key: String,
        /// Requested start.
        start: u64,
        /// Requested end.
        end: u64,
        /// Actual size.
        size: u64,
    },
    /// The object is larger than the reader allows ([`ObjectStore::get_at_most`]).
    #[error("object `{key}` is {size} bytes, more than the {max} this read allows")]
    TooLarge {
        /// Key.
        key: String,
        /// Its size (at least `max + 1` where the store could not say more).
        size: u64,
        /// The most the reader would take.
        max: u64,
    },
    /// Reading or writing failed; retrying may help.
    #[error("object store I/O error on `{key}`: {source}")]
    Io {
        /// Key.
        key: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl Classify for ObjectStoreError {
    fn class(&self) -> ErrorClass {
        match self {
            ObjectStoreError::Io { .. } => ErrorClass::Transient,
            ObjectStoreError::NotFound(_) => ErrorClass::Poison,
            _ => ErrorClass::Permanent,
        }
    }
}

/// Check a key before it touches any store, so a hostile key fails the same way on S3
/// and on a folder: non-empty, at most 1024 bytes, relative, no empty, `.` or `..`
/// segments, no backslashes or control characters.
pub fn validate_key(key: &str) -> Result<(), ObjectStoreError> {
    let bad = |why| {
        Err(ObjectStoreError::InvalidKey {
            key: key.chars().take(200).collect(),
            why,
        })
    };
    if key.is_empty() {
        return bad("it is empty");
    }
    if key.len() > 1024 {
        return bad("it is longer than 1024 bytes");
    }
    if key.starts_with('/') {
        return bad("it starts with `/`; keys are relative");
    }
    if key.chars().any(|c| c.is_control() || c == '\\') {
        return bad("it contains a control character or a backslash");
    }
    for seg in key.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return bad("it has an empty, `.` or `..` segment");
        }
    }
    Ok(())
}

/// The object store port.
#[async_trait]
pub trait ObjectStore: Send + Sync + 'static {
    /// Store bytes under a key, replacing what was there. Readers see the old or the new
    /// object, never a mix.
    async fn put(&self, key: &str, bytes: Bytes) -> Result<ObjectMeta, ObjectStoreError>;

    /// Store bytes only if nothing is stored under the key yet.
    async fn put_if_absent(&self, key: &str, bytes: Bytes) -> Result<ObjectMeta, ObjectStoreError>;

    /// Store a file's content without holding it all in memory.
    async fn put_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError>;

    /// Read a whole object.
    async fn get(&self, key: &str) -> Result<Bytes, ObjectStoreError>;

    /// Read a whole object only if it is at most `max` bytes, in one request: a size
    /// checked by [`Self::head`] and then a [`Self::get`] can read an object replaced in
    /// between, however large. Never holds more than `max` bytes of it and one chunk
    /// of what the store sends.
    async fn get_at_most(&self, key: &str, max: u64) -> Result<Bytes, ObjectStoreError>;

    /// Read an object, or `range` of it, as a stream of chunks (pulled as the reader
    /// takes them). A range must lie within the object ([`ObjectStoreError::BadRange`]).
    async fn get_stream(
        &self,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<ObjectStream, ObjectStoreError>;

    /// Read `range` of an object.
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, ObjectStoreError>;

    /// Copy an object into a local file (atomically: the file appears complete or not at all).
    async fn get_to_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError>;

    /// The object's metadata, or `None` if absent.
    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>, ObjectStoreError>;

    /// Remove an object; removing a missing one is not an error.
    async fn delete(&self, key: &str) -> Result<(), ObjectStoreError>;

    /// A URL that lets its holder PUT `key` straight into the store for `expires` (an
    /// upload that never passes through the API), if this store can hand one out: S3
    /// can, a folder cannot (`None`).
    async fn presigned_put(
        &self,
        key: &str,
        content_type: &str,
        expires: std::time::Duration,
    ) -> Result<Option<String>, ObjectStoreError> {
        let _ = (key, content_type, expires);
        Ok(None)
    }

    /// A URL that lets its holder GET `key` for `expires`, if this store can hand one out.
    async fn presigned_get(
        &self,
        key: &str,
        expires: std::time::Duration,
    ) -> Result<Option<String>, ObjectStoreError> {
        let _ = (key, expires);
        Ok(None)
    }

    /// Keys under a prefix in lexical order, a page at a time: pass the returned cursor
    /// as `after` for the next page.
    async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<ObjectMeta>, Option<String>), ObjectStoreError>;
}

#[cfg(test)]
mod tests {
    use super::validate_key;

    #[test]
    fn hostile_keys_are_rejected() {
        for k in [
            "",
            "/etc/passwd",
            "a/../b",
            "a//b",
            "./a",
            "a/.",
            "a\\b",
            "a\nb",
            "a\0b",
        ] {
            assert!(validate_key(k).is_err(), "{k:?} should be rejected");
        }
        assert!(validate_key(&"x".repeat(1025)).is_err());
        for k in ["a", "photos/01H/v3/public.jpg", "a b/ü.png", "x..y"] {
            assert!(validate_key(k).is_ok(), "{k:?} should be accepted");
        }
    }
}
