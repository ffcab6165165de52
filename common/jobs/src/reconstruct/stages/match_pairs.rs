//! The matching stage: the pairs the spec's strategy chooses, matched.

use super::*;
use crate::reconstruct::flight_strips;
use tessera_sfm::vocab_tree::TreeTraining;

impl Run<'_> {
    pub(super) async fn match_pairs(&self) -> Result<Value, TaskError> {
        let backend = backend_for(&self.spec.backend)?;
        let (_images, photos) = self.ensure_images().await?;
        let extract = self.upstream(Stage::Extract).await?;
        let dir = self.scratch.join("match");
        fresh_dir(&dir)?;
        let db = self.database_from(&extract, &dir).await?;
        let mut training = None;
        let tree = match &self.spec.pairs {
            PairStrategy::VocabTree { tree, .. } => {
                let local = dir.join("vocab_tree.bin");
                match tree {
                    // Only ever an object key (the spec's check): a stage reads no
                    // server path a client could name.
                    Some(key) => {
                        self.ctx.ports().objects.get_to_file(key, &local).await?;
                    }
                    None => {
                        training = Some(TreeTraining::for_set(
                            photos.len() as u64,
                            self.spec.max_features,
                        ));
                    }
                }
                Some(local)
            }
            _ => None,
        };
        let strips = match &self.spec.pairs {
            PairStrategy::Spatial { strip_overlap, .. } if *strip_overlap > 0 => {
                Some(strip_pairs(&photos, *strip_overlap as usize, &dir)?)
            }
            _ => None,
        };
        let invocations = (|| {
            let mut all = Vec::new();
            if let (Some(t), Some(tree)) = (training, &tree) {
                all.extend(backend.train_vocab_tree(&db, tree, t)?);
            }
            all.extend(backend.match_pairs(&self.spec.pairs, &db, tree.as_deref())?);
            if let Some(s) = strips.as_ref().filter(|s| s.pairs > 0) {
                all.extend(backend.match_listed(&db, &s.list)?);
            }
            Ok(all)
        })();
        let mut reports = self
            .exec(invocations, Phase::Matching, Some(photos.len() as u64))
            .await?;
        // The listed pairs' matcher runs last, where there is a list.
        let listed = match &strips {
            Some(s) if s.pairs > 0 => reports.pop(),
            _ => None,
        };
        let report = reports
            .pop()
            .ok_or_else(|| TaskError::permanent("the engine gave no matcher to run"))?;
        let stats = backend
            .database_stats(&db)
            .map_err(TaskError::from_classified)?;
        if stats.matched_pairs == 0 {
            return Err(TaskError::permanent(
                "no pair of photos matched: they do not overlap, or the pair strategy chose no pairs (try `--pairs exhaustive`)",
            ));
        }
        self.ctx
            .metric("matched_pairs", stats.matched_pairs as f64, None)
            .await?;
        let mut result = json!({ "database": stats, "process": Self::report_json(&report) });
        if let Some(s) = &strips {
            result["strips"] = json!({
                "overlap": s.overlap,
                "strips": s.strips,
                "pairs": s.pairs,
                "process": listed.as_ref().map(Self::report_json),
            });
        }
        if let (Some(t), Some(trained)) = (training, reports.first()) {
            result["vocab_tree"] = json!({
                "trained": t.describe(),
                "words": t.words,
                "descriptors": t.descriptors,
                "process": Self::report_json(trained),
            });
        }
        self.publish(Stage::Match, &dir, &["database.db"], result)
            .await
    }
}

/// The flight-strip neighbours of the photos that carry GPS, written to
/// `dir/strip_pairs.txt` for the engine, one `name1 name2` per line. COLMAP reads that
/// list by words, so a photo whose name holds a space is left out of it (its spatial
/// neighbours are still matched).
fn strip_pairs(photos: &[PhotoFacts], overlap: usize, dir: &Path) -> Result<StripPairs, TaskError> {
    let placed: Vec<(String, [f64; 2])> = crate::reconstruct::geo::east_north(photos)
        .into_iter()
        .filter(|(name, _)| !name.contains(char::is_whitespace))
        .filter_map(|(name, at)| Some((name, at?)))
        .collect();
    let strips = flight_strips::strips(&placed);
    let pairs = flight_strips::pairs(&strips, overlap);
    let list = dir.join("strip_pairs.txt");
    let text: String = pairs.iter().map(|(a, b)| format!("{a} {b}\n")).collect();
    std::fs::write(&list, text).map_err(io("writing the flight-strip pairs"))?;
    Ok(StripPairs {
        overlap,
        strips: strips.len(),
        pairs: pairs.len(),
        list,
    })
}

/// What the flight-strip pairs came to.
struct StripPairs {
    overlap: usize,
    strips: usize,
    pairs: usize,
    list: PathBuf,
}
