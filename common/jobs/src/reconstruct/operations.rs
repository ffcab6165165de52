//! sfmapi's typed operations (§6.8.2): the flat chain of legacy operations a client may
//! send to `pipelines:run`, type-checked before any job exists. Each operation consumes
//! datatypes that an earlier step produced (or the request gave as initial inputs) and
//! produces one; types match by exact name.
//!
//! Tessera runs one chain of them, the whole reconstruction ([`EXECUTABLE`]); a chain
//! that type-checks but is another shape is valid sfmapi that this server does not
//! execute (`pipelines.custom_execution`).

/// One legacy operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// Its id, as a step's `op` names it.
    pub id: &'static str,
    /// What it needs, produced upstream.
    pub consumes: &'static [&'static str],
    /// What it makes.
    pub produces: &'static str,
}

const fn op(
    id: &'static str,
    consumes: &'static [&'static str],
    produces: &'static str,
) -> Operation {
    Operation {
        id,
        consumes,
        produces,
    }
}

/// Every datatype an operation consumes or produces.
pub const DATATYPES: &[&str] = &[
    "image_sequence",
    "feature_set",
    "pair_set",
    "match_graph",
    "sparse_model",
    "projection",
];

/// The legacy operations sfmapi defines.
pub const OPERATIONS: &[Operation] = &[
    op("features", &["image_sequence"], "feature_set"),
    op("pairs", &["feature_set"], "pair_set"),
    op("matches", &["feature_set", "pair_set"], "match_graph"),
    op("verify", &["match_graph"], "match_graph"),
    op("map", &["feature_set", "match_graph"], "sparse_model"),
    op(
        "triangulate",
        &["sparse_model", "match_graph"],
        "sparse_model",
    ),
    op("refine", &["sparse_model"], "sparse_model"),
    op("optimize_poses", &["sparse_model"], "sparse_model"),
    op("relocalize", &["sparse_model"], "sparse_model"),
    op("merge", &["sparse_model"], "sparse_model"),
    op("georegister", &["sparse_model"], "sparse_model"),
    op("undistort", &["sparse_model"], "sparse_model"),
    op("project", &["image_sequence"], "projection"),
];

/// The chain Tessera executes: one reconstruction job.
pub const EXECUTABLE: [&str; 5] = ["features", "pairs", "matches", "verify", "map"];

/// What a client gives when it names no initial inputs.
pub const DEFAULT_INITIAL_INPUTS: [&str; 1] = ["image_sequence"];

/// Why a chain does not type-check; `path` names the field (`steps.3.op`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    /// sfmapi's reason code (`unknown_processor`, `missing_required_port`, …).
    pub reason: &'static str,
    /// The request field at fault.
    pub path: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// The operation `id` names.
pub fn operation(id: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|o| o.id == id)
}

/// Type-check a chain: every problem, in step order; empty when it checks.
pub fn check(initial_inputs: &[&str], ops: &[&str]) -> Vec<TypeError> {
    let mut errors = Vec::new();
    let mut available: Vec<&str> = Vec::new();
    for (i, input) in initial_inputs.iter().enumerate() {
        if !DATATYPES.contains(input) {
            errors.push(TypeError {
                reason: "unknown_datatype",
                path: format!("initial_inputs.{i}"),
                message: format!(
                    "unknown datatype '{input}'; datatypes are {}",
                    DATATYPES.join(", ")
                ),
            });
        } else if available.contains(input) {
            errors.push(TypeError {
                reason: "duplicate_initial_input",
                path: format!("initial_inputs.{i}"),
                message: format!("'{input}' is given twice"),
            });
        } else {
            available.push(input);
        }
    }
    for (i, id) in ops.iter().enumerate() {
        let Some(o) = operation(id) else {
            errors.push(TypeError {
                reason: "unknown_processor",
                path: format!("steps.{i}.op"),
                message: format!(
                    "unknown operation '{id}'; operations are {}",
                    OPERATIONS
                        .iter()
                        .map(|o| o.id)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
            continue;
        };
        let missing: Vec<&str> = o
            .consumes
            .iter()
            .copied()
            .filter(|t| !available.contains(t))
            .collect();
        if !missing.is_empty() {
            errors.push(TypeError {
                reason: "missing_required_port",
                path: format!("steps.{i}.op"),
                message: format!(
                    "step {i} ('{id}') is missing input(s): {}; upstream produced: {}",
                    missing.join(", "),
                    if available.is_empty() {
                        "nothing".to_string()
                    } else {
                        available.join(", ")
                    }
                ),
            });
        }
        if !available.contains(&o.produces) {
            available.push(o.produces);
        }
    }
    errors
}

/// Whether a (type-checked) chain is the one Tessera executes.
pub fn is_executable(ops: &[&str]) -> bool {
    ops == EXECUTABLE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_chain_checks_and_is_executable() {
        assert!(check(&DEFAULT_INITIAL_INPUTS, &EXECUTABLE).is_empty());
        assert!(is_executable(&EXECUTABLE));
    }

    #[test]
    fn a_skipped_producer_names_the_missing_datatype() {
        let e = check(&DEFAULT_INITIAL_INPUTS, &["features", "map"]);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].reason, "missing_required_port");
        assert_eq!(e[0].path, "steps.1.op");
        assert!(e[0].message.contains("match_graph"), "{}", e[0].message);
        assert!(!e[0].message.contains("feature_set,"), "{}", e[0].message);
    }

    #[test]
    fn unknown_operations_and_datatypes_are_named() {
        let e = check(&["image_sequence", "pixels"], &["frobnicate"]);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].message.contains("pixels") && e[0].reason == "unknown_datatype");
        assert!(e[1].message.contains("frobnicate") && e[1].reason == "unknown_processor");
        let dup = check(&["image_sequence", "image_sequence"], &["features"]);
        assert_eq!(dup[0].reason, "duplicate_initial_input");
    }

    #[test]
    fn a_valid_partial_chain_is_not_executable() {
        let ops = ["features", "pairs", "matches"];
        assert!(check(&DEFAULT_INITIAL_INPUTS, &ops).is_empty());
        assert!(!is_executable(&ops));
        // A chain may start from a given model.
        assert!(check(&["sparse_model"], &["refine", "georegister"]).is_empty());
    }
}
