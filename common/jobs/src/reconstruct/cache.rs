//! The stage cache: a stage whose inputs were already processed the same way, by any
//! job, is not run again; its checkpoint is adopted (copied under this job, checksums
//! unchanged) and its result reused.
//!
//! A stage's key is the SHA-256 of the stage, the spec's processing parameters, the
//! runtime (Tessera and backend versions) and the *content* of the previous stage's
//! checkpoint (its files' SHA-256, and for ingest the photos' SHA-256). Keys therefore
//! chain: the same photos and parameters give the same keys stage after stage, and a
//! change anywhere changes every key after it. Ingest (it reads the photos) and export
//! (cheap, and it writes outside the checkpoint) always run.
//!
//! Entries are per tenant: a hit adopts a checkpoint of one of the tenant's own jobs,
//! and neither the bytes nor the other job's id ever reach another tenant.

use super::Stage;
use super::checkpoint::{self, Checkpoint};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tessera_core::ports::ObjectStore;
use tessera_core::ports::state_store::{Condition, Item, ItemKey, StateStore, Write};
use tessera_core::spec::ReconstructionSpec;
use tessera_core::{JobId, TenantId};
use tessera_engine::TaskError;

fn item_key(tenant: &TenantId, key: &str) -> ItemKey {
    ItemKey::new(format!("STAGECACHE#{tenant}#{key}"), "STAGECACHE")
}

/// The stage's cache key, when it is cacheable and its input checkpoint exists.
pub async fn key(
    objects: &dyn ObjectStore,
    job: JobId,
    spec: &ReconstructionSpec,
    stage: Stage,
    backend_version: &str,
) -> Result<Option<String>, TaskError> {
    if matches!(stage, Stage::Ingest | Stage::Export) {
        return Ok(None);
    }
    let stages = Stage::planned(spec);
    let Some(pos) = stages.iter().position(|s| *s == stage).filter(|p| *p > 0) else {
        return Ok(None);
    };
    let previous = stages[pos - 1];
    let Some(input) = checkpoint::manifest(objects, job, previous.name()).await? else {
        return Ok(None);
    };
    let params = params(spec, &stages, stage);
    let files: Vec<(&str, &str)> = input
        .files
        .iter()
        .map(|f| (f.name.as_str(), f.sha256.as_str()))
        .collect();
    let photos: Vec<(Value, Value)> = input.result["images"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| (p["name"].clone(), p["sha256"].clone()))
                .collect()
        })
        .unwrap_or_default();
    let canonical = json!({
        "stage": stage.name(),
        "input": { "stage": previous.name(), "files": files, "photos": photos },
        "params": params,
        "runtime": { "tessera": env!("CARGO_PKG_VERSION"), "backend": backend_version },
    });
    Ok(Some(hex::encode(Sha256::digest(
        canonical.to_string().as_bytes(),
    ))))
}

/// The spec's parameters that `stage` depends on: all of them but where the photos come
/// from, the priority and what only the (never cached) export stage reads; and, for the
/// stages before georeferencing, how the model is georeferenced, which none of them
/// reads — a run that only adds ground control or a CRS adopts the mapped model instead
/// of mapping again (and so places the model the user already looked at).
fn params(spec: &ReconstructionSpec, stages: &[Stage], stage: Stage) -> Value {
    let mut params = serde_json::to_value(spec).expect("serializable");
    let before_georef = stages
        .iter()
        .position(|s| *s == Stage::Georeference)
        .is_none_or(|g| stages.iter().position(|s| *s == stage) < Some(g));
    if let Some(m) = params.as_object_mut() {
        for volatile in ["project", "image_set", "priority", "exports", "crs"] {
            m.remove(volatile);
        }
        if before_georef {
            m.remove("georef");
            m.remove("georef_if_possible");
        }
    }
    params
}

/// The job of `tenant` whose checkpoint answers `key`, if any.
pub async fn lookup(
    store: &dyn StateStore,
    tenant: &TenantId,
    key: &str,
) -> Result<Option<JobId>, TaskError> {
    Ok(store
        .get(&item_key(tenant, key))
        .await?
        .and_then(|i| i.body["job"].as_str().and_then(|j| j.parse().ok())))
}

/// The write that records `job`'s checkpoint as the answer to `key` (committed with the
/// stage's success).
pub fn record(tenant: &TenantId, key: &str, job: JobId, stage: Stage) -> Write {
    Write::Put {
        item: Item::new(
            item_key(tenant, key),
            json!({ "job": job, "stage": stage.name() }),
        ),
        condition: Condition::None,
    }
}

/// Copy `origin`'s checkpoint of `stage` under `job`, if it is still whole. The manifest
/// is written last, as for any checkpoint.
pub async fn adopt(
    objects: &dyn ObjectStore,
    origin: JobId,
    job: JobId,
    stage: Stage,
) -> Result<Option<Checkpoint>, TaskError> {
    let name = stage.name();
    let Some(cp) = checkpoint::manifest(objects, origin, name).await? else {
        return Ok(None);
    };
    if !checkpoint::validates(objects, origin, &cp).await? {
        return Ok(None);
    }
    for f in &cp.files {
        let bytes = match objects
            .get(&format!("{}/{}", checkpoint::prefix(origin, name), f.name))
            .await
        {
            Ok(b) => b,
            // The origin was erased while this copied it: a miss, and the stage runs.
            Err(tessera_core::ports::ObjectStoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        objects
            .put(
                &format!("{}/{}", checkpoint::prefix(job, name), f.name),
                bytes,
            )
            .await?;
    }
    let body = serde_json::to_vec_pretty(&cp).expect("serializable");
    objects
        .put(&checkpoint::manifest_key(job, name), body.into())
        .await?;
    Ok(Some(cp))
}

/// Whether a record names a job that is not this one (a job never adopts from itself).
pub fn elsewhere(origin: Option<JobId>, job: JobId) -> Option<JobId> {
    origin.filter(|o| *o != job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::spec::Georef;

    fn spec(georef: Georef) -> ReconstructionSpec {
        let mut spec: ReconstructionSpec = serde_json::from_value(json!({
            "project": "01JA0000000000000000000000", "image_set": "images/survey",
            "backend": {"name": "pycolmap", "version": null}, "camera_model": "SIMPLE_RADIAL",
            "max_features": 8192, "max_image_size": 3200,
            "pairs": {"strategy": "exhaustive"}, "mapper": "incremental", "ba": "standard",
            "georef": {"mode": "none"}, "exports": ["points-bin"],
        }))
        .unwrap();
        spec.georef = georef;
        spec
    }

    /// Adding ground control to a finished run maps nothing again: every stage before
    /// georeferencing has the same parameters, and georeferencing its own.
    #[test]
    fn only_georeferencing_depends_on_how_the_model_is_georeferenced() {
        let free = spec(Georef::None);
        let mut placed = spec(Georef::Gcp {
            file: "gcp/abc.txt".into(),
            target_epsg: Some(32632),
        });
        placed.georef_if_possible = true;
        let stages = Stage::planned(&placed);
        assert!(stages.contains(&Stage::Georeference));
        // (Export is never cached: it always runs.)
        for stage in Stage::planned(&free)
            .into_iter()
            .filter(|s| *s != Stage::Export)
        {
            assert_eq!(
                params(&free, &Stage::planned(&free), stage),
                params(&placed, &stages, stage),
                "{stage:?}"
            );
        }
        let gps = spec(Georef::Gps { target_epsg: None });
        assert_ne!(
            params(&gps, &Stage::planned(&gps), Stage::Georeference),
            params(&placed, &stages, Stage::Georeference)
        );
        // Anything a stage does read still changes its key.
        let mut sharper = free.clone();
        sharper.max_features = 4096;
        assert_ne!(
            params(&free, &Stage::planned(&free), Stage::Map),
            params(&sharper, &Stage::planned(&sharper), Stage::Map)
        );
    }
}
