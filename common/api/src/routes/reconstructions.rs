//! Reconstructions (one per reconstruction job), their sealed snapshots, and the
//! snapshot files in sfmapi's wire formats, derived once from the sealed COLMAP model
//! and kept (snapshots are immutable).
//!
//! Snapshot sequence numbers are the mapper's sealed snapshots (1, 2, …) and, once the
//! job has finished its last model stage, the final model as the next number.

use crate::ApiState;
use crate::auth::Caller;

use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};
use tessera_core::job::Job;
use tessera_sfm::model::Reconstruction;

/// Files a snapshot offers.
pub const FILES: [&str; 5] = [
    "cameras.json",
    "images.json",
    "points.bin",
    "points_preview.bin",
    "summary.json",
];
/// Most points in `points_preview.bin`.
pub const PREVIEW_POINTS: usize = 10_000;

pub(crate) async fn owned(s: &ApiState, caller: &Caller, rid: &str) -> Result<Job, Problem> {
    Ok(tessera_core::catalog::tenancy::job_of_kind(
        s.engine.ports().store.as_ref(),
        &caller.tenant,
        rid,
        tessera_jobs::reconstruct::KIND,
        "reconstruction",
    )
    .await?)
}

/// Where a snapshot's COLMAP model is: the mapper's sealed snapshot, or the final model.
async fn sealed(s: &ApiState, job: &Job) -> Result<Vec<(u64, String)>, Problem> {
    use tessera_jobs::reconstruct::checkpoint;
    let objects = s.engine.ports().objects.clone();
    let prefix = checkpoint::snapshots_prefix(job.id);
    let mut out: Vec<(u64, String)> = checkpoint::sealed_snapshots(objects.as_ref(), job.id)
        .await
        .map_err(Problem::internal)?
        .into_iter()
        .map(|seq| (seq, format!("{prefix}{seq}")))
        .collect();
    for stage in ["georeference", "bundle_adjust"] {
        let manifest = checkpoint::manifest_key(job.id, stage);
        if objects
            .head(&manifest)
            .await
            .map_err(Problem::internal)?
            .is_some()
        {
            let next = out.last().map_or(1, |l| l.0 + 1);
            out.push((next, format!("{}/model", checkpoint::prefix(job.id, stage))));
            break;
        }
    }
    Ok(out)
}

/// `GET /v1/reconstructions/{rid}`.
pub async fn get(
    State(s): State<ApiState>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<Json<Value>, Problem> {
    let job = owned(&s, &caller, &rid).await?;
    let href = format!("/v1/reconstructions/{rid}");
    let status = match super::jobs::status(&job) {
        "pending" => "pending",
        "running" => "running",
        "succeeded" => "succeeded",
        _ => "failed",
    };
    Ok(Json(json!({
        "recon_id": job.id, "project_id": job.project,
        "dataset_id": job.spec["image_set"].as_str().and_then(tessera_core::catalog::datasets::dataset_of_image_set),
        "spec": job.spec, "rv_id": format!("tessera-{}", env!("CARGO_PKG_VERSION")), "status": status,
        "created_at": job.created_at.to_rfc3339(),
        "_links": super::links(&href, &[("snapshots", format!("{href}/snapshots")), ("job", format!("/v1/jobs/{}", job.id))]),
    })))
}

/// `GET /v1/reconstructions/{rid}/snapshots`.
pub async fn snapshots(
    State(s): State<ApiState>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<Json<Value>, Problem> {
    let job = owned(&s, &caller, &rid).await?;
    let seqs: Vec<u64> = sealed(&s, &job).await?.into_iter().map(|x| x.0).collect();
    let href = format!("/v1/reconstructions/{rid}/snapshots");
    let latest = seqs.last().map(|l| format!("{href}/{l}/points.bin"));
    let mut links = super::links(&href, &[]);
    if let Some(l) = latest {
        links["latest_points"] = json!({ "href": l });
    }
    Ok(Json(json!({ "seqs": seqs, "_links": links })))
}

fn read_model(files: &[(String, bytes::Bytes)]) -> Result<Reconstruction, Problem> {
    let dir = tempfile_dir()?;
    for (name, b) in files {
        std::fs::write(dir.join(name), b).map_err(Problem::internal)?;
    }
    let rec = tessera_sfm::model_bin::read(&dir).map_err(Problem::internal);
    let _ = std::fs::remove_dir_all(&dir);
    rec
}

fn tempfile_dir() -> Result<std::path::PathBuf, Problem> {
    let d = std::env::temp_dir().join(format!("tessera-api-{}", ulid::Ulid::new()));
    std::fs::create_dir_all(&d).map_err(Problem::internal)?;
    Ok(d)
}

/// One snapshot file in sfmapi's format.
pub fn render(rec: &Reconstruction, name: &str) -> Vec<u8> {
    match name {
        "cameras.json" => json!({ "cameras": rec.cameras.values().map(|c| json!({
            "camera_id": c.id, "model": c.model, "width": c.width, "height": c.height,
            "params": c.params, "has_prior_focal_length": false,
        })).collect::<Vec<_>>() })
        .to_string()
        .into_bytes(),
        "images.json" => json!({ "images": rec.images.values().map(|i| json!({
            "image_id": i.id, "name": i.name, "camera_id": i.camera_id,
            "cam_from_world": {
                "rotation": { "w": i.qvec[0], "x": i.qvec[1], "y": i.qvec[2], "z": i.qvec[3] },
                "translation": i.tvec,
            },
            "points2D": i.points2d.iter().map(|p| json!({
                "xy": p.xy,
                "point3d_id": if rec.points.contains_key(&p.point3d_id) { Some(p.point3d_id) } else { None },
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>() })
        .to_string()
        .into_bytes(),
        "points.bin" => tessera_sfm::export::points_bin_bytes(rec),
        "points_preview.bin" => {
            let step = rec.points.len().div_ceil(PREVIEW_POINTS).max(1);
            let mut preview = Reconstruction { cameras: rec.cameras.clone(), images: Default::default(), points: Default::default() };
            preview.points = rec.points.iter().step_by(step).map(|(k, v)| (*k, v.clone())).collect();
            tessera_sfm::export::points_bin_bytes(&preview)
        }
        _ => {
            let m = tessera_sfm::metrics::compute(rec);
            json!({
                "models": [{ "idx": 0, "num_reg_images": rec.images.len(), "num_points3D": rec.points.len() }],
                "mean_reproj_err": m.mean_reprojection_error,
            })
            .to_string()
            .into_bytes()
        }
    }
}

/// `GET /v1/reconstructions/{rid}/snapshots/{seq}/{name}` (ETag, 304, Range): the
/// primary model's file.
pub async fn file(
    State(s): State<ApiState>,
    caller: Caller,
    Path((rid, seq, name)): Path<(String, u64, String)>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let job = owned(&s, &caller, &rid).await?;
    serve_file(&s, &job, seq, 0, &name, &headers).await
}

/// `GET /v1/reconstructions/{rid}/snapshots/{seq}/submodels/{idx}/{name}`: one
/// sub-model's file. Sub-model 0 is the primary in every snapshot; the others exist
/// only in the last snapshot of a job whose mapper built several models.
pub async fn submodel_file(
    State(s): State<ApiState>,
    caller: Caller,
    Path((rid, seq, idx, name)): Path<(String, u64, String, String)>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    let job = owned(&s, &caller, &rid).await?;
    // Exactly as listed (`1`, never `01`): anything else names no sub-model.
    let idx = idx
        .parse::<usize>()
        .ok()
        .filter(|i| i.to_string() == idx)
        .ok_or_else(|| {
            Problem::not_found(format!("reconstruction {rid} has no sub-model {idx}"))
        })?;
    serve_file(&s, &job, seq, idx, &name, &headers).await
}

async fn serve_file(
    s: &ApiState,
    job: &Job,
    seq: u64,
    idx: usize,
    name: &str,
    headers: &HeaderMap,
) -> Result<Response, Problem> {
    if !FILES.contains(&name) {
        return Err(Problem::not_found(format!(
            "a snapshot has no file `{name}`; it has {}",
            FILES.join(", ")
        )));
    }
    let ct = if name.ends_with(".bin") {
        "application/x-sfm-points-v1"
    } else {
        "application/json"
    };
    // Immutable: its identity is a strong validator, no need to hash it on every request.
    let etag = match idx {
        0 => format!("{}-{seq}-{name}", job.id),
        _ => format!("{}-{seq}-{idx}-{name}", job.id),
    };
    // Once derived, a file is read from the store as asked: a Range request of a large
    // cloud reads that range, not the whole file.
    let cached = format!("{}/{name}", derived_dir(job, seq, idx));
    match crate::bytes::serve_object(
        headers,
        s.engine.ports().objects.as_ref(),
        &cached,
        ct,
        &etag,
        crate::bytes::Freshness::Immutable,
        s.response_limit,
    )
    .await
    {
        Err(tessera_core::ports::ObjectStoreError::NotFound(_)) => {
            let body = derived(s, job, seq, idx, name).await?;
            Ok(crate::bytes::serve(
                headers,
                body,
                ct,
                Some(etag),
                crate::bytes::Freshness::Immutable,
            ))
        }
        r => r.map_err(Problem::internal),
    }
}

/// Where the files derived from sub-model `idx` of snapshot `seq` are kept.
fn derived_dir(job: &Job, seq: u64, idx: usize) -> String {
    match idx {
        0 => format!("recon/{}/sfmapi/{seq}", job.id),
        _ => format!("recon/{}/sfmapi/{seq}/submodels/{idx}", job.id),
    }
}

/// Where sub-model `idx` of sealed snapshot `seq` is sealed, or 404.
async fn model_of(s: &ApiState, job: &Job, seq: u64, idx: usize) -> Result<String, Problem> {
    let rid = job.id;
    let snapshots = sealed(s, job).await?;
    let Some((_, model)) = snapshots.iter().find(|x| x.0 == seq) else {
        return Err(Problem::not_found(format!(
            "reconstruction {rid} has no sealed snapshot {seq}"
        )));
    };
    if idx == 0 {
        return Ok(model.clone());
    }
    let none = || {
        Problem::not_found(format!(
            "snapshot {seq} of reconstruction {rid} has no sub-model {idx}; see /v1/reconstructions/{rid}/submodels"
        ))
    };
    // The other sub-models are sealed by the map stage and belong to the last snapshot.
    if snapshots.last().map(|l| l.0) != Some(seq) {
        return Err(none());
    }
    use tessera_jobs::reconstruct::{Stage, checkpoint};
    let mapped = checkpoint::manifest(s.engine.ports().objects.as_ref(), rid, Stage::Map.name())
        .await
        .map_err(|e| Problem::internal(e.message))?
        .ok_or_else(none)?;
    let count = mapped.result["submodels"].as_array().map_or(0, Vec::len);
    if idx >= count {
        return Err(none());
    }
    Ok(format!(
        "{}/submodels/{idx}",
        checkpoint::prefix(rid, "map")
    ))
}

/// One derived file of sub-model `idx` of sealed snapshot `seq`: made once from the
/// sealed COLMAP model (all files together), stored, and then only read.
async fn derived(
    s: &ApiState,
    job: &Job,
    seq: u64,
    idx: usize,
    name: &str,
) -> Result<bytes::Bytes, Problem> {
    let objects = s.engine.ports().objects.clone();
    let dir = derived_dir(job, seq, idx);
    let cached = format!("{dir}/{name}");
    // A derived file exists only for a sealed snapshot, so a stored one is served without
    // listing the snapshots again.
    match objects.get(&cached).await {
        Ok(b) => Ok(b),
        Err(tessera_core::ports::ObjectStoreError::NotFound(_)) => {
            let model = model_of(s, job, seq, idx).await?;
            let mut files = Vec::new();
            for f in ["cameras.bin", "images.bin", "points3D.bin"] {
                files.push((
                    f.to_string(),
                    objects
                        .get(&format!("{model}/{f}"))
                        .await
                        .map_err(Problem::internal)?,
                ));
            }
            let rendered = tokio::task::spawn_blocking(move || {
                read_model(&files).map(|rec| FILES.map(|n| (n, render(&rec, n))))
            })
            .await
            .map_err(Problem::internal)??;
            let mut mine = bytes::Bytes::new();
            for (n, b) in rendered {
                let b = bytes::Bytes::from(b);
                match objects
                    .put_if_absent(&format!("{dir}/{n}"), b.clone())
                    .await
                {
                    Ok(_) | Err(tessera_core::ports::ObjectStoreError::AlreadyExists(_)) => {}
                    Err(e) => return Err(Problem::internal(e)),
                }
                if n == name {
                    mine = b;
                }
            }
            // A racing request may have stored first: serve what is stored.
            Ok(objects.get(&cached).await.unwrap_or(mine))
        }
        Err(e) => Err(Problem::internal(e)),
    }
}

/// The reconstruction's sub-models: while mapping runs, the growing model of the latest
/// sealed snapshot (`idx` 0); once the map stage is done, every model the mapper built,
/// the primary (the one the later stages carry forward) first.
async fn submodels_of(s: &ApiState, job: &Job) -> Result<Vec<Value>, Problem> {
    let latest = sealed(s, job).await?.pop();
    let mapped = tessera_jobs::reconstruct::checkpoint::manifest(
        s.engine.ports().objects.as_ref(),
        job.id,
        tessera_jobs::reconstruct::Stage::Map.name(),
    )
    .await
    .map_err(|e| Problem::internal(e.message))?;
    let entry = |idx: usize, summary: Value, extra: Value| {
        let id = format!("{}-{idx}", job.id);
        let href = format!("/v1/submodels/{id}");
        let mut links = vec![("reconstruction", format!("/v1/reconstructions/{}", job.id))];
        if let Some(seq) = extra["snapshot_seq"].as_u64() {
            links.push((
                "points",
                format!("/v1/reconstructions/{}/snapshots/{seq}/points.bin", job.id),
            ));
        }
        let mut v = json!({
            "submodel_id": id, "recon_id": job.id, "idx": idx, "parent_submodel_id": null,
            "summary": summary, "rigidity": null,
            "created_at": job.created_at.to_rfc3339(),
            "_links": super::links(&href, &links),
        });
        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            v.extend(extra.clone());
        }
        v
    };
    if let Some(cp) = mapped
        && let Some(list) = cp.result["submodels"].as_array()
    {
        return Ok(list
            .iter()
            .enumerate()
            .map(|(idx, m)| {
                let m = &m["model"];
                let summary = json!({
                    "num_reg_images": m["registered_images"], "num_points3D": m["points"],
                    "mean_reproj_err": m["mean_reprojection_error"],
                });
                // Where the map stage sealed it; the primary's points are also in the
                // latest snapshot (the model the later stages refined from it).
                let map = tessera_jobs::reconstruct::checkpoint::prefix(job.id, "map");
                let extra = match (&latest, idx) {
                    (Some((seq, _)), 0) => json!({ "snapshot_seq": seq, "sealed_path": format!("{map}/model") }),
                    (None, 0) => json!({ "snapshot_seq": null, "sealed_path": format!("{map}/model") }),
                    _ => json!({ "snapshot_seq": null, "sealed_path": format!("{map}/submodels/{idx}") }),
                };
                entry(idx, summary, extra)
            })
            .collect());
    }
    let Some((seq, model)) = latest else {
        return Ok(Vec::new());
    };
    let summary: Value = serde_json::from_slice(&derived(s, job, seq, 0, "summary.json").await?)
        .map_err(Problem::internal)?;
    let first = &summary["models"][0];
    Ok(vec![entry(
        0,
        json!({
            "num_reg_images": first["num_reg_images"], "num_points3D": first["num_points3D"],
            "mean_reproj_err": summary["mean_reproj_err"],
        }),
        json!({ "snapshot_seq": seq, "sealed_path": model }),
    )])
}

/// `GET /v1/reconstructions/{rid}/submodels`.
pub async fn submodels(
    State(s): State<ApiState>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<Json<Value>, Problem> {
    let job = owned(&s, &caller, &rid).await?;
    let items = submodels_of(&s, &job).await?;
    let total = items.len();
    Ok(Json(
        json!({ "items": items, "next_page_token": null, "total": total }),
    ))
}

/// `GET /v1/submodels/{smid}` (`<recon id>-<idx>`).
pub async fn get_submodel(
    State(s): State<ApiState>,
    caller: Caller,
    Path(smid): Path<String>,
) -> Result<Json<Value>, Problem> {
    let missing = || Problem::not_found(format!("sub-model {smid} does not exist"));
    let (rid, idx) = smid.rsplit_once('-').ok_or_else(missing)?;
    // Exactly as listed: `-1`, never `-01` or `-+1`.
    let idx: usize = idx.parse().map_err(|_| missing())?;
    if idx.to_string() != smid.rsplit_once('-').map_or("", |x| x.1) {
        return Err(missing());
    }
    let job = owned(&s, &caller, rid).await.map_err(|_| missing())?;
    submodels_of(&s, &job)
        .await?
        .into_iter()
        .nth(idx)
        .map(Json)
        .ok_or_else(missing)
}
