//! JSON bodies as DynamoDB attribute values and back.
//!
//! A body is stored as a map (`M`) rather than a JSON string so that conditions on its
//! top-level fields (`FieldEq`, a task's `state` and fencing `epoch`) are evaluated by
//! DynamoDB itself, inside the transaction, with no read first.
//!
//! Numbers travel as DynamoDB's decimal strings: integers stay integers; a float comes
//! back as the shortest decimal DynamoDB keeps, so `1.0` may come back as `1` (the same
//! value, and serde reads it into an `f64` field unchanged).

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Number, Value};
use std::collections::HashMap;

/// A JSON value as an attribute value.
pub fn to_attr(v: &Value) -> AttributeValue {
    match v {
        Value::Null => AttributeValue::Null(true),
        Value::Bool(b) => AttributeValue::Bool(*b),
        Value::Number(n) => AttributeValue::N(n.to_string()),
        Value::String(s) => AttributeValue::S(s.clone()),
        Value::Array(a) => AttributeValue::L(a.iter().map(to_attr).collect()),
        Value::Object(o) => AttributeValue::M(to_attr_map(o)),
    }
}

/// A JSON object as an attribute map.
pub fn to_attr_map(o: &Map<String, Value>) -> HashMap<String, AttributeValue> {
    o.iter().map(|(k, v)| (k.clone(), to_attr(v))).collect()
}

/// An attribute value as JSON. Sets and binaries, which Tessera never writes, are
/// refused so that a foreign item is reported instead of half-read.
pub fn from_attr(a: &AttributeValue) -> Result<Value, String> {
    Ok(match a {
        AttributeValue::Null(_) => Value::Null,
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::S(s) => Value::String(s.clone()),
        AttributeValue::N(n) => Value::Number(number(n)?),
        AttributeValue::L(l) => Value::Array(l.iter().map(from_attr).collect::<Result<_, _>>()?),
        AttributeValue::M(m) => Value::Object(from_attr_map(m)?),
        other => return Err(format!("unsupported attribute type {other:?}")),
    })
}

/// An attribute map as a JSON object.
pub fn from_attr_map(m: &HashMap<String, AttributeValue>) -> Result<Map<String, Value>, String> {
    m.iter()
        .map(|(k, v)| Ok((k.clone(), from_attr(v)?)))
        .collect()
}

fn number(n: &str) -> Result<Number, String> {
    if let Ok(i) = n.parse::<i64>() {
        return Ok(i.into());
    }
    if let Ok(u) = n.parse::<u64>() {
        return Ok(u.into());
    }
    n.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .ok_or_else(|| format!("number `{n}` does not fit a JSON number"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_round_trip() {
        let v = json!({
            "s": "x", "i": -3, "u": u64::MAX, "f": 0.25, "b": true, "n": null,
            "l": [1, "a", {"k": []}], "m": {"nested": {"deep": 1.5e-7}}, "e": ""
        });
        let back = from_attr(&to_attr(&v)).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn foreign_types_are_refused() {
        assert!(from_attr(&AttributeValue::Ss(vec!["a".into()])).is_err());
        assert!(from_attr(&AttributeValue::N("not a number".into())).is_err());
    }
}
