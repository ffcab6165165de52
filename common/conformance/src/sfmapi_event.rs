//! sfmapi's `ProgressEvent` v1, as vendored data (`data/sfmapi_progress_event_v1.json`,
//! which names its source), and a check of one event against it.
//!
//! The check is as strict as the spec's models or stricter: an integer field takes only a
//! JSON integer, never a string of digits. A kind the spec does not have passes only
//! under Tessera's extension prefix, and only with the envelope every event carries.

use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// The vendored schema's text.
const VENDORED: &str = include_str!("../data/sfmapi_progress_event_v1.json");

/// The start of Tessera's own kinds (the same rule as `tessera_core::event::sfmapi`,
/// restated here so that this check does not take the rule from the code it checks).
pub const EXTENSION_PREFIX: &str = "x-tessera.";

/// The vendored schema.
pub fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| serde_json::from_str(VENDORED).expect("the vendored schema parses"))
}

/// The phases the spec lists.
pub fn phases() -> BTreeSet<String> {
    schema()["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| p.as_str().expect("a phase name").to_string())
        .collect()
}

/// The kinds the spec has.
pub fn kinds() -> BTreeSet<String> {
    schema()["kinds"]
        .as_object()
        .expect("kinds")
        .keys()
        .cloned()
        .collect()
}

/// What is wrong with one event, each naming the field; empty when it conforms.
pub fn violations(event: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(obj) = event.as_object() else {
        return vec![format!("an event is a JSON object, not {event}")];
    };
    let schema = schema();
    fields(obj, &schema["envelope"], "the envelope", &mut out);
    if obj.get("schema_version") != Some(&schema["schema_version"]) {
        out.push(format!(
            "schema_version is {}, not {}",
            obj.get("schema_version").unwrap_or(&Value::Null),
            schema["schema_version"]
        ));
    }
    match obj.get("kind").and_then(Value::as_str) {
        None => out.push("kind is missing or not a string".into()),
        Some(kind) => match schema["kinds"].get(kind) {
            Some(rule) => fields(obj, rule, kind, &mut out),
            None if kind.starts_with(EXTENSION_PREFIX) => {}
            None => out.push(format!(
                "kind `{kind}` is neither one of the spec's ({}) nor an extension kind ({EXTENSION_PREFIX}…)",
                kinds().into_iter().collect::<Vec<_>>().join(", ")
            )),
        },
    }
    out
}

fn fields(obj: &Map<String, Value>, rule: &Value, what: &str, out: &mut Vec<String>) {
    for (name, ty) in rule["required"].as_object().into_iter().flatten() {
        match obj.get(name) {
            None | Some(Value::Null) => out.push(format!("{what}: `{name}` is required")),
            Some(v) => typed(name, v, ty, what, out),
        }
    }
    for (name, ty) in rule["optional"].as_object().into_iter().flatten() {
        match obj.get(name) {
            None | Some(Value::Null) => {}
            Some(v) => typed(name, v, ty, what, out),
        }
    }
}

fn typed(name: &str, v: &Value, ty: &Value, what: &str, out: &mut Vec<String>) {
    let ok = match ty {
        Value::Array(allowed) => allowed.contains(v),
        Value::String(t) => match t.as_str() {
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "string" => v.is_string(),
            "object" => v.is_object(),
            "datetime" => v.as_str().is_some_and(|s| {
                time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                    .is_ok()
            }),
            "phase" => {
                v.is_string() && schema()["phases"].as_array().is_some_and(|p| p.contains(v))
            }
            other => panic!("the vendored schema names an unknown type `{other}`"),
        },
        other => panic!("the vendored schema has a type that is not a name or a list: {other}"),
    };
    if !ok {
        let wanted = match ty.as_str() {
            Some("phase") => "one of the spec's phases".to_string(),
            Some("integer") => "an integer".to_string(),
            Some(t) => format!("a {t}"),
            None => format!("one of {ty}"),
        };
        out.push(format!("{what}: `{name}` = {v} is not {wanted}"));
    }
}
