//! A photo's faces as its row stores them: found by the search
//! ([`tessera_faces::search`]) and embedded, their decisions left to [`super::decide`].

use tessera_core::geometry::FracRect;
use tessera_core::photo::Face;
use tessera_core::privacy::{FaceDecision, MatchPolicy};
use tessera_faces::search::{PassCost, Thoroughness};

/// Faces of the upright `img` as stored on the row (decisions filled in later): the
/// search the evidence calls for ([`tessera_faces::search`]), each face embedded from its
/// best detection where `policy` recognises anyone ([`MatchPolicy::recognises`];
/// [`super::decide`] adds better views where a match is close).
pub fn faces_in(
    models: &tessera_faces::FaceModels,
    img: &image::RgbImage,
    policy: MatchPolicy,
) -> Result<Vec<Face>, tessera_faces::FaceError> {
    Ok(faces_searched(models, img, Thoroughness::Gated, policy)?.faces)
}

/// Embed the faces of `img` stored without an embedding (found while their project had
/// no threshold), if `policy` now recognises anyone; how many were embedded.
pub fn embed_missing(
    models: &tessera_faces::FaceModels,
    img: &image::RgbImage,
    faces: &mut [Face],
    policy: MatchPolicy,
) -> Result<usize, tessera_faces::FaceError> {
    let mut embedded = 0;
    for f in faces.iter_mut().filter(|f| needs_embedding(f, policy)) {
        f.embedding = models.embed(img, &super::decide::detection(f, img).landmarks)?;
        embedded += 1;
    }
    Ok(embedded)
}

/// Whether `face` must be embedded before it can be decided under `policy`.
pub fn needs_embedding(face: &Face, policy: MatchPolicy) -> bool {
    policy.recognises() && face.embedding.is_empty()
}

/// The faces of one search, and what its passes cost (for the benchmarks).
pub struct Searched {
    /// As [`faces_in`] gives them.
    pub faces: Vec<Face>,
    /// Per kind of pass, as [`tessera_faces::search::Found::cost`].
    pub cost: [PassCost; tessera_faces::search::Pass::ALL.len()],
    /// Time embedding the faces and their views, milliseconds (none where the policy
    /// recognises nobody).
    pub embed_ms: f64,
}

impl Searched {
    /// Detector runs, all kinds together.
    pub fn passes(&self) -> usize {
        self.cost.iter().map(|c| c.runs).sum()
    }
}

/// [`faces_in`] searched as thoroughly as `how` says, with what it cost.
pub fn faces_searched(
    models: &tessera_faces::FaceModels,
    img: &image::RgbImage,
    how: Thoroughness,
    policy: MatchPolicy,
) -> Result<Searched, tessera_faces::FaceError> {
    let recognises = policy.recognises();
    // The baseline embeds every view of a face up front and so counts as having looked
    // again; the gated search leaves that to the decision, for close matches only.
    let every_view = recognises && how == Thoroughness::Every;
    let (w, h) = img.dimensions();
    let found = models.search_with(img, how)?;
    let cost = found.cost;
    let t0 = std::time::Instant::now();
    let faces = found
        .faces
        .into_iter()
        .zip(found.views)
        .map(|(d, views)| {
            Ok(Face {
                bbox: FracRect::from_pixels(d.bbox, w, h),
                landmarks: d.landmarks.map(|[x, y]| [x / w as f32, y / h as f32]),
                score: d.score,
                looked_again: every_view,
                hard_to_recognise: false,
                evidence: Some(tessera_faces::search::evidence(&d)),
                rule: None,
                embedding: if recognises {
                    models.embed(img, &d.landmarks)?
                } else {
                    Vec::new()
                },
                // Other views cost an embedding each (most of a photo's time); the
                // product embeds only the best detection, and the decision looks again,
                // with better-aligned views, at the faces whose match is close.
                views: if every_view {
                    views
                        .iter()
                        .map(|l| models.embed(img, l))
                        .collect::<Result<_, _>>()?
                } else {
                    Vec::new()
                },
                decision: FaceDecision::FailClosed,
                cluster: None,
                ruling: None,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Searched {
        faces,
        cost,
        embed_ms: t0.elapsed().as_secs_f64() * 1e3,
    })
}
