//! What a photo is decided against, and its faces' clusters deciding with it.

use super::{clusters, view};
use std::sync::Arc;
use tessera_core::photo::{Face, Photo};
use tessera_core::privacy::{MatchPolicy, SubjectEmbeddings};
use tessera_core::privacy_view::PrivacyView;
use tessera_engine::{TaskContext, TaskError};

/// What a photo is decided against: its shard of the project's privacy view, the
/// subjects that view names, and the policy its threshold makes.
pub(super) struct Against {
    pub(super) view: PrivacyView,
    pub(super) subjects: Arc<Vec<SubjectEmbeddings>>,
    pub(super) policy: MatchPolicy,
}

impl Against {
    /// `faces` (each decided on its own evidence) joined to their project's clusters,
    /// then decided by their clusters' standing where it says more
    /// (`tessera_core::clusters`). A join committed with a re-decision of every photo
    /// moves this to the new revision and decides the faces again against it, or the
    /// photo's publication would be refused. Faces joined and faces ruled.
    pub(super) async fn clustered(
        &mut self,
        ctx: &TaskContext,
        photo: &Photo,
        faces: &mut [Face],
    ) -> Result<(clusters::Joined, usize), TaskError> {
        let ports = ctx.ports();
        let store = ports.store.as_ref();
        let joined = clusters::join(ctx, photo, faces, &self.subjects, self.policy).await?;
        if joined.redecided.is_some() {
            self.view = view::for_photo(store, ports.objects.as_ref(), photo.project, photo.id)
                .await
                .map_err(TaskError::from_classified)?;
            self.subjects = view::subjects(store, ports.objects.as_ref(), &self.view)
                .await
                .map_err(TaskError::from_classified)?;
            self.policy = MatchPolicy::from_threshold(self.view.match_threshold);
            for f in faces.iter_mut() {
                f.redecide(&self.subjects, self.policy);
            }
        }
        // The clusters as they are now, read after the view: a cluster change that
        // re-decided the project up to the view's revision is in them (one after it
        // fails this photo's publication, which is then decided again).
        let known = clusters::of_faces(store, faces).await?;
        let ruled = tessera_core::clusters::apply(faces, &known, &self.subjects, self.policy);
        if joined.joined > 0 || ruled > 0 {
            tracing::info!(photo = %photo.id, joined = joined.joined, started = joined.started, ruled, "faces joined their clusters");
        }
        Ok((joined, ruled))
    }
}
