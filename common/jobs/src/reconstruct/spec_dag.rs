//! The DAG a client sees: sfmapi's task kinds (`extract → match → verify → map`) over the
//! stages Tessera runs. Tessera's own stages stay the unit of resume, retry and caching;
//! a client sees one node per spec kind, whose state is that of its stages together:
//!
//! | node      | Tessera's stages                                   |
//! | --------- | -------------------------------------------------- |
//! | `extract` | ingest, extract                                    |
//! | `match`   | match                                              |
//! | `verify`  | verify                                             |
//! | `map`     | map, bundle_adjust, georeference, export           |
//!
//! Bundle adjustment, georeferencing and export finish what mapping produced (the model
//! a client reads), so they belong to `map`, and a recipe with default options shows
//! exactly the spec's four nodes. Each node is named by the task of its defining stage
//! (the stage of the same name), so the ids a recipe returns are real task ids.
//!
//! The hashes follow sfmapi's cache identity: `params_hash` covers the node's processing
//! parameters, `inputs_hash` is the image set's digest for `extract` and the upstream
//! node's `cache_key` after it, and `cache_key` hashes both with the runtime (Tessera's
//! and the engine's versions). They are known at submission, before anything runs.

use super::Stage;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tessera_core::spec::ReconstructionSpec;
use tessera_core::task::{Task, TaskState};

/// An sfmapi task kind Tessera's reconstruction produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecKind {
    /// Features (with ingest).
    Extract,
    /// Pair selection and matching.
    Match,
    /// Geometric verification.
    Verify,
    /// Mapping and what finishes the model.
    Map,
}

impl SpecKind {
    /// Every kind, in DAG order.
    pub const ALL: [SpecKind; 4] = [
        SpecKind::Extract,
        SpecKind::Match,
        SpecKind::Verify,
        SpecKind::Map,
    ];

    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            SpecKind::Extract => "extract",
            SpecKind::Match => "match",
            SpecKind::Verify => "verify",
            SpecKind::Map => "map",
        }
    }

    /// The stage whose task names the node.
    pub fn defining_stage(self) -> Stage {
        match self {
            SpecKind::Extract => Stage::Extract,
            SpecKind::Match => Stage::Match,
            SpecKind::Verify => Stage::Verify,
            SpecKind::Map => Stage::Map,
        }
    }

    /// The spec's parameters that decide this node's output.
    fn params(self, spec: &ReconstructionSpec) -> Value {
        let backend = json!({ "name": spec.backend.name, "version": spec.backend.version });
        match self {
            SpecKind::Extract => {
                let mut p = json!({
                    "camera_model": spec.camera_model, "max_features": spec.max_features,
                    "max_image_size": spec.max_image_size,
                    "respect_exif_orientation": spec.respect_exif_orientation, "backend": backend,
                });
                // Only where set, so the hashes of specs from before it stay as they were.
                if spec.per_image_intrinsics {
                    p["per_image_intrinsics"] = json!(true);
                }
                if spec.sift_native_scale {
                    p["sift_native_scale"] = json!(true);
                }
                p
            }
            SpecKind::Match => json!({ "pairs": spec.pairs, "backend": backend }),
            SpecKind::Verify => json!({ "backend": backend }),
            SpecKind::Map => {
                let mut p = json!({
                    "mapper": spec.mapper, "ba": spec.ba, "georef": spec.georef,
                    "exports": spec.exports, "backend": backend,
                });
                // Only where set, so the hashes of specs from before it stay as they were.
                if let Some(crs) = spec.crs {
                    p["crs"] = json!(crs);
                }
                if let Some(split) = spec.split {
                    p["split"] = json!(split);
                }
                p
            }
        }
    }
}

/// The node a stage belongs to.
pub fn kind_of(stage: Stage) -> SpecKind {
    match stage {
        Stage::Ingest | Stage::Extract => SpecKind::Extract,
        Stage::Match => SpecKind::Match,
        Stage::Verify => SpecKind::Verify,
        Stage::MapCluster
        | Stage::Map
        | Stage::BundleAdjust
        | Stage::Georeference
        | Stage::Export => SpecKind::Map,
    }
}

/// A stage by its task name (a split run's `map_cluster_<i>` included).
pub fn stage_named(name: &str) -> Option<Stage> {
    Stage::of_task(name)
}

/// A node's identity hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHashes {
    /// SHA-256 of the node's inputs.
    pub inputs_hash: String,
    /// SHA-256 of its processing parameters.
    pub params_hash: String,
    /// SHA-256 of both and the runtime.
    pub cache_key: String,
}

fn sha256(v: &Value) -> String {
    hex::encode(Sha256::digest(v.to_string().as_bytes()))
}

/// The hashes of every node, in DAG order.
pub fn hashes(spec: &ReconstructionSpec) -> Vec<(SpecKind, NodeHashes)> {
    let mut upstream = spec
        .image_set_digest
        .clone()
        .unwrap_or_else(|| sha256(&json!({ "image_set": spec.image_set })));
    SpecKind::ALL
        .into_iter()
        .map(|kind| {
            let params_hash = sha256(&kind.params(spec));
            let cache_key = sha256(&json!({
                "kind": kind.name(), "inputs": upstream, "params": params_hash,
                "runtime": { "tessera": env!("CARGO_PKG_VERSION"), "backend": spec.backend },
            }));
            let h = NodeHashes {
                inputs_hash: std::mem::replace(&mut upstream, cache_key.clone()),
                params_hash,
                cache_key,
            };
            (kind, h)
        })
        .collect()
}

/// One node as a client sees it.
#[derive(Debug, Clone)]
pub struct SpecNode<'a> {
    /// Its kind.
    pub kind: SpecKind,
    /// The defining stage's task (its id names the node).
    pub task: &'a Task,
    /// Every task of the node, in pipeline order.
    pub stages: Vec<&'a Task>,
    /// Hashes, when the job's spec could be read.
    pub hashes: Option<NodeHashes>,
}

impl SpecNode<'_> {
    /// sfmapi's task status over the node's tasks: failed or cancelled if one is;
    /// succeeded when all are; running once one has started or finished; else pending.
    pub fn status(&self) -> &'static str {
        let states: Vec<TaskState> = self.stages.iter().map(|t| t.state).collect();
        if states
            .iter()
            .any(|s| matches!(s, TaskState::Failed | TaskState::Dead))
        {
            "failed"
        } else if states.contains(&TaskState::Cancelled) {
            "cancelled"
        } else if states.iter().all(|s| *s == TaskState::Succeeded) {
            "succeeded"
        } else if states
            .iter()
            .any(|s| matches!(s, TaskState::Running | TaskState::Succeeded))
        {
            "running"
        } else {
            "pending"
        }
    }
}

/// The client's DAG over a reconstruction job's tasks; `None` when the tasks are not a
/// reconstruction's (another job kind), so the caller shows them as they are. A node
/// appears only when its defining stage is planned (a features-only job has one node).
pub fn nodes<'a>(
    spec: Option<&ReconstructionSpec>,
    tasks: &'a [Task],
) -> Option<Vec<SpecNode<'a>>> {
    let staged: Vec<(Stage, &Task)> = tasks
        .iter()
        .map(|t| stage_named(&t.name).map(|s| (s, t)))
        .collect::<Option<_>>()?;
    let hashes = spec.map(hashes);
    let mut out = Vec::new();
    for kind in SpecKind::ALL {
        let Some((_, task)) = staged.iter().find(|(s, _)| *s == kind.defining_stage()) else {
            continue;
        };
        let mut stages: Vec<(Stage, &Task)> = staged
            .iter()
            .filter(|(s, _)| kind_of(*s) == kind)
            .copied()
            .collect();
        stages.sort_by_key(|(s, _)| Stage::ALL.iter().position(|x| x == s));
        out.push(SpecNode {
            kind,
            task,
            stages: stages.into_iter().map(|(_, t)| t).collect(),
            hashes: hashes
                .as_ref()
                .and_then(|h| h.iter().find(|(k, _)| *k == kind))
                .map(|(_, h)| h.clone()),
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::spec::*;

    const DIGEST: &str = "6b1f0c0e2d9a4c3b8e7f6a5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a291";

    fn spec() -> ReconstructionSpec {
        serde_json::from_value(json!({
            "project": "01JA0000000000000000000000", "image_set": "images/x",
            "backend": {"name": "pycolmap", "version": "4.2.1"},
            "camera_model": "SIMPLE_RADIAL", "max_features": 4096, "max_image_size": 1600,
            "pairs": {"strategy": "exhaustive"}, "mapper": "incremental", "ba": "standard",
            "georef": {"mode": "none"}, "exports": ["points-bin"],
            "respect_exif_orientation": true, "image_set_digest": DIGEST, "priority": 0
        }))
        .unwrap()
    }

    #[test]
    fn every_stage_belongs_to_one_of_the_four_nodes() {
        for s in Stage::ALL {
            let task = match s {
                Stage::MapCluster => Stage::cluster_task(3),
                s => s.name().to_string(),
            };
            assert_eq!(stage_named(&task), Some(s));
            assert!(SpecKind::ALL.contains(&kind_of(s)));
        }
        for not_a_task in ["map_cluster", "map_cluster_", "map_cluster_x", "mapper"] {
            assert_eq!(stage_named(not_a_task), None);
        }
        for k in SpecKind::ALL {
            assert_eq!(kind_of(k.defining_stage()), k);
        }
    }

    #[test]
    fn hashes_chain_and_change_with_what_decides_the_output() {
        let base = hashes(&spec());
        assert_eq!(base.len(), 4);
        assert_eq!(base[0].1.inputs_hash, DIGEST, "extract reads the image set");
        for w in base.windows(2) {
            assert_eq!(w[1].1.inputs_hash, w[0].1.cache_key, "keys chain");
        }
        for (_, h) in &base {
            for x in [&h.inputs_hash, &h.params_hash, &h.cache_key] {
                assert!(
                    x.len() == 64 && x.bytes().all(|b| b.is_ascii_hexdigit()),
                    "{x}"
                );
            }
        }
        let mut other = spec();
        other.mapper = MapperKind::Global;
        let changed = hashes(&other);
        assert_eq!(
            changed[2], base[2],
            "the mapper does not change verification"
        );
        assert_ne!(changed[3].1.params_hash, base[3].1.params_hash);
        let mut engine = spec();
        engine.backend.version = Some("4.3.0".into());
        assert!(
            hashes(&engine)
                .iter()
                .zip(&base)
                .all(|(a, b)| a.1.cache_key != b.1.cache_key),
            "another engine never shares a cache identity"
        );
        assert_eq!(hashes(&spec()), base, "deterministic");
    }
}
