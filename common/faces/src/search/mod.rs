//! Where the detector looks: a face that is turned or small must still be found, and a
//! photo that needs no more than one look must cost no more than one look.
//!
//! The detectors are trained on roughly upright faces and see an image scaled so its long
//! side is at most [`MAX_SIDE`]. Two kinds of face escape a single pass:
//! - **turned**: a photo shot sideways with no orientation tag, or a head tilted past
//!   ~45°. A face tilted by any angle is within 45° of upright at one of the four quarter
//!   turns. The other three turns are first *probed* at [`PROBE_SIDE`] (a quarter of a
//!   pass's pixels each); only a turn whose probe finds a face the upright pass did not
//!   is searched in full. A photo larger than [`MAX_SIDE`] is probed at
//!   [`LARGE_PROBE_SCALE`] of its own resolution instead (see below).
//! - **small**: scaling a 24-megapixel group photo down to 1920 px makes a 20 px face
//!   6 px, below what either detector finds. A photo larger than [`MAX_SIDE`] is also
//!   searched at full resolution in overlapping tiles; a face up to [`TILE_OVERLAP`] px
//!   lies wholly in some tile, and a larger one is large enough in the scaled pass.
//!   Tiles are searched upright, and at a quarter turn only when that turn's probe found
//!   faces (the photo, or part of it, is turned). So that the probe can see the faces the
//!   tiles are for, such a photo's turns are probed at [`LARGE_PROBE_SCALE`] of its
//!   resolution, in pieces the detector takes: a 40 px face of a 12-megapixel photo is
//!   24 px there, where it was under 10 px at [`PROBE_SIDE`] and its turn was flagged for
//!   only 0.29–0.50 of such faces (`tessera bench privacy`'s untagged turned 12 MP case).
//! - **tiny**: at its native resolution YuNet finds about half of the 24 px faces of a
//!   photo and most 40 px ones (measured on `tessera bench privacy`'s 12-megapixel
//!   scenes: 6–7 of 12 faces of 24 px found per photo). Enlarged twice, it finds all 12.
//!   A found face under [`SMALL_FACE_PX`] is the evidence that its neighbourhood holds
//!   faces that small: the parts of the photo near one are searched again enlarged
//!   [`ENLARGE`] times, in pieces of [`ENLARGED_TILE`] px ([`Pass::Enlarged`]).
//!
//! Everything found is mapped back to the image's pixels and merged: of boxes that
//! overlap (IoU above [`NMS_IOU`], or one mostly inside another) the best-scored is kept,
//! the others' landmarks kept as other *views* of it. A face can also get second looks
//! ([`second_looks`]): a crop enlarged to the embedder's size, turned level by its
//! landmarks and 30° either way ([`SECOND_LOOKS`]), searched again; their landmarks align
//! a tilted or small face far better for recognition. The search does not make them: the
//! decision asks for them for the faces whose match it is unsure of.
//!
//! [`Found::cost`] says what each kind of pass ([`Pass`]) cost, for `tessera bench photos`.

mod second_look;
mod tiles;

pub use second_look::{SECOND_LOOKS, sample, second_looks};
pub use tiles::{
    ENLARGE, ENLARGED_OVERLAP, ENLARGED_TILE, SMALL_FACE_PX, TILE, TILE_OVERLAP, tiles, tiles_of,
};

use crate::detect::{Detection, MAX_SIDE, NMS_IOU};
use image::RgbImage;
use image::imageops;
use second_look::roll_deg;
use std::borrow::Cow;
use tiles::{MAX_ENLARGED_PX, near};

/// A box this much inside a better one (intersection over its own area) is the same face
/// seen cut by a tile edge or at another turn.
pub const CONTAINED: f32 = 0.6;
/// Score a detection at a quarter turn needs: the detectors see upside-down and sideways
/// textures as faces more often than upright ones (measured on the shared negatives and
/// composite: spurious boxes at 0.6–0.7), while a real turned face scores above 0.85.
pub const TURNED_MIN_SCORE: f32 = 0.75;
/// Other views kept per face.
pub const MAX_VIEWS: usize = 3;

/// Five landmarks (eye, eye, nose, mouth corner, mouth corner) in image pixels.
pub type Landmarks = [[f32; 2]; 5];

/// A clockwise quarter turn of the image before detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// As is.
    Upright,
    /// 90° clockwise.
    Cw90,
    /// 180°.
    Cw180,
    /// 270° clockwise.
    Cw270,
}

impl Turn {
    /// All four, upright first.
    pub const ALL: [Turn; 4] = [Turn::Upright, Turn::Cw90, Turn::Cw180, Turn::Cw270];

    /// The image turned; upright, the image itself (no copy).
    fn apply(self, img: &RgbImage) -> Cow<'_, RgbImage> {
        match self {
            Turn::Upright => Cow::Borrowed(img),
            Turn::Cw90 => Cow::Owned(imageops::rotate90(img)),
            Turn::Cw180 => Cow::Owned(imageops::rotate180(img)),
            Turn::Cw270 => Cow::Owned(imageops::rotate270(img)),
        }
    }

    /// A point of the turned image back in the image of size `w × h` (before turning).
    fn back(self, [u, v]: [f32; 2], w: f32, h: f32) -> [f32; 2] {
        match self {
            Turn::Upright => [u, v],
            Turn::Cw90 => [v, h - u],
            Turn::Cw180 => [w - u, h - v],
            Turn::Cw270 => [w - v, u],
        }
    }

    fn map_back(self, d: &Detection, w: f32, h: f32) -> Detection {
        let a = self.back([d.bbox[0], d.bbox[1]], w, h);
        let b = self.back([d.bbox[2], d.bbox[3]], w, h);
        Detection {
            bbox: [
                a[0].min(b[0]),
                a[1].min(b[1]),
                a[0].max(b[0]),
                a[1].max(b[1]),
            ],
            landmarks: d.landmarks.map(|l| self.back(l, w, h)),
            score: d.score,
        }
    }
}

/// The kinds of detector pass a search makes, each run only when its evidence calls
/// for it (see [`search`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The whole image, upright, scaled to the detector's input: always.
    Upright,
    /// The whole image at another quarter turn, scaled to [`PROBE_SIDE`] (a photo larger
    /// than [`MAX_SIDE`]: to [`LARGE_PROBE_SCALE`] of its resolution, one run per piece):
    /// always, for photos whose long side is over [`PROBE_SIDE`] (else the probe is the
    /// full pass).
    TurnProbe,
    /// The whole image at a quarter turn whose probe found a face the upright pass did
    /// not.
    Turn,
    /// A full-resolution tile of a photo larger than the detector's input.
    Tile,
    /// A piece of the photo near a face smaller than [`SMALL_FACE_PX`], enlarged
    /// [`ENLARGE`] times: for the faces around it too small to be found at native
    /// resolution.
    Enlarged,
    /// A face's enlarged crop, levelled, for landmarks that align it for recognition:
    /// only with [`Thoroughness::Every`] (the product asks for them per face, after
    /// matching, through [`second_looks`]).
    SecondLook,
}

impl Pass {
    /// Every kind, in the order a search makes them.
    pub const ALL: [Pass; 6] = [
        Pass::Upright,
        Pass::TurnProbe,
        Pass::Turn,
        Pass::Tile,
        Pass::Enlarged,
        Pass::SecondLook,
    ];

    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Pass::Upright => "upright",
            Pass::TurnProbe => "turn_probe",
            Pass::Turn => "turn",
            Pass::Tile => "tile",
            Pass::Enlarged => "enlarged",
            Pass::SecondLook => "second_look",
        }
    }
}

/// What the passes of one kind cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PassCost {
    /// Detector runs.
    pub runs: usize,
    /// Their wall time, milliseconds.
    pub ms: f64,
}

/// What one search found, and how much work it took (for benchmarks and tests).
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// Merged detections in the image's pixels, best first.
    pub faces: Vec<Detection>,
    /// For each face, the landmarks of up to [`MAX_VIEWS`] other detections of it (from
    /// other turns or tiles), best first: more chances to recognise who it is.
    pub views: Vec<Vec<Landmarks>>,
    /// Per kind of pass (indexed as [`Pass::ALL`]): runs and time.
    pub cost: [PassCost; Pass::ALL.len()],
}

impl Found {
    /// Detector runs, all kinds together.
    pub fn passes(&self) -> usize {
        self.cost.iter().map(|c| c.runs).sum()
    }

    /// What the passes of `kind` cost.
    pub fn cost_of(&self, kind: Pass) -> PassCost {
        self.cost[kind as usize]
    }
}

/// How much better a probe must see a face the upright pass found for the turn to count
/// as evidence: a head tilted past 45° is found upright, if at all, with a low score.
pub const PROBE_BETTER: f32 = 0.1;

/// Long side of the image the quarter-turn probes search: a quarter of a full pass's
/// pixels at [`MAX_SIDE`]. A face at least ~24 px tall here (about 1/40 of the long side)
/// is found by the probe; measured on `tessera bench privacy`, every turned face the full
/// turned passes found in the untagged, tilted and HEIC cases was found by the probes too.
pub const PROBE_SIDE: u32 = 960;

/// Share of its own resolution a photo larger than [`MAX_SIDE`] is probed at (never less
/// than [`MAX_SIDE`], in pieces of at most [`MAX_SIDE`]): a 40 px face, the smallest its
/// tiles find without enlarging, is 24 px there. Measured on ten untagged turned
/// 12-megapixel scenes of twelve 40 px faces each: probed at 1920 px (19 px faces), the
/// turn that shows them upright saw none of them in 2 of 10, and 3 of the 10 lost
/// every face; at 2400 px it saw 5–8 of 12 in every one.
pub const LARGE_PROBE_SCALE: f32 = 0.6;

/// `img` with its long side at most `side` (itself, uncopied, when it already is), and
/// the scale applied.
fn scaled_to(img: &RgbImage, side: u32) -> (Cow<'_, RgbImage>, f32) {
    let (w, h) = img.dimensions();
    let long = w.max(h);
    if long <= side {
        return (Cow::Borrowed(img), 1.0);
    }
    let scale = side as f32 / long as f32;
    let resized = tessera_imaging::resize::rgb(
        img,
        ((w as f32 * scale).round() as u32).max(1),
        ((h as f32 * scale).round() as u32).max(1),
    );
    (Cow::Owned(resized), scale)
}

/// How thoroughly to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thoroughness {
    /// The product: each pass only where its evidence calls for it, and no second looks
    /// (the decision asks for them, [`second_looks`], for the faces it is unsure of).
    Gated,
    /// Every pass on every photo, whatever the evidence: full passes at all four turns
    /// and second looks at every face. The baseline the gates are measured against.
    Every,
}

/// Search `img` with `pass` (one detector run on an image no larger than [`MAX_SIDE`],
/// returning boxes in that image's pixels).
///
/// Each kind of pass runs only where the evidence calls for it:
/// - the upright pass of the scaled image always;
/// - the other three quarter turns first as probes at [`PROBE_SIDE`] (a quarter of the
///   pixels each; for a photo larger than [`MAX_SIDE`], at [`LARGE_PROBE_SCALE`] of its
///   resolution, in pieces); a turn gets its full pass, and its tiles, only when its probe found a face the upright pass did not (the
///   photo or a head is turned);
/// - tiles at full resolution when the photo is larger than the detector's input.
///
/// [`Thoroughness::Every`] makes every pass instead, and second looks at every face.
pub fn search<E>(
    img: &RgbImage,
    how: Thoroughness,
    mut pass: impl FnMut(&RgbImage) -> Result<Vec<Detection>, E>,
) -> Result<Found, E> {
    let (w, h) = img.dimensions();
    let (wf, hf) = (w as f32, h as f32);
    let mut found = Found::default();
    let mut timed = |kind: Pass, part: &RgbImage, found: &mut Found| {
        let t0 = std::time::Instant::now();
        let out = pass(part);
        let c = &mut found.cost[kind as usize];
        c.runs += 1;
        c.ms += t0.elapsed().as_secs_f64() * 1e3;
        out
    };
    let (scaled, scale) = scaled_to(img, MAX_SIDE);
    let (sw, sh) = (scaled.width() as f32, scaled.height() as f32);
    // Detections of a turned image of size (tw, th), scaled by `s` from `img`, back in
    // `img`'s pixels.
    let back = |turn: Turn, dets: Vec<Detection>, tw: f32, th: f32, s: f32| -> Vec<Detection> {
        dets.into_iter()
            .filter(|d| turn == Turn::Upright || d.score >= TURNED_MIN_SCORE)
            .map(|d| {
                let mut m = turn.map_back(&d, tw, th);
                m.bbox = m.bbox.map(|v| v / s);
                m.landmarks = m.landmarks.map(|[x, y]| [x / s, y / s]);
                m
            })
            .collect()
    };
    let upright = back(
        Turn::Upright,
        timed(Pass::Upright, &scaled, &mut found)?,
        sw,
        sh,
        scale,
    );
    // Every detection with the turn it was found at (index into [`Turn::ALL`]); `None`
    // for the enlarged pass's, which are not themselves evidence for more enlarged
    // pieces.
    let mut all: Vec<(Detection, Option<usize>)> =
        upright.iter().map(|d| (d.clone(), Some(0))).collect();
    let every = how == Thoroughness::Every;
    // A photo larger than the detector's input is probed at [`LARGE_PROBE_SCALE`] of its
    // own resolution (in pieces the detector takes), not at [`PROBE_SIDE`]: its faces
    // are already shrunk by the scaled pass, and a second shrink puts the faces its tiles
    // are for below what the detector finds, so the turn whose tiles would find them is
    // never searched.
    let probe_side = if every {
        MAX_SIDE
    } else if scale < 1.0 {
        ((w.max(h) as f32 * LARGE_PROBE_SCALE).round() as u32).max(MAX_SIDE)
    } else {
        PROBE_SIDE
    };
    // The probe's image and its scale from `img`'s pixels; over [`MAX_SIDE`] it is made
    // from `img` and searched in pieces, else from the scaled pass's image (itself at
    // [`MAX_SIDE`], when the probe is that full pass).
    let (probe_img, s) = if probe_side > MAX_SIDE {
        scaled_to(img, probe_side)
    } else {
        let (p, ps) = scaled_to(&scaled, probe_side);
        (p, scale * ps)
    };
    let probe_is_full = probe_img.dimensions() == scaled.dimensions();
    let probe_in_pieces = probe_img.width().max(probe_img.height()) > MAX_SIDE;
    let (pw, ph) = (probe_img.width() as f32, probe_img.height() as f32);
    // Turns whose probe saw a face the upright pass did not, or saw one better: the
    // photo, or a head, is turned. Any detection the detector keeps counts as evidence
    // (a spurious one costs a pass); only those over [`TURNED_MIN_SCORE`] are kept.
    let mut turned_evidence = [true, false, false, false];
    for (i, turn) in Turn::ALL.into_iter().enumerate().skip(1) {
        let kind = if probe_is_full {
            Pass::Turn
        } else {
            Pass::TurnProbe
        };
        let turned = turn.apply(&probe_img);
        let raw = if probe_in_pieces {
            let (tw, th) = turned.dimensions();
            let mut raw = Vec::new();
            for (x0, y0, cw, ch) in tiles_of(tw, th, MAX_SIDE, TILE_OVERLAP) {
                let piece = imageops::crop_imm(turned.as_ref(), x0, y0, cw, ch).to_image();
                let dets = timed(kind, &piece, &mut found)?;
                raw.extend(dets.into_iter().map(|d| shifted(d, x0, y0)));
            }
            raw
        } else {
            timed(kind, &turned, &mut found)?
        };
        let probed: Vec<Detection> = raw
            .iter()
            .map(|d| {
                let mut m = turn.map_back(d, pw, ph);
                m.bbox = m.bbox.map(|v| v / s);
                m
            })
            .collect();
        turned_evidence[i] = probed.iter().any(|d| {
            upright
                .iter()
                .filter(|u| same_face(&u.bbox, &d.bbox))
                .all(|u| d.score > u.score + PROBE_BETTER)
        });
        let at_turn = if turned_evidence[i] && !probe_is_full {
            back(
                turn,
                timed(Pass::Turn, &turn.apply(&scaled), &mut found)?,
                sw,
                sh,
                scale,
            )
        } else {
            back(turn, raw, pw, ph, s)
        };
        all.extend(at_turn.into_iter().map(|d| (d, Some(i))));
    }
    if scale < 1.0 {
        for (i, turn) in Turn::ALL.into_iter().enumerate() {
            if !turned_evidence[i] {
                continue;
            }
            for (x0, y0, tw, th) in tiles(w, h) {
                let tile = imageops::crop_imm(img, x0, y0, tw, th).to_image();
                let dets = timed(Pass::Tile, &turn.apply(&tile), &mut found)?;
                for m in back(turn, dets, tw as f32, th as f32, 1.0) {
                    all.push((shifted(m, x0, y0), Some(i)));
                }
            }
        }
    }
    // At each turn, the pieces near a small face found at that turn, searched enlarged
    // (with `Every`, every piece at every turn).
    let pieces = tiles_of(w, h, ENLARGED_TILE, ENLARGED_OVERLAP);
    for (i, turn) in Turn::ALL.into_iter().enumerate() {
        let small: Vec<[f32; 2]> = all
            .iter()
            .filter(|(d, at)| *at == Some(i) && side(d) < SMALL_FACE_PX)
            .map(|(d, _)| [(d.bbox[0] + d.bbox[2]) / 2.0, (d.bbox[1] + d.bbox[3]) / 2.0])
            .collect();
        for &(x0, y0, tw, th) in pieces.iter().filter(|p| every || near(p, &small)) {
            let (ew, eh) = (
                (tw as f32 * ENLARGE).round() as u32,
                (th as f32 * ENLARGE).round() as u32,
            );
            let piece = tessera_imaging::resize::rgb(
                &imageops::crop_imm(img, x0, y0, tw, th).to_image(),
                ew,
                eh,
            );
            let dets = timed(Pass::Enlarged, &turn.apply(&piece), &mut found)?;
            // Only the small faces it is for: a larger one was found at native
            // resolution, and enlarged textures (a sideways head at twice its size)
            // make large spurious boxes (measured on the turned composite: 226–250 px,
            // scores 0.61–0.78).
            all.extend(
                back(turn, dets, ew as f32, eh as f32, ENLARGE)
                    .into_iter()
                    .filter(|m| side(m) < MAX_ENLARGED_PX)
                    .map(|m| (shifted(m, x0, y0), None)),
            );
        }
    }
    let mut all: Vec<Detection> = all.into_iter().map(|(d, _)| d).collect();
    for d in &mut all {
        d.bbox = [
            d.bbox[0].clamp(0.0, wf),
            d.bbox[1].clamp(0.0, hf),
            d.bbox[2].clamp(0.0, wf),
            d.bbox[3].clamp(0.0, hf),
        ];
    }
    all.retain(|d| d.bbox[2] - d.bbox[0] >= 1.0 && d.bbox[3] - d.bbox[1] >= 1.0);
    let (faces, mut views) = merge(all);
    if how == Thoroughness::Every {
        for (d, v) in faces.iter().zip(views.iter_mut()) {
            for l in second_looks(img, d, |crop| timed(Pass::SecondLook, crop, &mut found))? {
                v.insert(0, l);
            }
        }
    }
    found.faces = faces;
    found.views = views;
    Ok(found)
}

/// What `d` offers to recognise it by: its size and head roll.
pub fn evidence(d: &Detection) -> tessera_core::privacy::Evidence {
    tessera_core::privacy::Evidence {
        px: side(d),
        roll: roll_deg(d),
    }
}

/// The longer side of `d`'s box: a face's size.
fn side(d: &Detection) -> f32 {
    (d.bbox[3] - d.bbox[1]).max(d.bbox[2] - d.bbox[0])
}

/// `m`, found in a tile or piece whose corner is at `(x0, y0)`, in the photo's pixels.
fn shifted(mut m: Detection, x0: u32, y0: u32) -> Detection {
    let (dx, dy) = (x0 as f32, y0 as f32);
    m.bbox = [
        m.bbox[0] + dx,
        m.bbox[1] + dy,
        m.bbox[2] + dx,
        m.bbox[3] + dy,
    ];
    m.landmarks = m.landmarks.map(|[x, y]| [x + dx, y + dy]);
    m
}

fn same_face(a: &[f32; 4], b: &[f32; 4]) -> bool {
    let area = |r: &[f32; 4]| (r[2] - r[0]).max(0.0) * (r[3] - r[1]).max(0.0);
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    let union = area(a) + area(b) - inter;
    union > 0.0 && (inter / union > NMS_IOU || inter / area(a).min(area(b)).max(1e-6) > CONTAINED)
}

/// Best first; every box that is the same face as a kept one becomes a view of it.
fn merge(mut dets: Vec<Detection>) -> (Vec<Detection>, Vec<Vec<Landmarks>>) {
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut kept: Vec<Detection> = Vec::new();
    let mut views: Vec<Vec<Landmarks>> = Vec::new();
    for d in dets {
        match kept.iter().position(|k| same_face(&k.bbox, &d.bbox)) {
            Some(i) if views[i].len() < MAX_VIEWS => views[i].push(d.landmarks),
            Some(_) => {}
            None => {
                kept.push(d);
                views.push(Vec::new());
            }
        }
    }
    (kept, views)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_map_points_back() {
        let (w, h) = (40.0, 30.0);
        let mut img = RgbImage::new(40, 30);
        img.put_pixel(2, 27, image::Rgb([255, 0, 0]));
        for t in Turn::ALL {
            let turned = t.apply(&img);
            // The marked pixel comes back where it was.
            let (u, v) = turned
                .enumerate_pixels()
                .find(|p| p.2.0[0] == 255)
                .map(|p| (p.0 as f32 + 0.5, p.1 as f32 + 0.5))
                .unwrap();
            let [x, y] = t.back([u, v], w, h);
            assert!(
                (x - 2.5).abs() < 1e-4 && (y - 27.5).abs() < 1e-4,
                "{t:?}: {x},{y}"
            );
            // The turned image's top-left corner is one corner of the original.
            let [x, y] = t.back([0.0, 0.0], w, h);
            let corner = match t {
                Turn::Upright => [0.0, 0.0],
                Turn::Cw90 => [0.0, h],
                Turn::Cw180 => [w, h],
                Turn::Cw270 => [w, 0.0],
            };
            assert_eq!([x, y], corner, "{t:?}");
        }
    }

    #[test]
    fn a_face_cut_by_a_tile_edge_is_one_face() {
        let d = |b: [f32; 4], score| Detection {
            bbox: b,
            landmarks: [[0.0; 2]; 5],
            score,
        };
        let (kept, views) = merge(vec![
            d([100., 100., 140., 150.], 0.9),
            d([100., 100., 125., 150.], 0.7),
            d([300., 300., 320., 325.], 0.8),
        ]);
        assert_eq!(kept.len(), 2);
        assert_eq!((views[0].len(), views[1].len()), (1, 0));
    }
}
