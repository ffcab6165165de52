//! The object store on S3.
//!
//! Over 600 lines on purpose: one job, the port's operations on S3 one method each
//! (multipart puts, bounded and streamed reads, presigning, listing), which share the
//! error mapping and key checks here.
//!
//! Keys are checked with the port's [`validate_key`] before any request, so a hostile
//! key fails the same way here as on a folder. Files larger than [`MULTIPART_THRESHOLD`]
//! go up in parts, read from disk one part at a time; downloads stream to a temporary
//! file beside the target and are renamed into place. Put-if-absent is a conditional
//! `PutObject` with `If-None-Match: *`, which S3 (and moto) refuse with 412 when an
//! object exists.

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;
use tessera_core::ports::object_store::{
    ObjectMeta, ObjectStore, ObjectStoreError, ObjectStream, validate_key,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Files above this size are uploaded in parts.
pub const MULTIPART_THRESHOLD: u64 = 16 * 1024 * 1024;
/// Size of each part (S3's minimum is 5 MiB, its part count limit 10 000).
pub const PART_SIZE: u64 = 8 * 1024 * 1024;

/// The S3 object store on one bucket.
#[derive(Clone)]
pub struct S3ObjectStore {
    client: Client,
    bucket: String,
}

fn io(key: &str, what: impl std::fmt::Display) -> ObjectStoreError {
    ObjectStoreError::Io {
        key: key.to_string(),
        source: std::io::Error::other(what.to_string()),
    }
}

fn sdk<E>(key: &str, e: aws_sdk_s3::error::SdkError<E>) -> ObjectStoreError
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = e.raw_response().map(|r| r.status().as_u16());
    match (crate::sdk_error::code(&e), status) {
        (Some("NoSuchKey" | "NotFound"), _) | (_, Some(404)) => {
            ObjectStoreError::NotFound(key.to_string())
        }
        (Some("PreconditionFailed"), _) | (_, Some(412)) => {
            ObjectStoreError::AlreadyExists(key.to_string())
        }
        _ => io(key, crate::sdk_error::describe(&e)),
    }
}

impl S3ObjectStore {
    /// The store on `bucket`.
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        S3ObjectStore {
            client,
            bucket: bucket.into(),
        }
    }

    /// The S3 client (bucket notification setup in tests, presigning elsewhere).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Create the bucket if it does not exist (tests and local development).
    pub async fn ensure_bucket(&self) -> Result<(), ObjectStoreError> {
        if self
            .client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .is_ok()
        {
            return Ok(());
        }
        match self
            .client
            .create_bucket()
            .bucket(&self.bucket)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    crate::sdk_error::code(&e),
                    Some("BucketAlreadyOwnedByYou" | "BucketAlreadyExists")
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(io(&self.bucket, crate::sdk_error::describe(&e))),
        }
    }

    /// Send object-created notifications for keys under `prefix` to the SQS queue
    /// `queue_arn` (what the SAM template sets up; for local servers).
    pub async fn notify_queue(
        &self,
        prefix: &str,
        queue_arn: &str,
    ) -> Result<(), ObjectStoreError> {
        use aws_sdk_s3::types::{
            Event, FilterRule, FilterRuleName, NotificationConfiguration,
            NotificationConfigurationFilter, QueueConfiguration, S3KeyFilter,
        };
        let rule = FilterRule::builder()
            .name(FilterRuleName::Prefix)
            .value(prefix)
            .build();
        let queue = QueueConfiguration::builder()
            .queue_arn(queue_arn)
            .events(Event::from("s3:ObjectCreated:*"))
            .filter(
                NotificationConfigurationFilter::builder()
                    .key(S3KeyFilter::builder().filter_rules(rule).build())
                    .build(),
            )
            .build()
            .map_err(|e| io(&self.bucket, e))?;
        self.client
            .put_bucket_notification_configuration()
            .bucket(&self.bucket)
            .notification_configuration(
                NotificationConfiguration::builder()
                    .queue_configurations(queue)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| io(&self.bucket, crate::sdk_error::describe(&e)))?;
        Ok(())
    }

    /// A URL that lets its holder GET the object for `expires` (at most 7 days).
    pub async fn presign_get(
        &self,
        key: &str,
        expires: Duration,
    ) -> Result<String, ObjectStoreError> {
        validate_key(key)?;
        let cfg = PresigningConfig::expires_in(expires).map_err(|e| io(key, e))?;
        let req = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .presigned(cfg)
            .await
            .map_err(|e| sdk(key, e))?;
        Ok(req.uri().to_string())
    }

    /// A URL that lets its holder PUT the object (an upload straight to S3) for
    /// `expires`, with the content type it must send.
    pub async fn presign_put(
        &self,
        key: &str,
        content_type: &str,
        expires: Duration,
    ) -> Result<String, ObjectStoreError> {
        validate_key(key)?;
        let cfg = PresigningConfig::expires_in(expires).map_err(|e| io(key, e))?;
        let req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            // Signed: the URL can create the object once and never replace it.
            .if_none_match("*")
            .presigned(cfg)
            .await
            .map_err(|e| sdk(key, e))?;
        Ok(req.uri().to_string())
    }

    async fn put_multipart(
        &self,
        key: &str,
        path: &Path,
        size: u64,
    ) -> Result<ObjectMeta, ObjectStoreError> {
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk(key, e))?;
        let upload_id = created
            .upload_id()
            .ok_or_else(|| io(key, "S3 returned no upload id"))?
            .to_string();
        let result = self.upload_parts(key, path, &upload_id).await;
        match result {
            Ok(parts) => {
                let done = self
                    .client
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .multipart_upload(
                        CompletedMultipartUpload::builder()
                            .set_parts(Some(parts))
                            .build(),
                    )
                    .send()
                    .await
                    .map_err(|e| sdk(key, e))?;
                Ok(ObjectMeta {
                    key: key.to_string(),
                    size,
                    etag: done.e_tag().unwrap_or_default().to_string(),
                })
            }
            Err(e) => {
                // Parts of an abandoned upload are billed until aborted.
                let _ = self
                    .client
                    .abort_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .send()
                    .await;
                Err(e)
            }
        }
    }

    async fn upload_parts(
        &self,
        key: &str,
        path: &Path,
        upload_id: &str,
    ) -> Result<Vec<CompletedPart>, ObjectStoreError> {
        let mut file = tokio::fs::File::open(path).await.map_err(|e| io(key, e))?;
        let mut parts = Vec::new();
        for number in 1.. {
            let mut buf = Vec::with_capacity(PART_SIZE as usize);
            (&mut file)
                .take(PART_SIZE)
                .read_to_end(&mut buf)
                .await
                .map_err(|e| io(key, e))?;
            if buf.is_empty() {
                break;
            }
            let out = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(upload_id)
                .part_number(number)
                .body(ByteStream::from(buf))
                .send()
                .await
                .map_err(|e| sdk(key, e))?;
            parts.push(
                CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(out.e_tag().map(str::to_string))
                    .build(),
            );
        }
        Ok(parts)
    }

    async fn put_with(
        &self,
        key: &str,
        bytes: Bytes,
        if_absent: bool,
    ) -> Result<ObjectMeta, ObjectStoreError> {
        validate_key(key)?;
        let size = bytes.len() as u64;
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(ByteStream::from(bytes));
        if if_absent {
            req = req.if_none_match("*");
        }
        let out = req.send().await.map_err(|e| sdk(key, e))?;
        Ok(ObjectMeta {
            key: key.to_string(),
            size,
            etag: out.e_tag().unwrap_or_default().to_string(),
        })
    }
}

#[async_trait]
impl ObjectStore for S3ObjectStore {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<ObjectMeta, ObjectStoreError> {
        self.put_with(key, bytes, false).await
    }

    async fn put_if_absent(&self, key: &str, bytes: Bytes) -> Result<ObjectMeta, ObjectStoreError> {
        self.put_with(key, bytes, true).await
    }

    async fn put_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError> {
        validate_key(key)?;
        let size = tokio::fs::metadata(path)
            .await
            .map_err(|e| io(key, e))?
            .len();
        if size > MULTIPART_THRESHOLD {
            return self.put_multipart(key, path, size).await;
        }
        let body = ByteStream::from_path(path).await.map_err(|e| io(key, e))?;
        let out = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(body)
            .send()
            .await
            .map_err(|e| sdk(key, e))?;
        Ok(ObjectMeta {
            key: key.to_string(),
            size,
            etag: out.e_tag().unwrap_or_default().to_string(),
        })
    }

    async fn get(&self, key: &str) -> Result<Bytes, ObjectStoreError> {
        validate_key(key)?;
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk(key, e))?;
        let data = out.body.collect().await.map_err(|e| io(key, e))?;
        Ok(data.into_bytes())
    }

    async fn get_at_most(&self, key: &str, max: u64) -> Result<Bytes, ObjectStoreError> {
        validate_key(key)?;
        let too_large = |size| ObjectStoreError::TooLarge {
            key: key.to_string(),
            size,
            max,
        };
        // One GET: the length it answers is the length of the object it streams, so an
        // object replaced meanwhile is measured and read as one.
        let mut out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk(key, e))?;
        let declared = out.content_length().unwrap_or(0).max(0) as u64;
        if declared > max {
            // Dropping the body closes the stream unread.
            return Err(too_large(declared));
        }
        let mut data = bytes::BytesMut::with_capacity(declared as usize);
        while let Some(chunk) = out.body.try_next().await.map_err(|e| io(key, e))? {
            if (data.len() + chunk.len()) as u64 > max {
                return Err(too_large((data.len() + chunk.len()) as u64));
            }
            data.extend_from_slice(&chunk);
        }
        Ok(data.freeze())
    }

    async fn get_stream(
        &self,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<ObjectStream, ObjectStoreError> {
        validate_key(key)?;
        let bad = |r: &Range<u64>, size| ObjectStoreError::BadRange {
            key: key.to_string(),
            start: r.start,
            end: r.end,
            size,
        };
        if let Some(r) = &range
            && r.start >= r.end
        {
            // S3 cannot ask for no bytes: the size alone answers it.
            let size = self
                .head(key)
                .await?
                .ok_or_else(|| ObjectStoreError::NotFound(key.to_string()))?
                .size;
            if r.start > r.end || r.end > size {
                return Err(bad(r, size));
            }
            return Ok(ObjectStream {
                size,
                body: Box::pin(futures_util::stream::empty()),
            });
        }
        let mut get = self.client.get_object().bucket(&self.bucket).key(key);
        if let Some(r) = &range {
            get = get.range(format!("bytes={}-{}", r.start, r.end - 1));
        }
        let out = match get.send().await {
            Ok(out) => out,
            // A range starting past the end.
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 416) => {
                let size = self.head(key).await?.map_or(0, |m| m.size);
                return Err(match &range {
                    Some(r) => bad(r, size),
                    None => sdk(key, e),
                });
            }
            Err(e) => return Err(sdk(key, e)),
        };
        let length = out.content_length().unwrap_or(0).max(0) as u64;
        // `bytes a-b/size` for a range; the length for the whole object.
        let size = out
            .content_range()
            .and_then(|c| c.rsplit('/').next())
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(length);
        if let Some(r) = &range
            && (r.end > size || length != r.end - r.start)
        {
            // S3 clips a range that runs past the end instead of refusing it.
            return Err(bad(r, size));
        }
        let key = key.to_string();
        let body = futures_util::stream::unfold(Some(out.body), move |body| {
            let key = key.clone();
            async move {
                let mut body = body?;
                match body.try_next().await {
                    Ok(Some(chunk)) => Some((Ok(chunk), Some(body))),
                    Ok(None) => None,
                    Err(e) => Some((Err(io(&key, e)), None)),
                }
            }
        });
        Ok(ObjectStream {
            size,
            body: Box::pin(body),
        })
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, ObjectStoreError> {
        validate_key(key)?;
        let bad = |size| ObjectStoreError::BadRange {
            key: key.to_string(),
            start: range.start,
            end: range.end,
            size,
        };
        // S3 clips a range that runs past the end instead of refusing it, so the size
        // is checked first; the object is immutable by convention between the two.
        let size = self
            .head(key)
            .await?
            .ok_or_else(|| ObjectStoreError::NotFound(key.to_string()))?
            .size;
        if range.start > range.end || range.end > size {
            return Err(bad(size));
        }
        if range.start == range.end {
            return Ok(Bytes::new());
        }
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={}-{}", range.start, range.end - 1))
            .send()
            .await
            .map_err(|e| sdk(key, e))?;
        let data = out
            .body
            .collect()
            .await
            .map_err(|e| io(key, e))?
            .into_bytes();
        if data.len() as u64 != range.end - range.start {
            return Err(bad(size));
        }
        Ok(data)
    }

    async fn get_to_file(&self, key: &str, path: &Path) -> Result<ObjectMeta, ObjectStoreError> {
        validate_key(key)?;
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk(key, e))?;
        let etag = out.e_tag().unwrap_or_default().to_string();
        let tmp = path.with_extension(format!("part-{}", crate::request_token()));
        let written = async {
            let mut f = tokio::fs::File::create(&tmp).await?;
            let mut body = out.body;
            let mut size = 0u64;
            while let Some(chunk) = body.try_next().await.map_err(std::io::Error::other)? {
                size += chunk.len() as u64;
                f.write_all(&chunk).await?;
            }
            f.sync_all().await?;
            tokio::fs::rename(&tmp, path).await?;
            Ok::<u64, std::io::Error>(size)
        }
        .await;
        match written {
            Ok(size) => Ok(ObjectMeta {
                key: key.to_string(),
                size,
                etag,
            }),
            Err(e) => {
                let _ = tokio::fs::remove_file(&tmp).await;
                Err(io(key, e))
            }
        }
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>, ObjectStoreError> {
        validate_key(key)?;
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => Ok(Some(ObjectMeta {
                key: key.to_string(),
                size: out.content_length().unwrap_or(0).max(0) as u64,
                etag: out.e_tag().unwrap_or_default().to_string(),
            })),
            Err(e) => match sdk(key, e) {
                ObjectStoreError::NotFound(_) => Ok(None),
                other => Err(other),
            },
        }
    }

    async fn delete(&self, key: &str) -> Result<(), ObjectStoreError> {
        validate_key(key)?;
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk(key, e))?;
        Ok(())
    }

    async fn presigned_put(
        &self,
        key: &str,
        content_type: &str,
        expires: Duration,
    ) -> Result<Option<String>, ObjectStoreError> {
        self.presign_put(key, content_type, expires).await.map(Some)
    }

    async fn presigned_get(
        &self,
        key: &str,
        expires: Duration,
    ) -> Result<Option<String>, ObjectStoreError> {
        self.presign_get(key, expires).await.map(Some)
    }

    async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<ObjectMeta>, Option<String>), ObjectStoreError> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_start_after(after.map(str::to_string))
            .max_keys(limit.clamp(1, 1000) as i32)
            .send()
            .await
            .map_err(|e| sdk(prefix, e))?;
        let metas: Vec<ObjectMeta> = out
            .contents()
            .iter()
            .map(|o| ObjectMeta {
                key: o.key().unwrap_or_default().to_string(),
                size: o.size().unwrap_or(0).max(0) as u64,
                etag: o.e_tag().unwrap_or_default().to_string(),
            })
            .collect();
        let next = if out.is_truncated().unwrap_or(false) {
            metas.last().map(|m| m.key.clone())
        } else {
            None
        };
        Ok((metas, next))
    }
}
