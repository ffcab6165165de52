//! Reconstruction work over HTTP: `POST /v1/projects/{pid}/pipelines/{recipe}` (the
//! whole reconstruction as one job) and the stage endpoints `POST
//! /v1/datasets/{did}/features|matches|verify` (the same job cut after that stage). A
//! dataset with no images is refused with 422 before any job exists; anything the
//! backend does not offer is 501 with its capability name.

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::catalog::quotas;
use tessera_core::spec::MapperKind;

/// The body of a pipeline request.
#[derive(Debug, Deserialize)]
pub struct PipelineRequest {
    /// The dataset to reconstruct.
    pub dataset_id: String,
    /// `{"kind": "<recipe>", …}`.
    pub spec: Value,
    /// FeaturesSpec (`sift_max_num_features` / `max_num_features`).
    #[serde(default)]
    pub features: Option<Value>,
    /// PairsSpec (sfmapi §6.8).
    #[serde(default)]
    pub pairs: Option<Value>,
    /// MatcherSpec (sfmapi §6.8).
    #[serde(default)]
    pub matcher: Option<Value>,
    /// The older `{pairs, matcher}` wrapper.
    #[serde(default)]
    pub matches: Option<Value>,
    /// VerifySpec (sfmapi §6.8); read for its `provider`.
    #[serde(default)]
    pub verify: Option<Value>,
}

/// The sections of one reconstruction request, in sfmapi's shapes, however the request
/// spelled them (a recipe body, a stage body, or `pipelines:run` steps).
#[derive(Debug, Default)]
pub struct Sections {
    /// FeaturesSpec.
    pub features: Option<Value>,
    /// PairsSpec.
    pub pairs: Option<Value>,
    /// MatcherSpec.
    pub matcher: Option<Value>,
    /// VerifySpec.
    pub verify: Option<Value>,
    /// The mapping spec (`{"kind": …}`).
    pub spec: Option<Value>,
}

impl Sections {
    fn all(&self) -> [(&'static str, Option<&Value>); 5] {
        [
            ("features", self.features.as_ref()),
            ("pairs", self.pairs.as_ref()),
            ("matcher", self.matcher.as_ref()),
            ("verify", self.verify.as_ref()),
            ("spec", self.spec.as_ref()),
        ]
    }

    /// Check sfmapi's per-stage `provider` (§6.8.1), the engine a stage runs on. One job
    /// runs on one engine, so every section that names a provider must name the same
    /// one, and it must be this server's engine (the 202 echoes it); 422 otherwise, with
    /// the candidates.
    pub fn check_provider(&self, s: &ApiState) -> Result<(), Problem> {
        let engine = &s.backend.0;
        let mut chosen: Option<(&str, String)> = None;
        for (section, v) in self.all() {
            let Some(p) = v.map(|v| &v["provider"]).filter(|p| !p.is_null()) else {
                continue;
            };
            let name = p.as_str().unwrap_or_default();
            if name.is_empty() || name.len() > 64 {
                return Err(Problem::validation(format!(
                    "{section}.provider must be a provider id of 1–64 characters"
                )));
            }
            if name != engine {
                let mut e = Problem::validation(format!(
                    "{section}.provider `{name}` is not a provider of this server; it routes to `{engine}`"
                ));
                e.extra
                    .insert("reason".into(), "provider_unsupported".into());
                e.extra.insert("candidates".into(), json!([engine]));
                return Err(e);
            }
            if let Some((first, other)) = &chosen
                && other != name
            {
                return Err(Problem::validation(format!(
                    "{section}.provider `{name}` differs from {first}.provider `{other}`; one job runs on one provider"
                )));
            }
            chosen = Some((section, name.to_string()));
        }
        Ok(())
    }
}

/// The body of a stage request (`{spec}` for features and verify, `{pairs, matcher}`
/// for matches).
#[derive(Debug, Deserialize, Default)]
pub struct StageRequest {
    /// FeaturesSpec or VerifySpec.
    #[serde(default)]
    pub spec: Option<Value>,
    /// PairsSpec.
    #[serde(default)]
    pub pairs: Option<Value>,
    /// MatcherSpec.
    #[serde(default)]
    pub matcher: Option<Value>,
}

/// 501 for the first capability a request's sections need that this server does not
/// serve: a feature type, a matcher, a pair strategy. Checked before any validation, so
/// a client learns first what it cannot have here.
pub(crate) fn require_capabilities(
    s: &ApiState,
    features: Option<&Value>,
    pairs: Option<&Value>,
    matcher: Option<&Value>,
) -> Result<(), Problem> {
    let served =
        |c: &str| s.capabilities.iter().any(|x| x == c) && super::meta::SERVED.contains(&c);
    if let Some(t) = features.and_then(|f| f["type"].as_str()) {
        let c = format!("features.extract.{t}");
        if !served(&c) {
            return Err(Problem::capability_unavailable(&c));
        }
    }
    if let Some(t) = matcher.and_then(|m| m["type"].as_str())
        && !matches!(t, "nn-ratio" | "nn-mutual")
    {
        return Err(Problem::capability_unavailable(&format!("matchers.{t}")));
    }
    if let Some(p) = pairs.and_then(|p| p["strategy"].as_str())
        && p != "auto"
    {
        // The spec's own name, as a job's options show it, is sfmapi's `vocabtree`.
        let c = format!("pairs.{}", if p == "vocab_tree" { "vocabtree" } else { p });
        if !served(&c) {
            return Err(Problem::capability_unavailable(&c));
        }
    }
    Ok(())
}

/// Submit the reconstruction of `spec`, cut after `last_stage` if given; 202 + Location.
async fn submit_plan(
    s: &ApiState,
    caller: &Caller,
    p: &super::pipeline_spec::Planned,
    job_kind: &str,
    last_stage: Option<&str>,
) -> Result<Response, Problem> {
    let (spec, d, images, megapixels) = (
        &p.prepared.spec,
        &p.dataset,
        p.prepared.images,
        p.prepared.megapixels,
    );
    let project = Some(d.project_id);
    let mut plan = tessera_jobs::reconstruct::plan(
        spec,
        caller.tenant.clone(),
        project,
        &if last_stage.is_none() {
            tessera_jobs::reconstruct::default_label(&d.name, spec, images)
        } else {
            format!("{job_kind} of {}", d.name)
        },
        images,
        megapixels,
    )
    .map_err(|e| Problem::validation(e.to_string()))?;
    plan.kind = job_kind.to_string();
    if let Some(last) = last_stage {
        let end = plan
            .tasks
            .iter()
            .position(|t| t.name == last)
            .ok_or_else(|| Problem::internal(format!("the plan has no stage {last}")))?;
        plan.tasks.truncate(end + 1);
    }
    if let Some((key, bytes)) = &p.control {
        s.engine
            .ports()
            .objects
            .put(key, bytes.clone())
            .await
            .map_err(|e| Problem::internal(format!("storing the ground control file: {e}")))?;
    }
    // A place among the tenant's reconstructions is taken before the job exists, so
    // submissions racing for the last one cannot all pass.
    let store = s.engine.ports().store.clone();
    let slot = quotas::reserve_reconstruction(store.as_ref(), &caller.tenant).await?;
    let submitted = match s.engine.submit(plan).await {
        Ok(submitted) => submitted,
        Err(e) => {
            if let Err(undo) = store.transact(vec![slot.release()]).await {
                tracing::warn!(tenant = %caller.tenant, error = %undo, "a reconstruction slot was not given back; it frees when its reservation expires");
            }
            return Err(e.into());
        }
    };
    // Recorded even when the job was submitted before: if that submission's record was
    // lost, this one counts it (a job named by two slots holds one place).
    if let Err(e) = store.transact(vec![slot.commit(submitted.job_id)]).await {
        if !e.is_conflict() {
            return Err(e.into());
        }
        tracing::warn!(tenant = %caller.tenant, job_id = %submitted.job_id, "a reconstruction slot's reservation expired before its job was recorded");
    }
    if !submitted.existing {
        p.prepared.announce(&s.engine, submitted.job_id).await;
    }
    let tasks = s.engine.job_tasks(submitted.job_id).await?;
    let job = s.engine.job(submitted.job_id).await?;
    // The client's DAG: one id per spec node (extract → match → verify → map).
    let task_ids: Vec<Value> = super::jobs::task_views(&job, &tasks)
        .into_iter()
        .map(|t| t["task_id"].clone())
        .collect();
    let recon = last_stage.is_none().then_some(submitted.job_id);
    let mut r = (
        StatusCode::ACCEPTED,
        Json(json!({
            "job_id": submitted.job_id,
            "task_ids": task_ids,
            "recon_id": recon,
            "project_id": d.project_id,
            "dataset_id": d.dataset_id,
            "provider": spec.backend.name,
            "existing": submitted.existing,
        })),
    )
        .into_response();
    r.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&format!("/v1/jobs/{}", submitted.job_id)).expect("ascii"),
    );
    Ok(r)
}

/// `POST /v1/projects/{pid}/pipelines/{recipe}`.
pub async fn submit(
    State(s): State<ApiState>,
    caller: Caller,
    Path((pid, recipe)): Path<(String, String)>,
    query: Result<Query<SubmitQuery>, axum::extract::rejection::QueryRejection>,
    body: Result<Json<PipelineRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    // sfmapi's order of answers: authentication (the extractor), ownership of what the
    // path names (404), a capability the server lacks (501, whatever else is wrong),
    // then validation.
    let project = super::projects::owned(&s, &caller, &pid).await?;
    let validate_only = query
        .map_err(|e| Problem::bad_request(format!("query: {e}")))?
        .validate_only;
    let mapper = mapper_for(&s, &recipe)?.ok_or_else(|| {
        Problem::not_found(format!(
            "unknown recipe `{recipe}`; use incremental, hierarchical or global"
        ))
    })?;
    let Json(req) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"dataset_id\": …, \"spec\": {{\"kind\": …}}}}: {e}"
        ))
    })?;
    let matches = req.matches.clone().unwrap_or(Value::Null);
    // sfmapi puts `pairs` and `matcher` at the top level; the older `matches` wrapper
    // is still read.
    let pairs = req
        .pairs
        .as_ref()
        .or(Some(&matches["pairs"]))
        .filter(|p| !p.is_null());
    let matcher = req
        .matcher
        .as_ref()
        .or(Some(&matches["matcher"]))
        .filter(|m| !m.is_null());
    let d = super::datasets::owned(&s, &caller, &req.dataset_id).await?;
    require_capabilities(&s, req.features.as_ref(), pairs, matcher)?;
    if req.spec["kind"].as_str() != Some(recipe.as_str()) {
        return Err(Problem::validation(format!(
            "spec.kind must be `{recipe}` for this recipe"
        )));
    }
    if d.project_id != project.id {
        return Err(Problem::validation(format!(
            "dataset {} is not in project {pid}",
            d.dataset_id
        )));
    }
    let sections = Sections {
        features: req.features,
        pairs: pairs.cloned(),
        matcher: matcher.cloned(),
        verify: req.verify,
        spec: Some(req.spec),
    };
    let planned = prepare(&s, d, mapper, &sections).await?;
    if validate_only {
        // What would run, and why, with nothing submitted: the CLI's `--dry-run`.
        let mut view = planned.prepared.view();
        view["dataset_id"] = json!(planned.dataset.dataset_id);
        return Ok(Json(view).into_response());
    }
    submit_plan(&s, &caller, &planned, tessera_jobs::reconstruct::KIND, None).await
}

/// `?validate_only=true` on a recipe: answer with the spec and its choices, submit nothing.
#[derive(Debug, Deserialize, Default)]
pub struct SubmitQuery {
    /// Prepare the spec without submitting it.
    #[serde(default)]
    pub validate_only: bool,
}

/// The mapper a recipe (sfmapi's `spec.kind`) names: 501 where this server lacks it,
/// `None` where sfmapi defines no such kind.
pub fn mapper_for(s: &ApiState, kind: &str) -> Result<Option<MapperKind>, Problem> {
    let mapper = match kind {
        "incremental" => MapperKind::Incremental,
        "hierarchical" => MapperKind::Hierarchical,
        "global" => MapperKind::Global,
        "spherical" => return Err(Problem::capability_unavailable("map.spherical")),
        "feed_forward" => return Err(Problem::capability_unavailable("map.feed_forward")),
        _ => return Ok(None),
    };
    let capability = format!("map.{kind}");
    if !s.capabilities.iter().any(|c| c == &capability) {
        return Err(Problem::capability_unavailable(&capability));
    }
    Ok(Some(mapper))
}

/// Plan and submit a whole reconstruction of `d` (the caller's, in the right project,
/// its capabilities checked).
pub async fn reconstruct(
    s: &ApiState,
    caller: &Caller,
    d: super::datasets::Dataset,
    mapper: MapperKind,
    sections: &Sections,
) -> Result<Response, Problem> {
    let planned = prepare(s, d, mapper, sections).await?;
    submit_plan(s, caller, &planned, tessera_jobs::reconstruct::KIND, None).await
}

/// A whole reconstruction of `d` prepared from a request's sections.
async fn prepare(
    s: &ApiState,
    d: super::datasets::Dataset,
    mapper: MapperKind,
    sections: &Sections,
) -> Result<super::pipeline_spec::Planned, Problem> {
    sections.check_provider(s)?;
    super::pipeline_spec::spec_for(
        s,
        d,
        mapper,
        sections.features.as_ref(),
        sections.pairs.as_ref(),
        sections.spec.as_ref().and_then(|m| m.get("x-tessera")),
    )
    .await
}

/// `POST /v1/datasets/{did}/features|matches|verify` (routed through
/// [`super::datasets::post_action`]).
pub async fn stage(
    s: &ApiState,
    caller: &Caller,
    did: &str,
    stage: &str,
    req: StageRequest,
) -> Result<Response, Problem> {
    let last = match stage {
        "features" => "extract",
        "matches" => "match",
        _ => "verify",
    };
    // The stage's own spec is a FeaturesSpec or a VerifySpec.
    let (features, verify) = match stage {
        "features" => (req.spec, None),
        "verify" => (None, req.spec),
        _ => (None, None),
    };
    let sections = Sections {
        features,
        pairs: req.pairs,
        matcher: req.matcher,
        verify,
        spec: None,
    };
    let d = super::datasets::owned(s, caller, did).await?;
    require_capabilities(
        s,
        sections.features.as_ref(),
        sections.pairs.as_ref(),
        sections.matcher.as_ref(),
    )?;
    sections.check_provider(s)?;
    let planned = super::pipeline_spec::spec_for(
        s,
        d,
        MapperKind::Incremental,
        sections.features.as_ref(),
        sections.pairs.as_ref(),
        None,
    )
    .await?;
    submit_plan(s, caller, &planned, stage, Some(last)).await
}
