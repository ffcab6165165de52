//! A real object store with a test's hooks around it: to count what leaves it, or to
//! make an interleaving certain (another request's write at the moment a read answers,
//! say). Every call goes to the real store; the hooks only watch or act beside it.

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use tessera_core::ports::object_store::{ObjectMeta, ObjectStore, ObjectStoreError, ObjectStream};

/// What a test does beside the store's calls. Every method does nothing unless the
/// test says otherwise.
#[async_trait]
pub trait Hooks: Send + Sync + 'static {
    /// `bytes` of `key` were handed to the caller (a stream's chunks as it takes them).
    fn read(&self, key: &str, bytes: u64) {
        let _ = (key, bytes);
    }
    /// A look at `key` (a read of any kind, or a HEAD) has answered, before the caller
    /// sees the answer.
    async fn looked(&self, key: &str) {
        let _ = key;
    }
    /// `key` is about to be deleted.
    async fn deleting(&self, key: &str) {
        let _ = key;
    }
    /// Whether the deletion of `key` fails (an outage, a process killed before its
    /// request left): the fault is injected here and the real store is not called.
    fn deletion_fails(&self, key: &str) -> bool {
        let _ = key;
        false
    }
}

/// `inner` with `hooks` around it.
pub struct Observed<H> {
    /// The real store.
    pub inner: Arc<dyn ObjectStore>,
    /// The test's hooks.
    pub hooks: Arc<H>,
}

impl<H: Hooks> Observed<H> {
    /// `inner` observed by `hooks`.
    pub fn new(inner: Arc<dyn ObjectStore>, hooks: Arc<H>) -> Self {
        Observed { inner, hooks }
    }

    async fn answered(
        &self,
        key: &str,
        r: Result<Bytes, ObjectStoreError>,
    ) -> Result<Bytes, ObjectStoreError> {
        if let Ok(b) = &r {
            self.hooks.read(key, b.len() as u64);
        }
        self.hooks.looked(key).await;
        r
    }
}

#[async_trait]
impl<H: Hooks> ObjectStore for Observed<H> {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<ObjectMeta, ObjectStoreError> {
        self.inner.put(key, bytes).await
    }
    async fn put_if_absent(&self, key: &str, bytes: Bytes) -> Result<ObjectMeta, ObjectStoreError> {
        self.inner.put_if_absent(key, bytes).await
    }
    async fn put_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError> {
        self.inner.put_file(key, path).await
    }
    async fn get(&self, key: &str) -> Result<Bytes, ObjectStoreError> {
        let r = self.inner.get(key).await;
        self.answered(key, r).await
    }
    async fn get_at_most(&self, key: &str, max: u64) -> Result<Bytes, ObjectStoreError> {
        let r = self.inner.get_at_most(key, max).await;
        self.answered(key, r).await
    }
    async fn get_stream(
        &self,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<ObjectStream, ObjectStoreError> {
        let r = self.inner.get_stream(key, range).await;
        self.hooks.looked(key).await;
        let s = r?;
        let (hooks, k) = (self.hooks.clone(), key.to_string());
        Ok(ObjectStream {
            size: s.size,
            body: Box::pin(s.body.inspect(move |c| {
                if let Ok(c) = c {
                    hooks.read(&k, c.len() as u64);
                }
            })),
        })
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, ObjectStoreError> {
        let r = self.inner.get_range(key, range).await;
        self.answered(key, r).await
    }
    async fn get_to_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError> {
        let r = self.inner.get_to_file(key, path).await;
        if let Ok(m) = &r {
            self.hooks.read(key, m.size);
        }
        self.hooks.looked(key).await;
        r
    }
    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>, ObjectStoreError> {
        let r = self.inner.head(key).await;
        self.hooks.looked(key).await;
        r
    }
    async fn delete(&self, key: &str) -> Result<(), ObjectStoreError> {
        self.hooks.deleting(key).await;
        if self.hooks.deletion_fails(key) {
            return Err(ObjectStoreError::Io {
                key: key.to_string(),
                source: std::io::Error::other("deletion refused by the test"),
            });
        }
        self.inner.delete(key).await
    }
    async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<ObjectMeta>, Option<String>), ObjectStoreError> {
        self.inner.list(prefix, after, limit).await
    }
}
