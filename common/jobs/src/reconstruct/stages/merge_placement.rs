//! After a split run's clusters are joined: the photos that stand where their GPS says
//! they are not, placed again against the whole model.
//!
//! A cluster sees a part of the scene. A photo at its edge, with little texture, can be
//! registered there with a wrong pose that the cluster has too little of the scene to
//! refuse, and the join carries that pose into the model (on `odm_seneca_80` in
//! clusters of 25: two photos 37 and 92 m from their fixes, where the single map had
//! them within 2 m, and the whole fit dragged 1.5× further off). Registered again
//! against the joined model, which holds the rest of the scene, both landed within 2 m.
//! A photo is never dropped here: a cluster's pose may be wrong, and so may a fix.

use super::*;
use crate::reconstruct::geo::{self, Misplaced};
use tessera_sfm::Reconstruction;

impl Run<'_> {
    /// Check the joined `model` against the photos' GPS ([`geo::placement`]); take the
    /// misplaced photos out and let the registrator place them again with every other
    /// pose held. The model comes back with every photo it had: if the registrator
    /// cannot place them all again, they all keep their clusters' poses; one it places
    /// still far from its fix is kept at the registrator's pose with a warning (a GPS fix
    /// can be as far off as a pose; on the 12-photo sample two fixes stand 31 and 42 m
    /// off and both the single map and the registrator agree on the photos' poses).
    /// Returns the model and what was done, `null` where the photos' GPS cannot judge the
    /// model.
    pub(super) async fn place_again_by_gps(
        &self,
        db: &Path,
        dir: &Path,
        photos: &[PhotoFacts],
        mut model: Reconstruction,
    ) -> Result<(Reconstruction, Value), TaskError> {
        let gps: Vec<(String, images::Gps)> = photos
            .iter()
            .filter_map(|p| Some((p.name.clone(), p.gps?)))
            .collect();
        let Some(check) = geo::placement(&model, &gps) else {
            return Ok((model, Value::Null));
        };
        if check.misplaced.is_empty() {
            return Ok((model, report(&check, false, &[], Some(&[]))));
        }
        self.ctx
            .emit(EventKind::LogLine {
                line: format!(
                    "map: {} stand more than {:.1} m from their GPS; registering them again against the joined model",
                    brief(&check.misplaced),
                    check.bound_m
                ),
            })
            .await?;
        let names: BTreeSet<&str> = check.misplaced.iter().map(|m| m.name.as_str()).collect();
        let mut without = model.clone();
        remove_named(&mut without, &names);
        let out = dir.join("misplaced_out");
        fresh_dir(&out)?;
        model_bin::write(&without, &out).map_err(TaskError::from_classified)?;
        let again = dir.join("placed_again");
        fresh_dir(&again)?;
        let backend = backend_for(&self.spec.backend)?;
        let registered = self
            .register_optionally(
                backend.register_images(db, &out, &again),
                &again,
                photos.len(),
                "registering the misplaced photos again",
            )
            .await?;
        // Kept only if it holds every photo the joined model held: a photo the
        // registrator cannot place again stays where its cluster put it rather than
        // leave the model.
        let holds_all = |r: &Reconstruction| {
            let held: BTreeSet<&str> = r.images.values().map(|i| i.name.as_str()).collect();
            model
                .images
                .values()
                .all(|i| held.contains(i.name.as_str()))
        };
        let Some(registered) = registered.filter(holds_all) else {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "{} could not all be registered again; they stay where their clusters placed them",
                        brief(&check.misplaced)
                    ),
                })
                .await?;
            return Ok((model, report(&check, false, &[], Some(&check.misplaced))));
        };
        model = registered;
        // Judged again by the rule that found them. One that the whole model places
        // as its cluster did, still far from its fix, has a fix that is off (or a scene
        // that cannot tell): it is kept at the registrator's pose, with a warning.
        let Some(rejudged) = geo::placement(&model, &gps) else {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "{} were registered again, but the model can no longer be judged by its GPS",
                        brief(&check.misplaced)
                    ),
                })
                .await?;
            return Ok((model, report(&check, true, &[], None)));
        };
        let still: Vec<Misplaced> = rejudged
            .misplaced
            .into_iter()
            .filter(|m| names.contains(m.name.as_str()))
            .collect();
        if !still.is_empty() {
            self.ctx
                .emit(EventKind::Warning {
                    message: format!(
                        "{} still stand far from their GPS after registering against the whole model: their fixes, or their poses, are off",
                        brief(&still)
                    ),
                })
                .await?;
        }
        let placed_again: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !still.iter().any(|m| m.name == *n))
            .collect();
        Ok((model, report(&check, true, &placed_again, Some(&still))))
    }
}

/// The report's `split.placement`, one shape whatever happened: `still_misplaced` is
/// `null` where the model could not be judged again.
fn report(
    check: &geo::Placement,
    registered_again: bool,
    placed_again: &[&str],
    still: Option<&[Misplaced]>,
) -> Value {
    json!({
        "photos": check.photos,
        "bound_m": check.bound_m,
        "misplaced": check.misplaced,
        "registered_again": registered_again,
        "placed_again": placed_again,
        "still_misplaced": still,
    })
}

/// "IMG_1.jpg (36.8 m), IMG_2.jpg (92.5 m)".
fn brief(misplaced: &[Misplaced]) -> String {
    misplaced
        .iter()
        .map(|m| format!("{} ({:.1} m)", m.name, m.off_m))
        .collect::<Vec<_>>()
        .join(", ")
}

fn remove_named(model: &mut Reconstruction, names: &BTreeSet<&str>) {
    let ids = model
        .images
        .values()
        .filter(|i| names.contains(i.name.as_str()))
        .map(|i| i.id)
        .collect();
    model.remove_images(&ids);
}

/// The fault [`crate::photos::fault::MISPLACE_AFTER_JOIN`] injects: the first photo by
/// name moved by three times the extent of the camera centres along the first axis, its
/// orientation and observations kept, as a wrong pose would leave it.
pub(super) fn misplace_first(model: &mut Reconstruction) {
    let centres: Vec<[f64; 3]> = model.images.values().map(|i| i.center()).collect();
    let extent = |k: usize| {
        let (lo, hi) = centres.iter().fold((f64::MAX, f64::MIN), |(lo, hi), c| {
            (lo.min(c[k]), hi.max(c[k]))
        });
        hi - lo
    };
    let shift = 3.0 * extent(0).max(extent(1));
    let Some(img) = model.images.values_mut().min_by(|a, b| a.name.cmp(&b.name)) else {
        return;
    };
    // A centre moved by d is a translation t − R·d.
    let r = tessera_sfm::model::rotation(img.qvec);
    for (t, row) in img.tvec.iter_mut().zip(r) {
        *t -= row[0] * shift;
    }
    tracing::warn!(photo = %img.name, shift, "injected fault: a photo misplaced after the join");
}
