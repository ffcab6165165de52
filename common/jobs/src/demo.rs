//! The demo job: inventory a folder of photos through the engine.
//!
//! One `demo.inspect` task per image (read it from the object store, hash it, read its
//! format and dimensions from the header) fans in to one `demo.summarize` task that
//! writes a manifest. It is small, but it exercises what every real job uses: uploads
//! in the object store, a DAG with fan-out and fan-in, progress events, results passed
//! downstream.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tessera_core::event::Phase;
use tessera_core::spec::{Problems, SpecError};
use tessera_core::{ProjectId, TenantId};
use tessera_engine::{
    JobPlan, Registry, TaskContext, TaskError, TaskHandler, TaskOutput, TaskPlan,
};

/// The demo job's kind.
pub const KIND: &str = "demo";

/// What the demo job is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoSpec {
    /// Object-store keys of the images, as uploaded.
    pub images: Vec<String>,
    /// Where the manifest goes in the object store.
    pub manifest_key: String,
}

impl DemoSpec {
    /// Check the spec; every problem names its field.
    pub fn validate(&self) -> Result<(), SpecError> {
        let mut p = Problems::default();
        if self.images.is_empty() {
            p.add(
                "images",
                "is empty; the folder holds no images (JPEG, PNG, TIFF, WebP…)",
            );
        }
        for (i, k) in self.images.iter().enumerate() {
            if let Err(e) = tessera_core::ports::object_store::validate_key(k) {
                p.add(&format!("images[{i}]"), e.to_string());
            }
        }
        if let Err(e) = tessera_core::ports::object_store::validate_key(&self.manifest_key) {
            p.add("manifest_key", e.to_string());
        }
        p.finish()
    }

    /// The job plan: one inspect task per image, then the summary.
    pub fn plan(
        &self,
        tenant: TenantId,
        project: Option<ProjectId>,
        label: &str,
    ) -> Result<JobPlan, SpecError> {
        self.validate()?;
        let mut tasks: Vec<TaskPlan> = self
            .images
            .iter()
            .enumerate()
            .map(|(i, key)| {
                TaskPlan::new(
                    format!("inspect-{i:04}"),
                    "demo.inspect",
                    serde_json::json!({ "key": key }),
                )
            })
            .collect();
        let names: Vec<String> = tasks.iter().map(|t| t.name.clone()).collect();
        tasks.push(
            TaskPlan::new(
                "summarize",
                "demo.summarize",
                serde_json::json!({ "manifest_key": self.manifest_key }),
            )
            .after(names),
        );
        Ok(JobPlan {
            tenant,
            project,
            kind: KIND.into(),
            label: label.into(),
            spec: serde_json::to_value(self).expect("serializable"),
            priority: 0,
            tasks,
        })
    }
}

/// What `demo.inspect` finds out about one image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageFacts {
    /// Object-store key.
    pub key: String,
    /// Size in bytes.
    pub bytes: u64,
    /// SHA-256, hex.
    pub sha256: String,
    /// Format from the header (`jpeg`, `png`, …).
    pub format: String,
    /// Width in pixels.
    pub width: u64,
    /// Height in pixels.
    pub height: u64,
}

struct Inspect;

#[async_trait]
impl TaskHandler for Inspect {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let key = ctx.task().payload["key"]
            .as_str()
            .ok_or_else(|| TaskError::poison("demo.inspect payload has no `key`"))?
            .to_string();
        let started = ctx.phase_started(Phase::Checksum).await?;
        let bytes = ctx.ports().objects.get(&key).await?;
        let format = imagesize::image_type(&bytes)
            .map_err(|_| TaskError::permanent(format!("`{key}` is not an image this build recognises (too short or unknown header); remove it from the folder")))?;
        let size = imagesize::blob_size(&bytes).map_err(|e| {
            TaskError::permanent(format!(
                "`{key}` has a damaged header ({e}); re-export or remove it"
            ))
        })?;
        let facts = ImageFacts {
            key: key.clone(),
            bytes: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(&bytes)),
            format: format!("{format:?}").to_lowercase(),
            width: size.width as u64,
            height: size.height as u64,
        };
        ctx.metric("image_bytes", facts.bytes as f64, Some("bytes"))
            .await?;
        ctx.phase_completed(Phase::Checksum, started).await?;
        Ok(TaskOutput::result(
            serde_json::to_value(facts).expect("serializable"),
        ))
    }
}

/// The manifest the demo job writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The job.
    pub job_id: String,
    /// Every image, in name order.
    pub images: Vec<ImageFacts>,
    /// Sum of sizes.
    pub total_bytes: u64,
    /// Sum of pixels, in megapixels.
    pub total_megapixels: f64,
}

struct Summarize;

#[async_trait]
impl TaskHandler for Summarize {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let manifest_key = ctx.task().payload["manifest_key"]
            .as_str()
            .ok_or_else(|| TaskError::poison("demo.summarize payload has no `manifest_key`"))?
            .to_string();
        ctx.checkpoint().await?;
        let started = ctx.phase_started(Phase::Summarize).await?;
        let upstream = ctx.upstream_results().await?;
        let total = upstream.len() as u64;
        let mut images = Vec::with_capacity(upstream.len());
        for (i, (name, value)) in upstream.into_iter().enumerate() {
            let facts: ImageFacts = serde_json::from_value(value).map_err(|e| {
                TaskError::permanent(format!("result of {name} is not image facts: {e}"))
            })?;
            images.push(facts);
            if (i + 1) % 10 == 0 {
                ctx.progress(Phase::Summarize, i as u64 + 1, Some(total), None)
                    .await?;
            }
        }
        images.sort_by(|a, b| a.key.cmp(&b.key));
        let manifest = Manifest {
            job_id: ctx.task().job_id.to_string(),
            total_bytes: images.iter().map(|i| i.bytes).sum(),
            total_megapixels: images
                .iter()
                .map(|i| (i.width * i.height) as f64 / 1e6)
                .sum(),
            images,
        };
        let text = serde_json::to_vec_pretty(&manifest).expect("serializable");
        ctx.ports().objects.put(&manifest_key, text.into()).await?;
        ctx.metric("images", manifest.images.len() as f64, None)
            .await?;
        ctx.phase_completed(Phase::Summarize, started).await?;
        Ok(TaskOutput::result(serde_json::json!({
            "manifest_key": manifest_key,
            "images": manifest.images.len(),
            "total_bytes": manifest.total_bytes,
        })))
    }
}

/// Register the demo task kinds.
pub fn register(r: &mut Registry) {
    r.register("demo.inspect", Inspect);
    r.register("demo.summarize", Summarize);
}
