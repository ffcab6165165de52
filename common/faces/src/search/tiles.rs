//! Where the full-resolution tiles and the enlarged pieces of a photo lie.

use crate::detect::MAX_SIDE;

/// Side of a full-resolution tile (a multiple of 32).
pub const TILE: u32 = 1280;
/// Overlap of neighbouring tiles: the largest face a tile boundary may not cut.
pub const TILE_OVERLAP: u32 = 256;

/// A face found smaller than this (its box's longer side, in the photo's pixels) is
/// evidence of faces too small to be found at native resolution around it: at 24 px
/// about half are found, at 32 px two thirds to three quarters, at 40 px over nine in
/// ten (`tessera bench privacy`, YuNet).
pub const SMALL_FACE_PX: f32 = 48.0;
/// How much the enlarged pass enlarges: a 24 px face becomes 48 px, which YuNet finds
/// (12 of 12 per scene where native resolution found 6–7; 30 of 30 in the crowds of
/// 22–60 px faces where it found 24–28).
pub const ENLARGE: f32 = 2.0;
/// Side of the piece of the photo one enlarged pass covers (its input is then at most
/// [`MAX_SIDE`]).
pub const ENLARGED_TILE: u32 = (MAX_SIDE as f32 / ENLARGE) as u32;
/// Overlap of neighbouring pieces: twice the largest face the pass is for, so no such
/// face is cut by every piece it lies in.
pub const ENLARGED_OVERLAP: u32 = 2 * SMALL_FACE_PX as u32;
/// The largest box (photo pixels) the enlarged pass keeps.
pub(super) const MAX_ENLARGED_PX: f32 = 2.0 * SMALL_FACE_PX;

/// Overlapping tiles `(x, y, w, h)` covering a `w × h` image.
pub fn tiles(w: u32, h: u32) -> Vec<(u32, u32, u32, u32)> {
    tiles_of(w, h, TILE, TILE_OVERLAP)
}

/// Whether the piece `(x, y, w, h)`, grown by its side each way, holds one of the
/// `points`: a face too small to find may sit a piece's width from one that was found
/// (grown by half a side, the bottom corners of the bench's 12-megapixel scenes, whose
/// faces sit about 1,000 px apart, were never searched enlarged).
pub(super) fn near(&(x, y, w, h): &(u32, u32, u32, u32), points: &[[f32; 2]]) -> bool {
    let (gx, gy) = (w as f32, h as f32);
    points.iter().any(|&[px, py]| {
        px >= x as f32 - gx
            && px <= (x + w) as f32 + gx
            && py >= y as f32 - gy
            && py <= (y + h) as f32 + gy
    })
}

/// Overlapping tiles `(x, y, w, h)` of at most `side` px covering a `w × h` image, as few
/// as keep every overlap at least `overlap`, spread evenly (an overlap of `side` or more
/// is taken as `side - 1`, and a side of 0 as 1).
pub fn tiles_of(w: u32, h: u32, side: u32, overlap: u32) -> Vec<(u32, u32, u32, u32)> {
    let side = side.max(1);
    let overlap = overlap.min(side - 1);
    let starts = |len: u32| -> Vec<u32> {
        if len <= side {
            return vec![0];
        }
        let n = (len - overlap).div_ceil(side - overlap);
        (0..n)
            .map(|i| ((len - side) as u64 * i as u64 / (n - 1) as u64) as u32)
            .collect()
    };
    let mut out = Vec::new();
    for y in starts(h) {
        for x in starts(w) {
            out.push((x, y, side.min(w), side.min(h)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_cover_the_image_with_overlap() {
        let t = tiles(6000, 4000);
        assert_eq!(t.len(), 6 * 4);
        for y in (0..4000).step_by(97) {
            for x in (0..6000).step_by(89) {
                assert!(
                    t.iter()
                        .any(|(tx, ty, tw, th)| x >= *tx && x < tx + tw && y >= *ty && y < ty + th)
                );
            }
        }
        assert_eq!(tiles(1000, 800), vec![(0, 0, 1000, 800)]);
    }

    #[test]
    fn enlarged_pieces_cover_the_photo_and_odd_sizes_do_not_panic() {
        let p = tiles_of(4000, 3000, ENLARGED_TILE, ENLARGED_OVERLAP);
        assert!(
            p.iter()
                .all(|t| t.2 == ENLARGED_TILE && t.3 == ENLARGED_TILE)
        );
        for y in (0..3000).step_by(61) {
            for x in (0..4000).step_by(67) {
                assert!(
                    p.iter()
                        .any(|(tx, ty, tw, th)| x >= *tx && x < tx + tw && y >= *ty && y < ty + th)
                );
            }
        }
        // Enlarged, a piece is the detector's whole input.
        assert_eq!((ENLARGED_TILE as f32 * ENLARGE) as u32, MAX_SIDE);
        assert!(!tiles_of(50, 40, 10, 10).is_empty());
        assert!(!tiles_of(50, 40, 10, 99).is_empty());
        assert!(!tiles_of(5, 4, 0, 0).is_empty());
    }
}
