//! `s3` dataset sources for the `api` function: images under a bucket prefix, registered
//! when the dataset is created. The function's role may read the stack's own bucket, so
//! what the role can read decides nothing: every list and read first asks the catalog
//! whether the calling tenant was granted that bucket folder.

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use std::sync::Arc;
use tessera_api::problem::Problem;
use tessera_api::sources::{
    ImageSource, MAX_SOURCE_FILE, MAX_SOURCE_FILES, SourceFile, is_image_name, s3_location,
};
use tessera_core::TenantId;
use tessera_core::catalog::source_grants;
use tessera_core::ports::StateStore;

/// Reads granted bucket folders through one S3 client.
pub struct S3Source {
    client: aws_sdk_s3::Client,
    /// The stack's own bucket, never a source.
    own_bucket: String,
    store: Arc<dyn StateStore>,
}

impl S3Source {
    /// A source on this client, refusing `own_bucket`, checking grants in `store`.
    pub fn new(
        client: aws_sdk_s3::Client,
        own_bucket: impl Into<String>,
        store: Arc<dyn StateStore>,
    ) -> Self {
        S3Source {
            client,
            own_bucket: own_bucket.into(),
            store,
        }
    }

    /// The source's bucket and prefix, if `tenant` may read them.
    async fn location(&self, tenant: &TenantId, spec: &Value) -> Result<(String, String), Problem> {
        let (bucket, prefix) = s3_location(spec)?;
        source_grants::authorize(
            self.store.as_ref(),
            &self.own_bucket,
            tenant,
            &bucket,
            &prefix,
        )
        .await?;
        Ok((bucket, prefix))
    }
}

fn refused(bucket: &str, e: impl std::fmt::Display) -> Problem {
    Problem::validation(format!(
        "bucket `{bucket}` cannot be read ({e}); check its name and that the api function may read it"
    ))
}

#[async_trait]
impl ImageSource for S3Source {
    fn kind(&self) -> &'static str {
        "s3"
    }

    async fn list(&self, tenant: &TenantId, spec: &Value) -> Result<Vec<SourceFile>, Problem> {
        let (bucket, prefix) = self.location(tenant, spec).await?;
        let mut files = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .list_objects_v2()
                .bucket(&bucket)
                .prefix(&prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| refused(&bucket, aws_sdk_s3::error::DisplayErrorContext(e)))?;
            for o in out.contents() {
                let key = o.key().unwrap_or_default();
                let Some(rel) = key.strip_prefix(prefix.as_str()) else {
                    continue;
                };
                if !rel.is_empty() && is_image_name(rel) {
                    files.push(SourceFile {
                        rel_path: rel.to_string(),
                        size: o.size().unwrap_or(0).max(0) as u64,
                    });
                }
            }
            if files.len() > MAX_SOURCE_FILES {
                break;
            }
            match out.next_continuation_token() {
                Some(t) if out.is_truncated().unwrap_or(false) => token = Some(t.to_string()),
                _ => break,
            }
        }
        files.sort_by(|a, b| a.rel_path.cmp(&b.rel_path));
        Ok(files)
    }

    async fn read(
        &self,
        tenant: &TenantId,
        spec: &Value,
        rel_path: &str,
    ) -> Result<Bytes, Problem> {
        let (bucket, prefix) = self.location(tenant, spec).await?;
        let key = format!("{prefix}{rel_path}");
        let out = self
            .client
            .get_object()
            .bucket(&bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| refused(&bucket, aws_sdk_s3::error::DisplayErrorContext(e)))?;
        // The size listed when the dataset was created may have changed since: check the
        // object actually returned before reading it.
        let size = out.content_length().unwrap_or(0).max(0) as u64;
        if size > MAX_SOURCE_FILE {
            return Err(Problem::validation(format!(
                "s3://{bucket}/{key} is {} MiB now, more than the {} MiB an image may be",
                size >> 20,
                MAX_SOURCE_FILE >> 20
            )));
        }
        let data = out
            .body
            .collect()
            .await
            .map_err(|e| Problem::unavailable(format!("reading s3://{bucket}/{key}: {e}")))?;
        Ok(data.into_bytes())
    }
}
