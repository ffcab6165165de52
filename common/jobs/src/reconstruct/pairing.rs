//! Which image pairs to match, chosen from the photos themselves: the one rule behind
//! the CLI's `--pairs auto` (its default), the API recipes without `pairs.strategy`, and
//! the bench. A default must not be worse than the engine's own automatic mode on an
//! ordinary photo set: sequential pairs suit video frames, and on photos taken around an
//! object they registered only about two thirds of them, so they are chosen only when
//! the names say the photos are ordered.

use tessera_core::spec::PairStrategy;

/// Up to this many photos every pair is matched: at 60, 1,770 pairs, about 21
/// CPU-minutes at the 0.7 CPU-s per pair the time model measured (`memory.rs`), and no
/// overlapping pair is missed.
pub const EXHAUSTIVE_UP_TO: usize = 60;

/// An unordered set without GPS is matched every pair up to this size too (19,900 pairs,
/// about 4 CPU-hours, which the time model sends to Batch): retrieval by a tree trained
/// from the set's own features finds fewer of the overlapping pairs (on the 29-photo
/// Lund set, 141 of exhaustive's 213 verified pairs at 10 retrieved per photo) and its
/// training costs a fixed 10–40 s, which only a large set repays.
pub const UNORDERED_EXHAUSTIVE_UP_TO: usize = 200;

/// Retrieval pairs: photos retrieved per photo, where the caller gave no number. Above
/// [`UNORDERED_EXHAUSTIVE_UP_TO`] that is at most a quarter of every pair, and grows
/// with the set, not with its square.
pub const VOCAB_TREE_IMAGES: u32 = 50;

/// Share of photos with GPS above which neighbours by position are used.
const GPS_SHARE: f64 = 0.8;

/// Geotagged sets: neighbours by position per photo. With [`STRIP_NEIGHBOURS`] on top,
/// 10 registered all 80 photos of `odm_seneca_80` as 20 nearest alone did, with 561
/// pairs instead of 957 and matching in 0.38× the time (pycolmap, same run).
pub const GPS_NEIGHBOURS: u32 = 10;

/// Geotagged sets: following photos along the photo's flight strip
/// (`flight_strips`), on top of [`GPS_NEIGHBOURS`].
pub const STRIP_NEIGHBOURS: u32 = 4;

/// What was chosen and why (kept in the report and the job's events).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Choice {
    /// The strategy (its fields inline: `{"strategy": "sequential", "overlap": 20, "why": …}`).
    #[serde(flatten)]
    pub strategy: PairStrategy,
    /// Why, in a sentence a user can act on.
    pub why: String,
}

impl Choice {
    /// `exhaustive`, `sequential, overlap 20`, …: the strategy as `--pairs` names it.
    pub fn strategy_name(&self) -> String {
        match &self.strategy {
            PairStrategy::Exhaustive => "exhaustive".into(),
            PairStrategy::Sequential { overlap } => format!("sequential, overlap {overlap}"),
            PairStrategy::Spatial {
                max_neighbors,
                strip_overlap,
                ..
            } => match strip_overlap {
                0 => format!("spatial, {max_neighbors} neighbours"),
                k => format!(
                    "spatial, {max_neighbors} neighbours and the next {k} along each flight strip"
                ),
            },
            PairStrategy::VocabTree {
                tree: None,
                num_images,
            } => format!("vocabtree trained on the set, {num_images} per photo"),
            PairStrategy::VocabTree { num_images, .. } => {
                format!("vocabtree, {num_images} per photo")
            }
        }
    }

    /// Put the choice in the job's events, where a client following the job sees it.
    /// Best effort: the job is already submitted and its report keeps the choice, so a
    /// store that is busy right now costs the line, not the run.
    pub async fn announce(&self, engine: &tessera_engine::Engine, job: tessera_core::JobId) {
        let line = format!("pairs: {} ({})", self.strategy_name(), self.why);
        super::announce(engine, job, line).await;
    }
}

/// The strategy for photos named `names`, `with_gps` of which carry a GPS position (read
/// when a dataset's image is registered, or from the CLI's folder: `recipe::PhotoFact`).
pub fn choose(names: &[&str], with_gps: usize) -> Choice {
    let n = names.len();
    let pairs = n * n.saturating_sub(1) / 2;
    if n <= EXHAUSTIVE_UP_TO {
        return Choice {
            strategy: PairStrategy::Exhaustive,
            why: format!("{n} photos (at most {EXHAUSTIVE_UP_TO}): every pair, {pairs} pairs"),
        };
    }
    if with_gps as f64 >= GPS_SHARE * n as f64 {
        return Choice {
            strategy: PairStrategy::Spatial {
                max_neighbors: GPS_NEIGHBOURS,
                max_distance_m: 1000.0,
                strip_overlap: STRIP_NEIGHBOURS,
            },
            why: format!(
                "{with_gps} of {n} photos carry GPS: the {GPS_NEIGHBOURS} nearest within 1 km, and the next {STRIP_NEIGHBOURS} along each flight strip"
            ),
        };
    }
    if ordered(names) {
        return Choice {
            strategy: PairStrategy::Sequential { overlap: 20 },
            why: format!("{n} photos named in sequence (frames or a walk): each with the next 20"),
        };
    }
    if n <= UNORDERED_EXHAUSTIVE_UP_TO {
        return Choice {
            strategy: PairStrategy::Exhaustive,
            why: format!(
                "{n} unordered photos without GPS: every pair ({pairs} pairs), the only strategy here that finds them all"
            ),
        };
    }
    Choice {
        strategy: PairStrategy::VocabTree {
            tree: None,
            num_images: VOCAB_TREE_IMAGES,
        },
        why: format!(
            "{n} unordered photos without GPS, over {UNORDERED_EXHAUSTIVE_UP_TO}: each with the {VOCAB_TREE_IMAGES} that look most like it, \
             by a vocabulary tree trained from the set's own features"
        ),
    }
}

/// Whether the names look like frames or a burst: one stem (the name without its
/// number and extension) shared by nearly all, and numbers that, sorted, mostly step by
/// one.
pub fn ordered(names: &[&str]) -> bool {
    let mut numbered: Vec<(String, u64)> = names.iter().filter_map(|n| split(n)).collect();
    if numbered.len() < 3 || numbered.len() * 10 < names.len() * 9 {
        return false;
    }
    let stem = &numbered[0].0;
    if numbered.iter().filter(|(s, _)| s == stem).count() * 10 < numbered.len() * 9 {
        return false;
    }
    numbered.sort_by_key(|(_, k)| *k);
    let steps = numbered.windows(2).count();
    let unit = numbered.windows(2).filter(|w| w[1].1 == w[0].1 + 1).count();
    unit * 10 >= steps * 8
}

/// `IMG_0042.jpg` → (`IMG_`, 42); a name without a trailing number → `None`.
fn split(name: &str) -> Option<(String, u64)> {
    let base = name.rsplit_once('.').map_or(name, |(b, _)| b);
    let digits = base.len() - base.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits > 12 {
        return None;
    }
    let (stem, number) = base.split_at(base.len() - digits);
    Some((stem.to_ascii_lowercase(), number.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    #[test]
    fn small_sets_match_every_pair_whatever_their_names() {
        let frames: Vec<String> = (0..40).map(|i| format!("frame_{i:04}.jpg")).collect();
        assert_eq!(
            choose(&names(&frames), 0).strategy,
            PairStrategy::Exhaustive
        );
        let shuffled: Vec<String> = (0..12)
            .map(|i| format!("{}.jpg", (i * 7919) % 1000))
            .collect();
        assert_eq!(
            choose(&names(&shuffled), 0).strategy,
            PairStrategy::Exhaustive
        );
    }

    #[test]
    fn large_sets_use_gps_then_order_then_every_pair_then_a_window() {
        let frames: Vec<String> = (0..300)
            .map(|i| format!("IMG_{:04}.JPG", 100 + i))
            .collect();
        assert!(matches!(
            choose(&names(&frames), 290).strategy,
            PairStrategy::Spatial { .. }
        ));
        assert!(matches!(
            choose(&names(&frames), 10).strategy,
            PairStrategy::Sequential { overlap: 20 }
        ));
        // Names that say nothing about order: a multi-view set around an object.
        let unordered: Vec<String> = (0..150)
            .map(|i| format!("view_{}.png", (i * 7919) % 100_000))
            .collect();
        let c = choose(&names(&unordered), 0);
        assert_eq!(c.strategy, PairStrategy::Exhaustive, "{}", c.why);
        let many: Vec<String> = (0..400)
            .map(|i| format!("{:x}.jpg", (i as u64 * 2_654_435_761) % 1_000_003))
            .collect();
        let c = choose(&names(&many), 0);
        assert_eq!(
            c.strategy,
            PairStrategy::VocabTree {
                tree: None,
                num_images: VOCAB_TREE_IMAGES
            },
            "{}",
            c.why
        );
        assert!(
            c.why.contains("trained from the set's own features"),
            "{}",
            c.why
        );
        assert!(c.strategy_name().starts_with("vocabtree"));
    }

    #[test]
    fn order_needs_one_stem_and_unit_steps() {
        let gaps: Vec<String> = (0..100).map(|i| format!("DSC{:05}.jpg", i * 3)).collect();
        assert!(!ordered(&names(&gaps)));
        let two_cameras: Vec<String> = (0..100)
            .map(|i| format!("{}{:04}.jpg", if i % 2 == 0 { "A_" } else { "B_" }, i / 2))
            .collect();
        assert!(!ordered(&names(&two_cameras)));
        let burst: Vec<String> = (0..100).map(|i| format!("img{}.jpeg", 900 + i)).collect();
        assert!(ordered(&names(&burst)));
    }
}
