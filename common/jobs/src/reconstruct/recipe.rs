//! One recipe, every way in: what a caller asks of a reconstruction — the CLI's flags, an
//! sfmapi pipeline request, the bench — made into the spec that runs. Whatever is left to
//! the photos (pairs, feature resolution, georeferencing) is chosen by one rule, over the
//! same facts (size, GPS) read by the same admission; exports are kept in one order with
//! `points-bin` always among them; the image set's digest is always in the spec. The ways
//! in only translate their syntax into a [`Recipe`] and describe their photos as
//! [`PhotoFact`]s.
//!
//! Invariant: one recipe over the same photos (names and bytes) for the same engine gives
//! the same spec apart from where the photos are kept ([`Placement`]'s project and image
//! set), so the same [`Prepared::recipe_fingerprint`], whichever way it came in. The
//! engine and its version stay in that fingerprint: another engine is another run.

use super::{georef_choice, images, pairing, resolution, split};
use serde_json::{Value, json};
use tessera_core::spec::{
    BaMode, BackendSpec, CameraModel, ExportFormat, Georef, MapperKind, PairStrategy,
    ReconstructionSpec, SpecError, SplitSpec,
};
use tessera_core::{Classify, ErrorClass};

/// Sequential pairs: each photo with this many following ones, where the caller gave no
/// number (sfmapi's `PairsSpec.overlap` default).
pub const SEQUENTIAL_OVERLAP: u32 = 10;
/// Spatial pairs: neighbours per photo, where the caller gave no number.
pub const SPATIAL_NEIGHBOURS: u32 = 10;
/// Spatial pairs: the farthest neighbour, where the caller gave no distance.
pub const SPATIAL_DISTANCE_M: f64 = 1000.0;

/// How pairs are chosen, as asked.
#[derive(Debug, Clone, PartialEq)]
pub enum PairsAsk {
    /// From the photos ([`pairing::choose`]): every pair for few, neighbours by GPS where
    /// most carry it, the next ones where the names are a sequence.
    Auto,
    /// This strategy.
    Given(PairStrategy),
}

/// Georeferencing, as asked.
#[derive(Debug, Clone, PartialEq)]
pub enum GeorefAsk {
    /// GPS where most photos carry it ([`georef_choice::choose`]); a model that cannot be
    /// placed then stays in its own frame with a warning.
    Auto,
    /// This; a run that cannot do it fails.
    Given(Georef),
}

/// Mapping in clusters, as asked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SplitAsk {
    /// Split large sets ([`split::choose`]), with the incremental mapper only.
    Auto,
    /// Map every photo in one run.
    Never,
    /// These clusters.
    Given(SplitSpec),
}

impl std::str::FromStr for SplitAsk {
    type Err = String;

    /// `auto`, `none`, `SIZE` or `SIZE/OVERLAP` (photos).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "`{s}` is not a split; give auto, none, a cluster size (25) or a size and an overlap (25/8)"
            )
        };
        match s.trim() {
            "auto" => Ok(SplitAsk::Auto),
            "none" => Ok(SplitAsk::Never),
            given => {
                let (size, overlap) = match given.split_once('/') {
                    Some((a, b)) => (a, Some(b)),
                    None => (given, None),
                };
                let size: u32 = size.trim().parse().map_err(|_| bad())?;
                let mut split = SplitSpec::of_size(size);
                if let Some(o) = overlap {
                    split.overlap = o.trim().parse().map_err(|_| bad())?;
                }
                Ok(SplitAsk::Given(split))
            }
        }
    }
}

/// What a caller asks of a reconstruction, in no way in's syntax. `None` and `Auto` are
/// left to the photos.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// COLMAP camera model.
    pub camera_model: CameraModel,
    /// Pair selection.
    pub pairs: PairsAsk,
    /// Mapper.
    pub mapper: MapperKind,
    /// Bundle adjustment.
    pub ba: BaMode,
    /// Georeferencing.
    pub georef: GeorefAsk,
    /// Exports asked for, in any order, repeats allowed.
    pub exports: Vec<ExportFormat>,
    /// The survey exports' coordinate system, if asked.
    pub crs: Option<tessera_core::crs::OutputCrs>,
    /// Mapping in clusters.
    pub split: SplitAsk,
    /// SIFT features per image.
    pub max_features: Option<u32>,
    /// Longest side SIFT sees, in pixels.
    pub max_image_size: Option<u32>,
    /// Turn photos upright by their EXIF orientation before COLMAP sees them.
    pub respect_exif_orientation: bool,
    /// One camera per photo even where all share a size.
    pub per_image_intrinsics: bool,
}

/// What is known of one photo before a run: what the choices are made from.
#[derive(Debug, Clone, PartialEq)]
pub struct PhotoFact {
    /// Its name in the image set.
    pub name: String,
    /// SHA-256 of its bytes, hex.
    pub content_sha: String,
    /// Width and height where it decodes, else why not (naming it): the check a run's
    /// ingest applies ([`images::check`]), so a photo counted here is one that runs.
    pub size: Result<(u64, u64), String>,
    /// Whether its EXIF carries a position (`false` where not known).
    pub gps: bool,
}

impl PhotoFact {
    /// Read `bytes` named `name` with the admission a run's ingest applies.
    pub fn read(name: &str, bytes: &[u8]) -> Self {
        use sha2::{Digest, Sha256};
        Self::hashed(name, hex::encode(Sha256::digest(bytes)), bytes)
    }

    /// [`PhotoFact::read`] of bytes whose SHA-256 (`content_sha`, hex) is known already.
    pub fn hashed(name: &str, content_sha: String, bytes: &[u8]) -> Self {
        let size = images::check(name, bytes).map_err(|r| r.0);
        PhotoFact {
            name: name.to_string(),
            content_sha,
            gps: size.is_ok() && images::exif_facts(bytes).1.is_some(),
            size,
        }
    }

    /// A dataset's registered image, as registration found it.
    pub fn of_image(i: &tessera_core::catalog::datasets::Image) -> Self {
        PhotoFact {
            name: i.name.clone(),
            content_sha: i.content_sha.clone(),
            size: match (i.width, i.height, &i.unreadable) {
                (Some(w), Some(h), None) => Ok((w, h)),
                (_, _, why) => Err(why
                    .clone()
                    .unwrap_or_else(|| format!("`{}` has no known size", i.name))),
            },
            gps: i.gps.unwrap_or(false),
        }
    }
}

/// Where the photos are kept and what runs them: the part of a spec each way in decides
/// for itself (a dataset in a project, or the CLI's content-addressed local set).
#[derive(Debug, Clone)]
pub struct Placement {
    /// The project the run belongs to.
    pub project: String,
    /// The object-store prefix (or dataset) holding the photos.
    pub image_set: String,
    /// The engine, its version pinned at submission.
    pub backend: BackendSpec,
}

/// A recipe made into a spec, with what sizing a plan needs and the choices to tell.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The spec that runs.
    pub spec: ReconstructionSpec,
    /// Photos that decode: those that run.
    pub images: usize,
    /// Their mean size in megapixels: the memory and time models multiply it by
    /// `images`, so the mean makes the set's total.
    pub megapixels: f64,
    /// The pairs chosen from the photos, where none were asked for.
    pub pairs_auto: Option<pairing::Choice>,
    /// The resolution chosen from the photos, where not all of it was asked for.
    pub resolution_auto: Option<resolution::Resolution>,
    /// The georeferencing chosen from the photos, where `auto` was asked for.
    pub georef_auto: Option<georef_choice::GeorefChoice>,
    /// The split chosen from the photos, where `auto` was asked for.
    pub split_auto: Option<split::SplitChoice>,
}

impl Prepared {
    /// The job's fingerprint: the same spec, the same job.
    pub fn fingerprint(&self) -> String {
        tessera_core::spec::fingerprint(super::KIND, &self.spec_value())
    }

    /// A fingerprint of what was decided, without where the photos are kept: equal for
    /// the same recipe over the same photos from the CLI and from the API.
    pub fn recipe_fingerprint(&self) -> String {
        let mut v = self.spec_value();
        if let Value::Object(m) = &mut v {
            m.remove("project");
            m.remove("image_set");
        }
        tessera_core::spec::fingerprint(super::KIND, &v)
    }

    fn spec_value(&self) -> Value {
        serde_json::to_value(&self.spec).expect("a spec serializes")
    }

    /// What a dry run shows: the spec, both fingerprints and the choices with why.
    pub fn view(&self) -> Value {
        json!({
            "spec": self.spec,
            "fingerprint": self.fingerprint(),
            "recipe_fingerprint": self.recipe_fingerprint(),
            "images": self.images,
            "megapixels": self.megapixels,
            "pairs_auto": self.pairs_auto,
            "resolution_auto": self.resolution_auto,
            "georef_auto": self.georef_auto,
            "split_auto": self.split_auto,
        })
    }

    /// Put each choice made from the photos in the job's events (best effort).
    pub async fn announce(&self, engine: &tessera_engine::Engine, job: tessera_core::JobId) {
        if let Some(c) = &self.pairs_auto {
            c.announce(engine, job).await;
        }
        if let Some(r) = &self.resolution_auto {
            r.announce(engine, job).await;
        }
        if let Some(g) = &self.georef_auto {
            g.announce(engine, job).await;
        }
        if let Some(c) = &self.split_auto {
            super::announce(engine, job, format!("split: {}", c.why)).await;
        }
    }
}

/// Why a recipe cannot become a spec.
#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    /// No photo of the set decodes.
    #[error("{set} has no photo that decodes{}; add photos before running", why(.unreadable))]
    NoPhotos {
        /// The set, as its way in names it.
        set: String,
        /// Up to five reasons, each naming its file.
        unreadable: Vec<String>,
    },
    /// The spec is out of range (a size, a count, a name).
    #[error(transparent)]
    Invalid(#[from] SpecError),
}

fn why(unreadable: &[String]) -> String {
    if unreadable.is_empty() {
        String::new()
    } else {
        format!(" ({})", unreadable.join("; "))
    }
}

impl Classify for RecipeError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Permanent
    }
}

/// The spec for `recipe` over `photos`, kept and run where `place` says; `set` names the
/// photos in an error. Photos that do not decode are in the set and its digest (a run's
/// ingest refuses them by name) but not in the choices or the sizing.
pub fn prepare(
    recipe: &Recipe,
    place: Placement,
    photos: &[PhotoFact],
    set: &str,
) -> Result<Prepared, RecipeError> {
    let readable: Vec<(&PhotoFact, (u64, u64))> = photos
        .iter()
        .filter_map(|p| Some((p, p.size.clone().ok()?)))
        .collect();
    if readable.is_empty() {
        return Err(RecipeError::NoPhotos {
            set: set.to_string(),
            unreadable: photos
                .iter()
                .filter_map(|p| p.size.clone().err())
                .take(5)
                .collect(),
        });
    }
    let names: Vec<&str> = readable.iter().map(|(p, _)| p.name.as_str()).collect();
    let with_gps = readable.iter().filter(|(p, _)| p.gps).count();
    let sides: Vec<u32> = readable
        .iter()
        .map(|(_, (w, h))| resolution::long_side(*w, *h))
        .collect();
    let chosen = resolution::choose(&sides);
    let pairs_auto = (recipe.pairs == PairsAsk::Auto).then(|| pairing::choose(&names, with_gps));
    let georef_auto =
        (recipe.georef == GeorefAsk::Auto).then(|| georef_choice::choose(with_gps, readable.len()));
    // Clusters are mapped by the incremental mapper; the others map whole.
    let split_auto = (recipe.split == SplitAsk::Auto && recipe.mapper == MapperKind::Incremental)
        .then(|| split::choose(readable.len()));
    let mut exports = recipe.exports.clone();
    // The snapshots, the API's point downloads and the console's viewer read it.
    exports.push(ExportFormat::PointsBin);
    exports.sort_unstable();
    exports.dedup();
    let native = place.backend.sift_native_scale()
        && resolution::native_scale(
            recipe.max_image_size.unwrap_or(chosen.max_image_size),
            &sides,
        );
    let spec = ReconstructionSpec {
        project: place.project,
        image_set: place.image_set,
        backend: place.backend,
        camera_model: recipe.camera_model,
        max_features: recipe.max_features.unwrap_or(chosen.max_features),
        max_image_size: recipe.max_image_size.unwrap_or(chosen.max_image_size),
        sift_native_scale: native,
        pairs: match (&recipe.pairs, &pairs_auto) {
            (PairsAsk::Given(p), _) => p.clone(),
            (PairsAsk::Auto, Some(c)) => c.strategy.clone(),
            (PairsAsk::Auto, None) => unreachable!("auto pairs are chosen above"),
        },
        mapper: recipe.mapper,
        ba: recipe.ba,
        georef: match (&recipe.georef, &georef_auto) {
            (GeorefAsk::Given(g), _) => g.clone(),
            (GeorefAsk::Auto, c) => c.as_ref().map_or(Georef::None, |c| c.georef.clone()),
        },
        exports,
        respect_exif_orientation: recipe.respect_exif_orientation,
        per_image_intrinsics: recipe.per_image_intrinsics,
        image_set_digest: Some(tessera_core::catalog::datasets::digest_of_names(
            photos
                .iter()
                .map(|p| (p.name.as_str(), p.content_sha.as_str())),
        )),
        // Chosen for the photos, not asked for: a model that cannot be placed goes on.
        georef_if_possible: georef_auto
            .as_ref()
            .is_some_and(|c| c.georef != Georef::None),
        crs: recipe.crs,
        split: match (recipe.split, &split_auto) {
            (SplitAsk::Given(s), _) => Some(s),
            (SplitAsk::Never, _) => None,
            (SplitAsk::Auto, c) => c.as_ref().and_then(|c| c.split),
        },
        priority: 0,
    };
    spec.validate()?;
    if let Some(split) = spec.split {
        split.check_count(readable.len())?;
    }
    let megapixels = readable
        .iter()
        .map(|(_, (w, h))| (w * h) as f64 / 1e6)
        .sum::<f64>()
        / readable.len() as f64;
    // What was chosen, as the spec runs it: where SIFT starts follows the size used,
    // given or chosen.
    let resolution_auto = (recipe.max_features.is_none() || recipe.max_image_size.is_none())
        .then_some(resolution::Resolution {
            native_scale: spec.sift_native_scale,
            ..chosen
        });
    Ok(Prepared {
        spec,
        images: readable.len(),
        megapixels,
        pairs_auto,
        resolution_auto,
        georef_auto,
        split_auto,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipe() -> Recipe {
        Recipe {
            camera_model: CameraModel::SimpleRadial,
            pairs: PairsAsk::Auto,
            mapper: MapperKind::Incremental,
            ba: BaMode::Standard,
            georef: GeorefAsk::Auto,
            exports: vec![
                ExportFormat::ColmapBin,
                ExportFormat::Ply,
                ExportFormat::Ply,
            ],
            crs: None,
            split: SplitAsk::Auto,
            max_features: None,
            max_image_size: None,
            respect_exif_orientation: true,
            per_image_intrinsics: false,
        }
    }

    fn place(set: &str) -> Placement {
        Placement {
            project: "01J00000000000000000000000".into(),
            image_set: set.into(),
            backend: BackendSpec {
                name: "colmap".into(),
                version: Some("3.8".into()),
            },
        }
    }

    fn photos(n: usize, gps: usize) -> Vec<PhotoFact> {
        (0..n)
            .map(|i| PhotoFact {
                name: format!("DJI_{:04}.JPG", (i * 7919) % 10_000),
                content_sha: format!("{i:064x}"),
                size: Ok((4000, 3000)),
                gps: i < gps,
            })
            .collect()
    }

    #[test]
    fn a_geotagged_survey_gets_spatial_pairs_and_is_placed() {
        let p = prepare(&recipe(), place("images/a"), &photos(80, 80), "set").unwrap();
        assert!(
            matches!(p.spec.pairs, PairStrategy::Spatial { .. }),
            "{:?}",
            p.spec.pairs
        );
        assert_eq!(p.spec.georef, Georef::Gps { target_epsg: None });
        assert!(p.spec.georef_if_possible);
        assert_eq!(
            p.spec.exports,
            vec![
                ExportFormat::Ply,
                ExportFormat::ColmapBin,
                ExportFormat::PointsBin
            ]
        );
        assert!((p.megapixels - 12.0).abs() < 1e-9);
        // Too few carry GPS: no spatial pairs, no placing.
        let q = prepare(&recipe(), place("images/a"), &photos(80, 40), "set").unwrap();
        assert!(!matches!(q.spec.pairs, PairStrategy::Spatial { .. }));
        assert_eq!(q.spec.georef, Georef::None);
    }

    fn on_pycolmap(set: &str) -> Placement {
        let mut p = place(set);
        p.backend = BackendSpec {
            name: "pycolmap".into(),
            version: None,
        };
        p
    }

    #[test]
    fn sift_starts_at_the_photos_own_pixels_where_they_are_large_enough() {
        // 4000 px photos seen at the chosen 2000 px: no doubled copy.
        let p = prepare(&recipe(), on_pycolmap("images/a"), &photos(30, 30), "set").unwrap();
        assert!(p.spec.sift_native_scale, "{:?}", p.spec);
        assert!(p.resolution_auto.as_ref().unwrap().native_scale);
        // The command line cannot look twice at a weak photo: doubled there.
        let cli = prepare(&recipe(), place("images/a"), &photos(30, 30), "set").unwrap();
        assert!(!cli.spec.sift_native_scale);
        assert!(!cli.resolution_auto.unwrap().native_scale);
        let json = serde_json::to_value(&p.spec).unwrap();
        assert_eq!(json["sift_native_scale"], true);
        // The same photos with a small size asked for, and small photos: doubled, and
        // the field left out, as older specs have it.
        let mut r = recipe();
        r.max_image_size = Some(1000);
        let q = prepare(&r, on_pycolmap("images/a"), &photos(30, 30), "set").unwrap();
        assert!(!q.spec.sift_native_scale);
        assert!(
            !q.resolution_auto.as_ref().unwrap().native_scale,
            "said as it runs"
        );
        assert!(
            serde_json::to_value(&q.spec)
                .unwrap()
                .get("sift_native_scale")
                .is_none()
        );
        let mut small = photos(12, 12);
        for s in &mut small {
            s.size = Ok((800, 600));
        }
        let s = prepare(&recipe(), on_pycolmap("images/a"), &small, "set").unwrap();
        assert!(!s.spec.sift_native_scale);
    }

    #[test]
    fn where_the_photos_are_kept_changes_the_job_not_the_recipe() {
        let set = photos(64, 64);
        let a = prepare(&recipe(), place("images/a"), &set, "a").unwrap();
        let b = prepare(&recipe(), place("01J00000000000000000000001"), &set, "b").unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.recipe_fingerprint(), b.recipe_fingerprint());
        // A changed photo changes the digest, and so the recipe's fingerprint.
        let mut changed = set.clone();
        changed[3].content_sha = "f".repeat(64);
        let c = prepare(&recipe(), place("images/a"), &changed, "a").unwrap();
        assert_ne!(a.recipe_fingerprint(), c.recipe_fingerprint());
    }

    #[test]
    fn photos_that_do_not_decode_are_named_and_not_counted() {
        let mut set = photos(3, 3);
        set[0].size = Err("`notes.jpg` is not an image".into());
        let p = prepare(&recipe(), place("images/a"), &set, "set").unwrap();
        assert_eq!(p.images, 2);
        // Two photos with GPS are too few to place a model.
        assert_eq!(p.spec.georef, Georef::None);
        set.truncate(1);
        let e = prepare(&recipe(), place("images/a"), &set, "dataset X").unwrap_err();
        assert!(e.to_string().contains("dataset X") && e.to_string().contains("notes.jpg"));
    }

    #[test]
    fn what_is_asked_wins_over_what_the_photos_suggest() {
        let mut r = recipe();
        r.pairs = PairsAsk::Given(PairStrategy::Exhaustive);
        r.georef = GeorefAsk::Given(Georef::None);
        r.max_features = Some(1024);
        let p = prepare(&r, place("images/a"), &photos(80, 80), "set").unwrap();
        assert_eq!(p.spec.pairs, PairStrategy::Exhaustive);
        assert_eq!(p.spec.georef, Georef::None);
        assert!(!p.spec.georef_if_possible);
        assert_eq!(p.spec.max_features, 1024);
        assert!(p.pairs_auto.is_none() && p.georef_auto.is_none());
        // The image size is still chosen, and said.
        assert!(p.resolution_auto.is_some());
        r.max_features = Some(100);
        assert!(matches!(
            prepare(&r, place("images/a"), &photos(3, 0), "set"),
            Err(RecipeError::Invalid(_))
        ));
    }
}
