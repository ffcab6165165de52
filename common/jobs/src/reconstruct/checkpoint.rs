//! Stage checkpoints: a stage's output files go to the object store under
//! `recon/<job>/<stage>/`, then a manifest with their SHA-256 is written *last*. A
//! checkpoint exists only if its manifest does, and it is used only if every file is
//! there with the recorded checksum and the stage's own semantic check passes (the
//! database opens with the expected rows, the model parses).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use tessera_core::JobId;
use tessera_core::ports::ObjectStore;
use tessera_core::ports::state_store::{Condition, Item, Write};
use tessera_core::records;
use tessera_engine::TaskError;

/// One file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointFile {
    /// Path relative to the stage folder (`database.db`, `sparse/0/cameras.bin`).
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, hex.
    pub sha256: String,
}

/// A sealed stage output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The stage.
    pub stage: String,
    /// Its files.
    pub files: Vec<CheckpointFile>,
    /// The stage's result.
    pub result: serde_json::Value,
}

/// Object-store prefix of everything a job writes (`recon/<job>/`).
pub fn job_prefix(job: JobId) -> String {
    format!("recon/{job}/")
}

/// Object-store prefix of a stage's checkpoint.
pub fn prefix(job: JobId, stage: &str) -> String {
    format!("{}{stage}", job_prefix(job))
}

/// Object-store prefix of the mapper's sealed snapshots (`<prefix><seq>/…`).
pub fn snapshots_prefix(job: JobId) -> String {
    format!("{}/snapshots/", prefix(job, "map"))
}

/// The sequence numbers of the mapper's sealed snapshots (those with a `.complete`
/// marker), ascending.
pub async fn sealed_snapshots(
    objects: &dyn ObjectStore,
    job: JobId,
) -> Result<Vec<u64>, tessera_core::ports::ObjectStoreError> {
    let prefix = snapshots_prefix(job);
    let (list, _) = objects.list(&prefix, None, 10_000).await?;
    let mut seqs: Vec<u64> = list
        .iter()
        .filter_map(|m| {
            m.key
                .strip_prefix(&prefix)?
                .strip_suffix("/.complete")?
                .parse::<u64>()
                .ok()
        })
        .collect();
    seqs.sort_unstable();
    Ok(seqs)
}

/// The next snapshot number of `job`, above `after`, recorded through `commit` — the
/// task's fenced commit, so a worker that lost its lease cannot get one and two attempts
/// never get the same one: a sealed snapshot has one writer and is never rewritten.
pub async fn allocate_snapshot<F, Fut>(
    store: &dyn tessera_core::ports::StateStore,
    job: JobId,
    after: u64,
    commit: F,
) -> Result<u64, TaskError>
where
    F: Fn(Vec<Write>) -> Fut,
    Fut: std::future::Future<Output = Result<(), TaskError>>,
{
    let key = records::snapshot_seq_key(job);
    for _ in 0..8 {
        let current = store.get(&key).await?;
        let last = current
            .as_ref()
            .and_then(|i| i.body["last"].as_u64())
            .unwrap_or(0);
        let next = last.max(after) + 1;
        let write = Write::Put {
            item: Item::new(key.clone(), serde_json::json!({ "last": next })),
            condition: current
                .as_ref()
                .map_or(Condition::Absent, |i| Condition::Rev(i.rev)),
        };
        match commit(vec![write]).await {
            Ok(()) => return Ok(next),
            Err(e) if e.class == tessera_core::ErrorClass::Cancelled => return Err(e),
            Err(_) => continue,
        }
    }
    Err(TaskError::transient(
        "snapshot numbers are contended; the next snapshot tries again",
    ))
}

/// Key of a stage's manifest.
pub fn manifest_key(job: JobId, stage: &str) -> String {
    format!("{}/manifest.json", prefix(job, stage))
}

/// SHA-256 of a local file, streamed.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(hex::encode(h.finalize()))
}

fn io_err(what: &str, e: impl std::fmt::Display) -> TaskError {
    TaskError::transient(format!("{what}: {e}"))
}

/// Upload `files` (relative to `dir`) and then the manifest.
pub async fn publish(
    objects: &dyn ObjectStore,
    job: JobId,
    stage: &str,
    dir: &Path,
    files: &[&str],
    result: serde_json::Value,
) -> Result<Checkpoint, TaskError> {
    let mut entries = Vec::new();
    for name in files {
        let path = dir.join(name);
        let sha =
            sha256_file(&path).map_err(|e| io_err(&format!("hashing {}", path.display()), e))?;
        let meta = objects
            .put_file(&format!("{}/{name}", prefix(job, stage)), &path)
            .await?;
        entries.push(CheckpointFile {
            name: name.to_string(),
            size: meta.size,
            sha256: sha,
        });
    }
    let cp = Checkpoint {
        stage: stage.to_string(),
        files: entries,
        result,
    };
    let body = serde_json::to_vec_pretty(&cp).expect("serializable");
    objects.put(&manifest_key(job, stage), body.into()).await?;
    Ok(cp)
}

/// The stage's manifest, if one was sealed and parses.
pub async fn manifest(
    objects: &dyn ObjectStore,
    job: JobId,
    stage: &str,
) -> Result<Option<Checkpoint>, TaskError> {
    match objects.get(&manifest_key(job, stage)).await {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(tessera_core::ports::ObjectStoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Make `dest_dir/<name>` hold the checkpoint's file, downloading it unless a local
/// copy with the right checksum is already there. Fails (so the stage re-runs) when
/// the stored copy does not match its manifest.
pub async fn materialize(
    objects: &dyn ObjectStore,
    job: JobId,
    cp: &Checkpoint,
    name: &str,
    dest_dir: &Path,
) -> Result<PathBuf, TaskError> {
    let entry = cp.files.iter().find(|f| f.name == name).ok_or_else(|| {
        TaskError::permanent(format!(
            "checkpoint of stage `{}` has no file `{name}`",
            cp.stage
        ))
    })?;
    let dest = dest_dir.join(name);
    if dest.is_file()
        && sha256_file(&dest)
            .map(|s| s == entry.sha256)
            .unwrap_or(false)
    {
        return Ok(dest);
    }
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_err("creating scratch folder", e))?;
    }
    objects
        .get_to_file(&format!("{}/{name}", prefix(job, &cp.stage)), &dest)
        .await?;
    let got = sha256_file(&dest).map_err(|e| io_err("hashing", e))?;
    if got != entry.sha256 {
        let _ = std::fs::remove_file(&dest);
        return Err(TaskError::transient(format!(
            "checkpoint file `{name}` of stage `{}` is corrupt (checksum {got}, manifest says {}); the stage must run again (`tessera reconstruct … --resume` re-runs it)",
            cp.stage, entry.sha256
        )));
    }
    Ok(dest)
}

/// Whether the checkpoint can be trusted: every file is stored with its recorded size
/// and checksum, *and* means something — a database opens and holds images with
/// keypoints, a model parses with consistent references. Each file is fetched once.
pub async fn validates(
    objects: &dyn ObjectStore,
    job: JobId,
    cp: &Checkpoint,
) -> Result<bool, TaskError> {
    let scratch =
        std::env::temp_dir().join(format!("tessera-validate-{}", tessera_core::TaskId::new()));
    let result = fetch_and_check(objects, job, cp, &scratch).await;
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

async fn fetch_and_check(
    objects: &dyn ObjectStore,
    job: JobId,
    cp: &Checkpoint,
    scratch: &Path,
) -> Result<bool, TaskError> {
    for f in &cp.files {
        let local = scratch.join(&f.name);
        if let Some(parent) = local.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| io_err("creating a validation folder", e))?;
        }
        match objects
            .get_to_file(&format!("{}/{}", prefix(job, &cp.stage), f.name), &local)
            .await
        {
            Ok(meta) if meta.size == f.size => {}
            Ok(_) | Err(tessera_core::ports::ObjectStoreError::NotFound(_)) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        if sha256_file(&local).map_err(|e| io_err("hashing", e))? != f.sha256 {
            return Ok(false);
        }
    }
    if cp.files.iter().any(|f| f.name == "database.db") {
        match tessera_sfm::colmap::database::stats(&scratch.join("database.db")) {
            Ok(s) if s.images > 0 && s.images_with_keypoints > 0 => {}
            _ => return Ok(false),
        }
    }
    for dir in ["model", "sparse/0"] {
        if cp
            .files
            .iter()
            .any(|f| f.name == format!("{dir}/cameras.bin"))
            && tessera_sfm::model_bin::read(&scratch.join(dir)).is_err()
        {
            return Ok(false);
        }
    }
    Ok(true)
}
