//! Splitting a run into clusters: the settings a spec carries and their checks.

use super::{MapperKind, Problems, SpecError};
use serde::{Deserialize, Serialize};

/// Mapping in overlapping clusters (split and merge): the photos are cut into clusters
/// of about `cluster_size`, by GPS where most photos carry it and by the match graph
/// otherwise; each cluster is mapped as a task of its own (in parallel, retried alone),
/// and the cluster models are joined through the photos they share, re-triangulated and
/// bundle-adjusted together. A cluster that cannot be joined is kept as a sub-model.
/// With the hierarchical mapper the clusters are COLMAP's own, in one process, sized by
/// these numbers (its leaf size and image overlap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitSpec {
    /// Photos per cluster before the overlap is added.
    pub cluster_size: u32,
    /// Photos each cluster takes from beyond its edge (those it shares the most matches
    /// with), which the merge aligns the clusters through.
    pub overlap: u32,
}

impl SplitSpec {
    /// The least cluster: fewer photos rarely map.
    pub const MIN_CLUSTER: u32 = 5;
    /// The least overlap: a similarity needs three shared camera centres.
    pub const MIN_OVERLAP: u32 = 3;

    /// Clusters of `size` photos with the overlap given when none is: a third of the
    /// cluster, at least [`SplitSpec::MIN_OVERLAP`].
    pub fn of_size(size: u32) -> Self {
        SplitSpec {
            cluster_size: size,
            overlap: size.div_ceil(3).max(Self::MIN_OVERLAP).min(size),
        }
    }

    /// How many clusters `photos` photos are cut into (one: no split).
    pub fn clusters_for(&self, photos: usize) -> usize {
        photos.div_ceil(self.cluster_size.max(1) as usize).max(1)
    }

    /// The most clusters one run is cut into: each is a task (a Batch job on AWS) with
    /// its own copy of the match database.
    pub const MAX_CLUSTERS: usize = 256;

    /// Refuse a split that would cut `photos` photos into more than
    /// [`SplitSpec::MAX_CLUSTERS`] clusters, naming the field.
    pub fn check_count(&self, photos: usize) -> Result<(), SpecError> {
        let clusters = self.clusters_for(photos);
        let mut p = Problems::default();
        if clusters > Self::MAX_CLUSTERS {
            p.add(
                "split.cluster_size",
                format!(
                    "{photos} photos in clusters of {} make {clusters} clusters (at most {}); use clusters of at least {}",
                    self.cluster_size,
                    Self::MAX_CLUSTERS,
                    photos.div_ceil(Self::MAX_CLUSTERS)
                ),
            );
        }
        p.finish()
    }
}

impl SplitSpec {
    /// Its own fields, and whether `mapper` can map in clusters.
    pub(super) fn check(&self, p: &mut Problems, mapper: MapperKind) {
        if !(SplitSpec::MIN_CLUSTER..=10_000).contains(&self.cluster_size) {
            p.add(
                "split.cluster_size",
                format!(
                    "{} is out of range; use {} to 10000 photos",
                    self.cluster_size,
                    SplitSpec::MIN_CLUSTER
                ),
            );
        }
        if self.overlap < SplitSpec::MIN_OVERLAP || self.overlap > self.cluster_size {
            p.add(
                "split.overlap",
                format!(
                    "{} is out of range; use {} (three shared photos align two clusters) up to the cluster size",
                    self.overlap,
                    SplitSpec::MIN_OVERLAP
                ),
            );
        }
        // The incremental mapper's clusters are Tessera's tasks; the hierarchical mapper's
        // are its own, sized by the split. The global mapper has none.
        if mapper == MapperKind::Global {
            p.add(
                "split",
                "the global mapper maps every photo at once; use mapper incremental (clusters as tasks) or hierarchical (COLMAP's own clusters), or leave split out",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client is told which field to change, by the name it sent.
    #[test]
    fn each_problem_names_the_field_as_the_spec_spells_it() {
        let mut p = Problems::default();
        SplitSpec {
            cluster_size: 3,
            overlap: 2,
        }
        .check(&mut p, MapperKind::Global);
        let fields: Vec<String> = p.0.iter().map(|e| e.field.clone()).collect();
        assert_eq!(
            fields,
            ["split.cluster_size", "split.overlap", "split"],
            "{fields:?}"
        );
    }
}
