//! A re-decision that changes no file: the published files served again at the new
//! subject revision, as they are.
//!
//! An opt-out re-decides every photo of its project, and most of them do not show the
//! person who opted out: their faces decide as before, and drawing their files again
//! would give the same pixels, at the price of reading the upload, decoding, blurring,
//! encoding and storing every file and thumbnail (and, on AWS, of the GB-seconds and
//! requests of a 50,000-photo re-blur). When a photo's faces, decided again from their
//! stored embeddings against the subjects of the moment and their clusters, give file
//! plans whose digest ([`render::fingerprint`]) is the one its published files were
//! drawn from ([`Photo::rendered`]), the photo is published again with those files,
//! under the conditions every publication has: its variant version and edits revision
//! unchanged, and the project's view still at the revision it was decided against
//! ([`row::publish`], [`privacy_view::still_at`]), committed with the task's success.
//!
//! Everything else goes the whole way ([`super::process`]): a face whose similarity is
//! close enough to its threshold to be looked at again (that needs the pixels), faces
//! never detected or whose embeddings are lost or would be stored anew, faces found while
//! the project had no threshold (never embedded) now that one is set, a row under older
//! [`RULES`], files not all published (a render cut off, regions saved, a failure), and a
//! digest that differs or was never kept. Fail closed: in doubt, draw.

use super::against::Against;
use super::{decide, faces, render, row};
use tessera_core::photo::{Photo, RULES};
use tessera_core::privacy_view;
use tessera_engine::{TaskContext, TaskError, TaskOutput};

/// The output that publishes `photo` again with its files as they are, if deciding it
/// `against` the project of the moment changes none of them; `None` when it must be
/// drawn (see the module's doc).
pub(super) async fn unchanged(
    ctx: &TaskContext,
    photo: &Photo,
    mut against: Against,
) -> Result<Option<TaskOutput>, TaskError> {
    let Some(rendered) = photo.rendered.as_deref() else {
        return Ok(None);
    };
    let complete = photo.published_at.is_some()
        && photo.staged_keys.is_empty()
        && photo.failure.is_none()
        && photo.rules >= RULES
        && photo.renditions.iter().any(|r| r.variant.is_none());
    if !complete {
        return Ok(None);
    }
    let Some(mut faces) = row::faces(ctx.ports().objects.as_ref(), photo).await? else {
        return Ok(None);
    };
    if faces
        .iter()
        .any(|f| faces::needs_embedding(f, against.policy))
    {
        return Ok(None);
    }
    for f in &mut faces {
        f.redecide(&against.subjects, against.policy);
        if decide::close_call(f) {
            return Ok(None);
        }
    }
    let (joined, ruled) = against.clustered(ctx, photo, &mut faces).await?;
    let plans = render::plan(&faces, &photo.blur_regions, against.view.blur_expand);
    if render::fingerprint(&plans, against.view.keep_metadata) != rendered {
        return Ok(None);
    }
    let (mut fields, pending) = row::face_fields(photo, &faces);
    if !pending.is_empty() {
        return Ok(None);
    }
    let decided_rev = against.view.subjects_rev;
    tracing::info!(photo = %photo.id, version = photo.variant_version, subjects_rev = decided_rev, faces = faces.len(), "decided again with the same files: published again as they are");
    fields.push(("subjects_rev", row::json(&decided_rev)));
    // A cancelled re-decision may have failed the row since it was read
    // ([`row::fail_cancelled`]), unpublishing it: what this run decided is published,
    // with no failure. (Regions saved meanwhile change `edits_rev`, which the write
    // checks.)
    fields.push(("failure", serde_json::Value::Null));
    fields.push(("published_at", row::json(&photo.published_at)));
    Ok(Some(TaskOutput {
        result: serde_json::json!({
            "photo": photo.id,
            "mode": "Reprocess",
            "variant_version": photo.variant_version,
            "faces": faces.len(),
            "blurred_in_public": faces.iter().filter(|f| f.decision.blurred_in(None)).count(),
            "files": photo.renditions.len(),
            "files_drawn": 0,
            "clusters": { "joined": joined.joined, "started": joined.started,
                          "transactions": joined.transactions, "ruled": ruled },
        }),
        writes: vec![
            row::publish(photo.id, photo.variant_version, photo.edits_rev, fields),
            privacy_view::still_at(photo.project, photo.id, decided_rev),
        ],
        moved_on: super::process::DECIDED_FROM.to_vec(),
        taken_over: Some(row::taken_over(photo.id, photo.variant_version)),
    }))
}
