//! Support for tests that fuzz parsers of outside input (S3 and SQS events, job specs):
//! structure-aware mutation of a valid document reaches far deeper than random text.

use serde_json::Value;

/// Replace one node of `doc` — found by walking `path` (each step picks the child at
/// `index % children`) — with `with`, or remove it from its object when `with` is
/// `None`. The walk stops early at a leaf, which is then the node replaced.
pub fn mutate(doc: &mut Value, path: &[usize], with: Option<Value>) {
    let Some((step, rest)) = path.split_first() else {
        if let Some(v) = with {
            *doc = v;
        }
        return;
    };
    match doc {
        Value::Object(m) if !m.is_empty() => {
            let key = m.keys().nth(step % m.len()).cloned().expect("in range");
            if rest.is_empty() && with.is_none() {
                m.remove(&key);
            } else {
                mutate(m.get_mut(&key).expect("present"), rest, with);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let i = step % a.len();
            if rest.is_empty() && with.is_none() {
                a.remove(i);
            } else {
                mutate(&mut a[i], rest, with);
            }
        }
        leaf => {
            if let Some(v) = with {
                *leaf = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mutate;
    use serde_json::json;

    #[test]
    fn replaces_and_removes_nodes() {
        let mut d = json!({"a": {"b": [1, 2]}, "c": 3});
        mutate(&mut d, &[0, 0, 1], Some(json!("x")));
        assert_eq!(d["a"]["b"][1], "x");
        mutate(&mut d, &[1], None);
        assert!(d.get("c").is_none());
    }
}
