//! The models a mapper wrote: read and ranked largest first, whether joining them did
//! better, the photos each registers, and the photos the chosen one left out.

use super::images::PhotoFacts;
use super::stages::io;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use tessera_engine::TaskError;
use tessera_sfm::{metrics, model_bin};

/// The models a mapper wrote into `dir`, largest first (most registered photos, then
/// most points): COLMAP 4 does not number its largest model 0.
pub(super) fn read_models(dir: &Path) -> Result<Vec<(PathBuf, metrics::ModelMetrics)>, TaskError> {
    let mut models = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io("listing models"))? {
        let path = entry.map_err(io("listing models"))?.path();
        if path.join("cameras.bin").is_file() {
            let rec = model_bin::read(&path).map_err(TaskError::from_classified)?;
            models.push((path, metrics::compute(&rec)));
        }
    }
    sort_models(&mut models);
    Ok(models)
}

/// Whether a joined model beats the largest: more photos registered, its points not
/// fewer, and its mean reprojection error not worse by more than half (photos of another
/// scene forced in show up as error).
pub(super) fn joined_is_better(
    largest: &metrics::ModelMetrics,
    joined: &metrics::ModelMetrics,
) -> bool {
    joined.registered_images > largest.registered_images
        && joined.points >= largest.points
        && joined.mean_reprojection_error <= (largest.mean_reprojection_error * 1.5).max(0.5)
}

/// The photo names a model registers.
pub(super) fn model_names(dir: &Path) -> Result<BTreeSet<String>, TaskError> {
    Ok(model_bin::read(dir)
        .map_err(TaskError::from_classified)?
        .images
        .values()
        .map(|i| i.name.clone())
        .collect())
}

/// The photos a model does not register, in the photo set's order.
pub(super) fn left_out(photos: &[PhotoFacts], registered: &BTreeSet<String>) -> Vec<String> {
    photos
        .iter()
        .filter(|p| !registered.contains(&p.name))
        .map(|p| p.name.clone())
        .collect()
}

/// Up to `most` names, then how many more.
pub(super) fn names_in_brief(names: &[String], most: usize) -> String {
    let shown = names
        .iter()
        .take(most)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    match names.len().saturating_sub(most) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// Largest first: most registered photos, then most points, then by folder.
pub(super) fn sort_models(models: &mut [(PathBuf, metrics::ModelMetrics)]) {
    models.sort_by(|a, b| {
        b.1.registered_images
            .cmp(&a.1.registered_images)
            .then(b.1.points.cmp(&a.1.points))
            .then(a.0.cmp(&b.0))
    });
}
