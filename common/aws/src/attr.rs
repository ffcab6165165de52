//! JSON bodies as DynamoDB attribute values and back.
//!
//! A body is stored as a map (`M`) rather than a JSON string so that conditions on its
//! top-level fields (`FieldEq`, a task's `state` and fencing `epoch`) are evaluated by
//! DynamoDB itself, inside the transaction, with no read first.
//!
//! Numbers travel as DynamoDB's decimal strings: integers stay integers; a float comes
//! back as the shortest decimal DynamoDB keeps, so `1.0` may come back as `1` (the same
//! value, and serde reads it into an `f64` field unchanged).

//!
//! A body's large top-level fields are stored packed: a list or map whose JSON is
//! [`PACK_FROM_BYTES`] or more is written as a binary attribute holding that JSON
//! deflated (zlib, which `python3 -c "import zlib"` and every other tool reads). DynamoDB
//! bills a write by the larger of the item before and after it, 1 unit per KB, twice in a
//! transaction, and a photo row is rewritten at every step of its processing: a
//! 150-face group photo's row was 69 KB as a map, 136 write units a write, enough for its
//! one partition to take over 300 units in one second (the load rehearsal, issue 23).
//! Packed, the faces' JSON (repeated field names, fractions of few distinct digits)
//! shrinks about three times. A packed field is one value to DynamoDB: conditions compare
//! top-level scalars (a state, a revision), never a packed field's insides.
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use flate2::Compression;
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use serde_json::{Map, Number, Value};
use std::collections::HashMap;
use std::io::{Read, Write};

/// A top-level list or map whose JSON is at least this long is stored packed. Below two
/// write units, packing saves at most one, and the item stays readable in the console.
pub const PACK_FROM_BYTES: usize = 2048;

/// The most one packed field may inflate to. DynamoDB's items are at most 400 KB, and
/// no field Tessera writes comes near this unpacked; a field that inflates past it is
/// damaged or hostile, and reading it is refused rather than allocating without bound.
pub const UNPACK_LIMIT_BYTES: u64 = 8 << 20;

/// A top-level body field as an attribute value: packed when large (see the module's
/// doc), else as [`to_attr`]. Puts, `Set` writes and `FieldEq` conditions all go through
/// here, so one value is always stored, and compared, the same way.
pub fn body_field(v: &Value) -> AttributeValue {
    if matches!(v, Value::Array(_) | Value::Object(_)) {
        let json = serde_json::to_vec(v).expect("a JSON value serializes");
        if json.len() >= PACK_FROM_BYTES {
            let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
            let packed = z
                .write_all(&json)
                .and_then(|()| z.finish())
                .expect("deflating into memory cannot fail");
            // Random-looking data does not shrink; then the map is the better form.
            if packed.len() < json.len() {
                return AttributeValue::B(Blob::new(packed));
            }
        }
    }
    to_attr(v)
}

/// A body (a JSON object) as an attribute map, its large fields packed.
pub fn body_to_attr_map(o: &Map<String, Value>) -> HashMap<String, AttributeValue> {
    o.iter().map(|(k, v)| (k.clone(), body_field(v))).collect()
}

/// A body's attribute map as JSON: packed fields are inflated (at most
/// [`UNPACK_LIMIT_BYTES`] each) and parsed back.
pub fn body_from_attr_map(
    m: &HashMap<String, AttributeValue>,
) -> Result<Map<String, Value>, String> {
    m.iter()
        .map(|(k, v)| {
            let value = match v {
                AttributeValue::B(b) => {
                    unpack(b.as_ref()).map_err(|e| format!("field `{k}`: {e}"))?
                }
                other => from_attr(other).map_err(|e| format!("field `{k}`: {e}"))?,
            };
            Ok((k.clone(), value))
        })
        .collect()
}

fn unpack(packed: &[u8]) -> Result<Value, String> {
    let mut json = Vec::new();
    ZlibDecoder::new(packed)
        .take(UNPACK_LIMIT_BYTES + 1)
        .read_to_end(&mut json)
        .map_err(|e| format!("a packed field that does not inflate ({e})"))?;
    if json.len() as u64 > UNPACK_LIMIT_BYTES {
        return Err(format!(
            "a packed field that inflates past {UNPACK_LIMIT_BYTES} bytes"
        ));
    }
    serde_json::from_slice(&json).map_err(|e| format!("a packed field that is not JSON ({e})"))
}

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

/// An attribute value as JSON. Sets, and binaries below a body's top level, which Tessera
/// never writes, are refused so that a foreign item is reported instead of half-read.
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
        let nested = HashMap::from([(
            "m".to_string(),
            AttributeValue::M(HashMap::from([(
                "b".to_string(),
                AttributeValue::B(Blob::new(vec![1, 2])),
            )])),
        )]);
        assert!(
            body_from_attr_map(&nested).is_err(),
            "only top-level fields are packed"
        );
    }

    /// A crowd's faces as a photo row holds them: what the packing exists for. Numbers of
    /// 17 significant digits, which read back exactly only with serde_json's
    /// `float_roundtrip` (the workspace enables it).
    fn faces(n: usize) -> Value {
        let f = |i: usize, k: usize| ((i * 7919 + k * 104_729) % 100_000) as f64 / 99_991.0;
        Value::Array(
            (0..n)
                .map(|i| {
                    json!({
                        "bbox": {"x": f(i, 1), "y": f(i, 2), "w": f(i, 3), "h": f(i, 4)},
                        "landmarks": (0..5).map(|k| [f(i, 10 + k), f(i, 20 + k)]).collect::<Vec<_>>(),
                        "score": f(i, 5),
                        "evidence": {"px": f(i, 6), "roll": -f(i, 7)},
                        "decision": {"decision": "not_opted_out", "best": f(i, 8)},
                        "cluster": format!("01M96SW23601QBP61XYPP9{i:04}"),
                    })
                })
                .collect(),
        )
    }

    #[test]
    fn large_fields_are_packed_and_read_back_unchanged() {
        let body =
            json!({"state": "published", "edits_rev": 3, "faces": faces(150), "few": faces(1)});
        let map = body_to_attr_map(body.as_object().unwrap());
        let AttributeValue::B(packed) = &map["faces"] else {
            panic!("150 faces must be packed, got {:?}", map["faces"]);
        };
        let json_len = serde_json::to_vec(&body["faces"]).unwrap().len();
        assert!(
            packed.as_ref().len() * 2 < json_len,
            "packing must at least halve a crowd's faces: {} of {json_len} bytes",
            packed.as_ref().len()
        );
        assert!(
            matches!(map["few"], AttributeValue::L(_)),
            "one face stays a list"
        );
        assert!(
            matches!(map["state"], AttributeValue::S(_)),
            "scalars stay as they are"
        );
        assert_eq!(Value::Object(body_from_attr_map(&map).unwrap()), body);
        // The same value packs to the same bytes: a `FieldEq` on it compares equal.
        assert_eq!(body_field(&body["faces"]), map["faces"]);
    }

    #[test]
    fn a_damaged_or_hostile_packed_field_is_refused_naming_it() {
        let corrupt = HashMap::from([(
            "faces".to_string(),
            AttributeValue::B(Blob::new(b"not zlib at all".to_vec())),
        )]);
        let e = body_from_attr_map(&corrupt).unwrap_err();
        assert!(e.contains("`faces`") && e.contains("inflate"), "{e}");

        // 64 MiB of zeros deflate to about 64 KB: inflating stops at the limit.
        let mut z = ZlibEncoder::new(Vec::new(), Compression::best());
        let zeros = vec![b'0'; 1 << 20];
        for _ in 0..64 {
            z.write_all(&zeros).unwrap();
        }
        let bomb = z.finish().unwrap();
        assert!(
            bomb.len() < 400 * 1024,
            "fits one DynamoDB item: {}",
            bomb.len()
        );
        let m = HashMap::from([("faces".to_string(), AttributeValue::B(Blob::new(bomb)))]);
        let e = body_from_attr_map(&m).unwrap_err();
        assert!(e.contains("`faces`") && e.contains("inflates past"), "{e}");
    }
}
