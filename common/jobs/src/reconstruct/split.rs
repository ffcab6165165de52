//! Cutting a run's photos into overlapping clusters (split and merge): each cluster is
//! mapped as a task of its own and the merge joins them through the photos they share
//! (`tessera_sfm::merge`).
//!
//! The cut is by place where most photos carry GPS (a survey's clusters are patches of
//! ground, as OpenDroneMap's split-merge makes them) and along the match graph otherwise.
//! Each cluster then takes the photos beyond its edge that it shares the most verified
//! matches with: those are what two clusters are aligned through, so they are chosen by
//! the matches, not by distance.
//!
//! Invariant: the same photos, graph and settings give the same clusters, so every
//! cluster task (and a retry of one) computes its own share without another task's
//! help.

use std::collections::{BTreeMap, BTreeSet};
use tessera_core::spec::SplitSpec;
use tessera_sfm::colmap::database::VerifiedPair;

/// Share of photos with a position above which the cut is by place.
const GPS_SHARE: f64 = 0.8;

/// One photo as the cut sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Its name.
    pub name: String,
    /// East and north in metres, where it carries GPS.
    pub position: Option<[f64; 2]>,
}

/// One cluster.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Cluster {
    /// The photos that are this cluster's own (every photo is in exactly one core).
    pub core: Vec<String>,
    /// The photos it takes from its neighbours' cores.
    pub shared: Vec<String>,
}

impl Cluster {
    /// Every photo it maps, sorted.
    pub fn photos(&self) -> Vec<String> {
        let mut all: Vec<String> = self.core.iter().chain(&self.shared).cloned().collect();
        all.sort();
        all
    }
}

/// How the cut was made, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CutBy {
    /// By the photos' positions.
    Place,
    /// Along the match graph.
    Matches,
}

/// Cut `members` into `k` clusters, each taking `overlap` photos from beyond its edge.
pub fn partition(
    members: &[Member],
    graph: &[VerifiedPair],
    k: usize,
    overlap: usize,
) -> (Vec<Cluster>, CutBy) {
    let mut members: Vec<&Member> = members.iter().collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    let k = k.clamp(1, members.len().max(1));
    let weights = Weights::of(graph);
    let placed = members.iter().filter(|m| m.position.is_some()).count();
    let by_place = placed >= k && placed as f64 >= GPS_SHARE * members.len() as f64;
    let cores = if by_place {
        let mut positioned: Vec<(&str, [f64; 2])> = members
            .iter()
            .filter_map(|m| Some((m.name.as_str(), m.position?)))
            .collect();
        let mut cores = Vec::new();
        bisect(&mut positioned, k, &mut cores);
        // Photos without a position go where their strongest match went.
        for m in members.iter().filter(|m| m.position.is_none()) {
            let at = (0..cores.len())
                .max_by_key(|&i| {
                    (
                        weights.to_set(&m.name, &cores[i]),
                        std::cmp::Reverse(cores[i].len()),
                    )
                })
                .expect("k ≥ 1");
            cores[at].push(m.name.clone());
        }
        cores
    } else {
        let order = graph_order(&members, &weights);
        chunks(&order, k)
    };
    let cores: Vec<Vec<String>> = cores
        .into_iter()
        .map(|mut core| {
            core.sort();
            core
        })
        .collect();
    let clusters = (0..cores.len())
        .map(|i| Cluster {
            core: cores[i].clone(),
            shared: shared_with(i, &cores, &weights, overlap),
        })
        .collect();
    (
        clusters,
        if by_place {
            CutBy::Place
        } else {
            CutBy::Matches
        },
    )
}

/// Photos one cluster takes from beyond its edge, `overlap` or more: first up to
/// [`FROM_EACH`] from every neighbouring core (one it shares at least a tenth of its
/// strongest neighbour's matches with), those it shares the most matches with, so
/// that every pair of neighbours can be aligned through photos both map; then the most
/// matched of the rest, up to `overlap` in all.
fn shared_with(i: usize, cores: &[Vec<String>], weights: &Weights, overlap: usize) -> Vec<String> {
    let ranked = |j: usize| -> Vec<(u64, &str)> {
        let mut r: Vec<(u64, &str)> = cores[j]
            .iter()
            .map(|n| (weights.to_set(n, &cores[i]), n.as_str()))
            .filter(|(w, _)| *w > 0)
            .collect();
        r.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        r
    };
    let links: Vec<(u64, usize)> = (0..cores.len())
        .filter(|&j| j != i)
        .map(|j| (ranked(j).iter().map(|(w, _)| w).sum::<u64>(), j))
        .filter(|(w, _)| *w > 0)
        .collect();
    let strongest = links.iter().map(|(w, _)| *w).max().unwrap_or(0);
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    for (_, j) in links.iter().filter(|(w, _)| *w * 10 >= strongest) {
        for (_, n) in ranked(*j).into_iter().take(FROM_EACH.min(overlap)) {
            taken.insert(n);
        }
    }
    let mut rest: Vec<(u64, &str)> = links.iter().flat_map(|(_, j)| ranked(*j)).collect();
    rest.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    for (_, n) in rest {
        if taken.len() >= overlap {
            break;
        }
        taken.insert(n);
    }
    taken.into_iter().map(str::to_string).collect()
}

/// Photos a cluster takes from each neighbouring core at least: three camera centres
/// fix the similarity the merge aligns two clusters by.
const FROM_EACH: usize = 3;

/// Balanced cut by place: split along the wider extent at the share of the photos that
/// the halves' cluster counts ask for, until each part is one cluster.
fn bisect(items: &mut [(&str, [f64; 2])], k: usize, out: &mut Vec<Vec<String>>) {
    if k <= 1 || items.len() <= 1 {
        out.push(items.iter().map(|(n, _)| n.to_string()).collect());
        for _ in 1..k {
            out.push(Vec::new());
        }
        return;
    }
    let span = |axis: usize| {
        let (lo, hi) = items.iter().fold((f64::MAX, f64::MIN), |(lo, hi), (_, p)| {
            (lo.min(p[axis]), hi.max(p[axis]))
        });
        hi - lo
    };
    let axis = if span(0) >= span(1) { 0 } else { 1 };
    items.sort_by(|a, b| a.1[axis].total_cmp(&b.1[axis]).then(a.0.cmp(b.0)));
    let left_k = k / 2;
    let cut = items.len() * left_k / k;
    let (left, right) = items.split_at_mut(cut);
    bisect(left, left_k, out);
    bisect(right, k - left_k, out);
}

/// The photos in an order where matched photos stand together, so that runs of it are
/// clusters: a walk from the first by name, always on to the current photo's most
/// matched unvisited neighbour; where it has none, on to the unvisited photo with the
/// most matches to any visited one; where no unvisited photo is matched to a visited
/// one, from the first left by name. A ring is walked around, a strip along.
fn graph_order(members: &[&Member], weights: &Weights) -> Vec<String> {
    let mut left: BTreeSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    let mut best: BTreeMap<&str, u64> = BTreeMap::new();
    let mut order = Vec::new();
    while let Some(start) = left.iter().next().copied() {
        let mut next = Some(start);
        while let Some(n) = next {
            left.remove(n);
            best.remove(n);
            order.push(n.to_string());
            for (m, w) in weights.of_photo(n) {
                if left.contains(m) {
                    let e = best.entry(m).or_default();
                    *e = (*e).max(w);
                }
            }
            next = strongest(weights.of_photo(n).filter(|(m, _)| left.contains(m)))
                .or_else(|| strongest(best.iter().map(|(m, w)| (*m, *w))));
        }
    }
    order
}

/// The most matched of `candidates` (the first by name among equals).
fn strongest<'a>(candidates: impl Iterator<Item = (&'a str, u64)>) -> Option<&'a str> {
    candidates
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(m, _)| m)
}

/// `order` cut into `k` runs of nearly equal length.
fn chunks(order: &[String], k: usize) -> Vec<Vec<String>> {
    (0..k)
        .map(|i| order[order.len() * i / k..order.len() * (i + 1) / k].to_vec())
        .collect()
}

/// Verified matches between photos, both ways.
struct Weights<'a> {
    by_photo: BTreeMap<&'a str, BTreeMap<&'a str, u64>>,
}

impl<'a> Weights<'a> {
    fn of(graph: &'a [VerifiedPair]) -> Self {
        let mut by_photo: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for p in graph {
            *by_photo.entry(&p.a).or_default().entry(&p.b).or_default() += u64::from(p.inliers);
            *by_photo.entry(&p.b).or_default().entry(&p.a).or_default() += u64::from(p.inliers);
        }
        Weights { by_photo }
    }

    fn of_photo(&self, name: &str) -> impl Iterator<Item = (&'a str, u64)> + '_ {
        self.by_photo
            .get(name)
            .into_iter()
            .flat_map(|m| m.iter().map(|(n, w)| (*n, *w)))
    }

    /// Matches between `name` and the photos of `set`.
    fn to_set(&self, name: &str, set: &[String]) -> u64 {
        let Some(m) = self.by_photo.get(name) else {
            return 0;
        };
        set.iter().filter_map(|s| m.get(s.as_str())).sum()
    }
}

/// The clusters a run cuts its photos into: as many as planned, fewer where fewer
/// photos passed ingest than were counted at submission. Every cluster task and the
/// merge use this rule, so they agree on the cut.
pub fn clusters_used(planned: usize, settings: SplitSpec, photos: usize) -> usize {
    planned.min(settings.clusters_for(photos)).max(1)
}

/// Above this many photos a run is split when nobody said: one mapper run's global
/// bundle adjustments grow faster than the photos, and clusters map in parallel.
pub const AUTO_ABOVE: usize = 400;
/// Cluster size and overlap when split automatically.
pub const AUTO: SplitSpec = SplitSpec {
    cluster_size: 150,
    overlap: 50,
};

/// What was chosen and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SplitChoice {
    /// The split, or none.
    pub split: Option<SplitSpec>,
    /// Why, in a sentence.
    pub why: String,
}

/// The split for `photos` photos when none was asked for.
pub fn choose(photos: usize) -> SplitChoice {
    if photos > AUTO_ABOVE {
        SplitChoice {
            split: Some(AUTO),
            why: format!(
                "{photos} photos (over {AUTO_ABOVE}): mapped in {} clusters of about {} with {} shared, in parallel, then merged",
                AUTO.clusters_for(photos),
                AUTO.cluster_size,
                AUTO.overlap
            ),
        }
    } else {
        SplitChoice {
            split: None,
            why: format!("{photos} photos (at most {AUTO_ABOVE}): mapped in one run"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(a: &str, b: &str, inliers: u32) -> VerifiedPair {
        VerifiedPair {
            a: a.into(),
            b: b.into(),
            inliers,
        }
    }

    /// A survey of three strips of ten photos, 20 m apart along a strip and 30 m
    /// between strips, each photo matched to its neighbours along and across.
    fn survey() -> (Vec<Member>, Vec<VerifiedPair>) {
        let name = |s: usize, i: usize| format!("DJI_{:04}.JPG", s * 10 + i);
        let mut members = Vec::new();
        let mut graph = Vec::new();
        for s in 0..3 {
            for i in 0..10 {
                members.push(Member {
                    name: name(s, i),
                    position: Some([i as f64 * 20.0, s as f64 * 30.0]),
                });
            }
        }
        // Photos within 50 m of each other are matched, the closer the more.
        for (i, a) in members.iter().enumerate() {
            for b in &members[i + 1..] {
                let (pa, pb) = (a.position.unwrap(), b.position.unwrap());
                let d = (pa[0] - pb[0]).hypot(pa[1] - pb[1]);
                if d <= 50.0 {
                    graph.push(pair(&a.name, &b.name, (600.0 - 10.0 * d) as u32));
                }
            }
        }
        (members, graph)
    }

    #[test]
    fn a_survey_is_cut_into_patches_of_ground_that_share_their_edges() {
        let (members, graph) = survey();
        let (clusters, by) = partition(&members, &graph, 3, 5);
        assert_eq!(by, CutBy::Place);
        assert_eq!(clusters.len(), 3);
        let mut all: Vec<&String> = clusters.iter().flat_map(|c| &c.core).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 30, "every photo in exactly one core");
        for c in &clusters {
            assert_eq!(c.core.len(), 10);
            assert!(c.shared.len() >= 5, "{c:?}");
            // A patch along the 180 m extent: at most four photos wide.
            let xs: Vec<f64> = c
                .core
                .iter()
                .map(|n| {
                    members
                        .iter()
                        .find(|m| &m.name == n)
                        .unwrap()
                        .position
                        .unwrap()[0]
                })
                .collect();
            let (lo, hi) = xs
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
            assert!(hi - lo <= 60.0, "{c:?}");
            assert!(c.shared.iter().all(|s| !c.core.contains(s)));
        }
        // Every pair of neighbouring patches shares at least three photos each way,
        // whichever neighbour is the better matched: a row of clusters stays one chain.
        let x_of = |c: &Cluster| {
            c.core
                .iter()
                .map(|n| {
                    members
                        .iter()
                        .find(|m| &m.name == n)
                        .unwrap()
                        .position
                        .unwrap()[0]
                })
                .fold(0.0, f64::max)
        };
        let mut by_x: Vec<&Cluster> = clusters.iter().collect();
        by_x.sort_by(|a, b| x_of(a).total_cmp(&x_of(b)));
        for w in by_x.windows(2) {
            let from =
                |a: &Cluster, b: &Cluster| a.shared.iter().filter(|s| b.core.contains(s)).count();
            assert!(from(w[0], w[1]) >= 3 && from(w[1], w[0]) >= 3, "{w:?}");
        }
        // Same input, same clusters: each cluster task computes its own.
        assert_eq!(partition(&members, &graph, 3, 5).0, clusters);
    }

    #[test]
    fn photos_without_gps_are_cut_along_their_matches() {
        // A ring of 24 photos named out of order: each matched to the next two.
        let names: Vec<String> = (0..24)
            .map(|i| format!("p{:02}.jpg", (i * 7) % 24))
            .collect();
        let mut graph = Vec::new();
        for i in 0..24 {
            graph.push(pair(&names[i], &names[(i + 1) % 24], 200));
            graph.push(pair(&names[i], &names[(i + 2) % 24], 80));
        }
        let members: Vec<Member> = names
            .iter()
            .map(|n| Member {
                name: n.clone(),
                position: None,
            })
            .collect();
        let (clusters, by) = partition(&members, &graph, 3, 4);
        assert_eq!(by, CutBy::Matches);
        for (i, c) in clusters.iter().enumerate() {
            for (j, other) in clusters.iter().enumerate().filter(|(j, _)| *j != i) {
                let from = c.shared.iter().filter(|s| other.core.contains(s)).count();
                assert_eq!(from, 2, "cluster {i} takes 2 from {j}: {c:?}");
            }
        }
        for c in &clusters {
            assert_eq!(c.core.len(), 8);
            // A run of the ring: each core photo matched to another core photo.
            let at: Vec<usize> = c
                .core
                .iter()
                .map(|n| names.iter().position(|x| x == n).unwrap())
                .collect();
            for i in &at {
                assert!(
                    at.iter().any(|j| (i + 1) % 24 == *j || (j + 1) % 24 == *i),
                    "{:?} is no run of the ring",
                    c.core
                );
            }
            // From both its neighbours: the two photos of each that reach its core.
            assert_eq!(c.shared.len(), 4, "{c:?}");
        }
    }

    #[test]
    fn more_clusters_than_photos_leaves_none_empty_and_a_few_photos_stay_whole() {
        let (members, graph) = survey();
        let (clusters, _) = partition(&members[..4], &graph, 9, 3);
        assert_eq!(clusters.len(), 4);
        assert!(clusters.iter().all(|c| c.core.len() == 1));
        assert_eq!(partition(&members, &graph, 1, 3).0[0].core.len(), 30);
    }

    #[test]
    fn large_sets_are_split_when_nobody_said() {
        assert_eq!(choose(AUTO_ABOVE).split, None);
        let c = choose(1000);
        assert_eq!(c.split, Some(AUTO));
        assert!(c.why.contains("7 clusters"), "{}", c.why);
    }
}
