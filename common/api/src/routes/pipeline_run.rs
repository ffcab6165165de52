//! `POST /v1/projects/{pid}/pipelines:run` (sfmapi §6.8.2): a pipeline as a list of
//! typed steps. The legacy chain `features → pairs → matches → verify → map` runs as
//! the whole reconstruction a recipe runs; any other chain that type-checks, and any
//! native processor DAG, is valid sfmapi this server does not execute (501,
//! `pipelines.custom_execution`). The typing rules are
//! `tessera_jobs::reconstruct::operations`; this module only translates.

use super::pipelines::{Sections, mapper_for, reconstruct, require_capabilities};
use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::Json;
use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::{Map, Value, json};
use tessera_jobs::reconstruct::operations::{self, DEFAULT_INITIAL_INPUTS};

const CUSTOM_EXECUTION: &str = "pipelines.custom_execution";

/// One step as the request gave it.
enum Step {
    /// A legacy operation: `"features"` or `{"op", "params"?, "provider"?}`.
    Legacy {
        op: String,
        params: Option<Value>,
        provider: Option<Value>,
    },
    /// A native processor step (`{"processor", …}`).
    Native,
}

fn field_error(path: &str, message: impl std::fmt::Display) -> Problem {
    let mut p = Problem::validation(format!("{path}: {message}"));
    p.extra.insert(
        "errors".into(),
        json!([{ "loc": path.split('.').collect::<Vec<_>>(), "msg": message.to_string() }]),
    );
    p
}

fn only_keys(obj: &Map<String, Value>, path: &str, allowed: &[&str]) -> Result<(), Problem> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(field_error(
            &format!("{path}.{k}"),
            format!("unknown field; a step may hold {}", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

fn step(i: usize, v: &Value) -> Result<Step, Problem> {
    let path = format!("steps.{i}");
    match v {
        Value::String(op) => Ok(Step::Legacy {
            op: op.clone(),
            params: None,
            provider: None,
        }),
        Value::Object(o) if o.contains_key("processor") => {
            only_keys(
                o,
                &path,
                &[
                    "ref",
                    "processor",
                    "attributes",
                    "params",
                    "provider",
                    "wires",
                ],
            )?;
            Ok(Step::Native)
        }
        Value::Object(o) => {
            only_keys(o, &path, &["op", "params", "provider"])?;
            let op = o.get("op").and_then(Value::as_str).ok_or_else(|| {
                field_error(
                    &format!("{path}.op"),
                    "a step needs `op` (a legacy operation) or `processor`",
                )
            })?;
            let params = o.get("params").filter(|p| !p.is_null()).cloned();
            if params.as_ref().is_some_and(|p| !p.is_object()) {
                return Err(field_error(&format!("{path}.params"), "must be an object"));
            }
            Ok(Step::Legacy {
                op: op.to_string(),
                params,
                provider: o.get("provider").filter(|p| !p.is_null()).cloned(),
            })
        }
        _ => Err(field_error(
            &path,
            "a step is an operation name or an object",
        )),
    }
}

/// `POST /v1/projects/{pid}/pipelines:run`.
pub async fn run(
    State(s): State<ApiState>,
    caller: Caller,
    Path(pid): Path<String>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Problem> {
    let project = super::projects::owned(&s, &caller, &pid).await?;
    let Json(body) = body.map_err(|e| {
        Problem::bad_request(format!(
            "the body must be JSON {{\"dataset_id\": …, \"steps\": [\"features\", …]}}: {e}"
        ))
    })?;
    let Value::Object(body) = body else {
        return Err(Problem::validation("the body must be a JSON object"));
    };
    only_keys(&body, "body", &["dataset_id", "initial_inputs", "steps"])?;
    let dataset_id = body
        .get("dataset_id")
        .and_then(Value::as_str)
        .ok_or_else(|| field_error("dataset_id", "is required (a dataset id)"))?;
    let initial: Vec<&str> = match body.get("initial_inputs") {
        None | Some(Value::Null) => DEFAULT_INITIAL_INPUTS.to_vec(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .ok_or_else(|| field_error(&format!("initial_inputs.{i}"), "must be a string"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(field_error("initial_inputs", "must be a list of datatypes")),
    };
    let steps: Vec<Step> = match body.get("steps") {
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .enumerate()
            .map(|(i, v)| step(i, v))
            .collect::<Result<_, _>>()?,
        _ => return Err(field_error("steps", "must be a list of at least 1 item")),
    };
    let native = steps.iter().any(|s| matches!(s, Step::Native));
    let legacy: Vec<(&str, Option<&Value>, Option<&Value>)> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Legacy {
                op,
                params,
                provider,
            } => Some((op.as_str(), params.as_ref(), provider.as_ref())),
            Step::Native => None,
        })
        .collect();
    let ops: Vec<&str> = legacy.iter().map(|(op, _, _)| *op).collect();
    if !native {
        let errors = operations::check(&initial, &ops);
        if !errors.is_empty() {
            let detail = errors
                .iter()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect::<Vec<_>>()
                .join("; ");
            let mut p = Problem::validation(format!("pipeline failed type-check: {detail}"));
            p.extra.insert(
                "errors".into(),
                errors
                    .iter()
                    .map(|e| {
                        json!({ "loc": e.path.split('.').collect::<Vec<_>>(), "msg": e.message,
                            "type": e.reason, "ctx": { "reason": e.reason, "path": e.path } })
                    })
                    .collect(),
            );
            return Err(p);
        }
    }
    let executable = !native && operations::is_executable(&ops);
    if !executable && legacy.iter().any(|(_, _, provider)| provider.is_some()) {
        let mut p = Problem::validation(
            "`provider` is accepted only on the full chain features → pairs → matches → verify → map",
        );
        p.extra
            .insert("reason".into(), "provider_unsupported".into());
        return Err(p);
    }
    let d = super::datasets::owned(&s, &caller, dataset_id).await?;
    if d.project_id != project.id {
        return Err(field_error(
            "dataset_id",
            format!("dataset {dataset_id} does not belong to project {pid}"),
        ));
    }
    if !executable {
        return Err(Problem::capability_unavailable(CUSTOM_EXECUTION));
    }
    // The executable chain, in order: each step's params are that stage's spec.
    let section = |i: usize| -> Option<Value> {
        let (_, params, provider) = legacy[i];
        let mut v = params.cloned().unwrap_or_else(|| json!({}));
        if let Some(p) = provider {
            v["provider"] = p.clone();
        }
        Some(v)
    };
    let sections = Sections {
        features: section(0),
        pairs: section(1),
        matcher: section(2),
        verify: section(3),
        spec: section(4),
    };
    let kind = sections
        .spec
        .as_ref()
        .and_then(|m| m.get("kind"))
        .map_or(Some("incremental"), Value::as_str)
        .ok_or_else(|| field_error("steps.4.params.kind", "must be a mapping kind"))?;
    let mapper = mapper_for(&s, kind)?.ok_or_else(|| {
        field_error(
            "steps.4.params.kind",
            format!("unknown mapping kind `{kind}`; use incremental, hierarchical or global"),
        )
    })?;
    require_capabilities(
        &s,
        sections.features.as_ref(),
        sections.pairs.as_ref(),
        sections.matcher.as_ref(),
    )?;
    reconstruct(&s, &caller, d, mapper, &sections).await
}
