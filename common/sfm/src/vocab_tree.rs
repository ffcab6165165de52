//! How a vocabulary tree is trained from an image set's own features, where no tree
//! ships with Tessera and none may be downloaded at run time.
//!
//! The tree only has to tell this set's photos apart, not the world's: k-means over a
//! sample of the set's own SIFT descriptors gives visual words that retrieval can rank
//! by. Both engines train with the same figures, so a spec means the same on either.

/// Descriptors sampled for training, at most. k-means over them is the training's cost
/// (time and memory: 250,000 × 128 floats is 128 MB); beyond this the words do not
/// change enough to rank neighbours differently.
pub const MAX_TRAINING_DESCRIPTORS: u64 = 250_000;

/// Training points per visual word. Fewer and k-means leaves words on a handful of
/// points (faiss warns below 39); more and a small set's words are too coarse to rank.
const DESCRIPTORS_PER_WORD: u64 = 50;

/// The fewest and most visual words: below 256 retrieval cannot rank a set, above
/// 65,536 (COLMAP's own default) training costs more than it gives.
const WORDS: (u32, u32) = (256, 65_536);

/// One training: how many descriptors are sampled, and into how many words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeTraining {
    /// Descriptors sampled, spread evenly over the photos.
    pub descriptors: u64,
    /// Visual words (k-means centroids), a power of two.
    pub words: u32,
    /// Photos whose descriptors are sampled (COLMAP 3.8's builder samples whole photos).
    pub photos: u64,
}

impl TreeTraining {
    /// The training for `photos` photos of up to `max_features` features each.
    pub fn for_set(photos: u64, max_features: u32) -> TreeTraining {
        let per_photo = u64::from(max_features.max(1));
        let available = photos.max(1) * per_photo;
        let descriptors = available.min(MAX_TRAINING_DESCRIPTORS);
        let target = (descriptors / DESCRIPTORS_PER_WORD).max(1);
        // The largest power of two not above the target, within the bounds.
        let words = (1u64 << (63 - target.leading_zeros()))
            .clamp(u64::from(WORDS.0), u64::from(WORDS.1)) as u32;
        TreeTraining {
            descriptors,
            words,
            photos: descriptors.div_ceil(per_photo).clamp(1, photos.max(1)),
        }
    }

    /// The training in a phrase, for reports and events.
    pub fn describe(&self) -> String {
        format!(
            "a tree of {} words trained from up to {} of the set's own descriptors",
            self.words, self.descriptors
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_set_gets_few_words_and_every_descriptor() {
        let t = TreeTraining::for_set(11, 4096);
        assert_eq!(t.descriptors, 11 * 4096);
        assert_eq!(t.words, 512, "45,056 / 50 → 901 → 512");
        assert_eq!(t.photos, 11);
    }

    #[test]
    fn a_large_set_is_sampled_and_its_words_are_capped() {
        let t = TreeTraining::for_set(2000, 8192);
        assert_eq!(t.descriptors, MAX_TRAINING_DESCRIPTORS);
        assert_eq!(t.words, 4096);
        assert_eq!(t.photos, MAX_TRAINING_DESCRIPTORS.div_ceil(8192));
        assert!(t.words.is_power_of_two());
    }

    #[test]
    fn words_never_fall_below_the_floor() {
        let t = TreeTraining::for_set(1, 100);
        assert_eq!(t.words, WORDS.0);
        assert_eq!(t.photos, 1);
        let t = TreeTraining::for_set(0, 0);
        assert!(t.descriptors >= 1 && t.photos == 1);
    }
}
