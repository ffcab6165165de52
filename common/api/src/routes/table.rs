//! The route table: every operation the API offers, how it is routed and how it is
//! documented, in one list. The router ([`super::router`]) and the OpenAPI document
//! ([`super::openapi`]) are both built from it, so they cannot disagree.

use super::{
    admin, artifacts, clusters, datasets, downloads, events, image_files, images, jobs, meta,
    optional, photo_review, photos, pipeline_run, pipelines, privacy, projects, reconstructions,
    uploads, webhooks, ws,
};
use crate::ApiState;
use axum::http::Method;
use axum::routing::{MethodRouter, get, post};

/// One operation: how it is routed and how it is documented. The router and the
/// OpenAPI document are both built from [`table`], so they cannot disagree.
pub struct Operation {
    /// HTTP method.
    pub method: Method,
    /// The path as routed (axum syntax, `{param}`).
    pub route: &'static str,
    /// The path as documented (differs where a custom method shares a segment, as in
    /// `/v1/jobs/{job_id}:cancel`).
    pub doc: &'static str,
    /// One line for people.
    pub summary: &'static str,
    /// Grouping.
    pub tag: &'static str,
    /// The success status.
    pub ok: u16,
    /// The handler.
    pub handler: MethodRouter<ApiState>,
}

fn op(
    method: Method,
    route: &'static str,
    doc: &'static str,
    summary: &'static str,
    tag: &'static str,
    ok: u16,
    handler: MethodRouter<ApiState>,
) -> Operation {
    Operation {
        method,
        route,
        doc,
        summary,
        tag,
        ok,
        handler,
    }
}

/// Every operation the API offers, one line each: method, route, documented path,
/// summary, tag, success status, handler.
#[rustfmt::skip]
pub fn table() -> Vec<Operation> {
    use Method as M;
    use axum::routing::{delete, patch, put};
    vec![
        op(M::GET, "/healthz", "/healthz", "Liveness", "meta", 200, get(meta::healthz)),
        op(M::GET, "/metrics", "/metrics", "Prometheus exposition: requests served, queue depths", "meta", 200, get(meta::metrics)),
        op(M::GET, "/readyz", "/readyz", "Readiness: the state store answers", "meta", 200, get(meta::readyz)),
        op(M::GET, "/version", "/version", "Server and API versions", "meta", 200, get(meta::version)),
        op(M::GET, "/openapi.json", "/openapi.json", "This document", "meta", 200, get(super::openapi::openapi_json)),
        op(M::GET, "/spec", "/spec", "Which specification this server implements, and where its OpenAPI document is", "meta", 200, get(meta::spec)),
        op(M::GET, "/v1/capabilities", "/v1/capabilities", "Backend and feature flags", "meta", 200, get(meta::capabilities)),
        op(M::GET, "/v1/camera-models", "/v1/camera-models", "The camera models a dataset may use, with their parameters", "meta", 200, get(meta::camera_models)),
        op(M::POST, "/v1/projects", "/v1/projects", "Create a project (Idempotency-Key)", "projects", 201, post(projects::create)),
        op(M::GET, "/v1/projects", "/v1/projects", "List projects (AIP-158)", "projects", 200, get(projects::list)),
        op(M::GET, "/v1/projects/{project_id}", "/v1/projects/{project_id}", "Get a project", "projects", 200, get(projects::get)),
        op(M::PATCH, "/v1/projects/{project_id}", "/v1/projects/{project_id}", "Rename a project or change its description", "projects", 200, patch(projects::patch)),
        op(M::DELETE, "/v1/projects/{project_id}", "/v1/projects/{project_id}", "Delete an empty project (`?cascade=true`: erase it with everything in it, its runs once all have ended)", "projects", 204, delete(projects::delete)),
        op(M::POST, "/v1/projects/{project_id}/datasets", "/v1/projects/{project_id}/datasets", "Create a dataset (`upload` source)", "datasets", 201, post(datasets::create)),
        op(M::GET, "/v1/projects/{project_id}/datasets", "/v1/projects/{project_id}/datasets", "List a project's datasets", "datasets", 200, get(datasets::list)),
        op(M::GET, "/v1/projects/{project_id}/datasets/{dataset_id}", "/v1/projects/{project_id}/datasets/{dataset_id}", "Get a dataset", "datasets", 200, get(datasets::get)),
        op(M::DELETE, "/v1/projects/{project_id}/datasets/{dataset_id}", "/v1/projects/{project_id}/datasets/{dataset_id}", "Erase a dataset, its images and their thumbnails", "datasets", 204, delete(datasets::erase)),
        op(M::PATCH, "/v1/projects/{project_id}/datasets/{dataset_id}", "/v1/projects/{project_id}/datasets/{dataset_id}", "Change a dataset's name, camera model, intrinsics mode or EXIF orientation (`?update_mask=`)", "datasets", 200, patch(datasets::patch)),
        op(M::POST, "/v1/projects/{project_id}/pipelines:run", "/v1/projects/{project_id}/pipelines:run", "Run typed steps; the chain features → pairs → matches → verify → map runs (202 + Location), other type-valid chains are 501 pipelines.custom_execution", "pipelines", 202, post(pipeline_run::run)),
        op(M::POST, "/v1/projects/{project_id}/pipelines/{recipe}", "/v1/projects/{project_id}/pipelines/{recipe}", "Run a recipe (202 + Location); Tessera's finishing choices in spec.x-tessera: {ba: standard|two_stage, georeference: none|gps, exports: [ply, nvm, colmap_text, colmap_bin]}", "pipelines", 202, post(pipelines::submit)),
        op(M::POST, "/v1/datasets/{dataset_id}/{action}", "/v1/datasets/{dataset_id}/features", "Extract features (202 + Location)", "stages", 202, post(datasets::post_action)),
        op(M::POST, "/v1/datasets/{dataset_id}/{action}", "/v1/datasets/{dataset_id}/matches", "Match pairs: {pairs, matcher} (202 + Location)", "stages", 202, post(datasets::post_action)),
        op(M::POST, "/v1/datasets/{dataset_id}/{action}", "/v1/datasets/{dataset_id}/verify", "Verify matches geometrically (202 + Location)", "stages", 202, post(datasets::post_action)),
        op(M::POST, "/v1/uploads", "/v1/uploads", "Open a chunked upload (Idempotency-Key)", "uploads", 201, post(uploads::create)),
        op(M::GET, "/v1/uploads/{upload_id}", "/v1/uploads/{upload_id}", "Get an upload's state", "uploads", 200, get(uploads::get)),
        op(M::PATCH, "/v1/uploads/{upload_id}", "/v1/uploads/{upload_id}", "Send a chunk (Content-Range)", "uploads", 200, patch(uploads::chunk)),
        op(M::POST, "/v1/uploads/{upload_id}", "/v1/uploads/{upload_id}:finalize", "Finalize: hash and store the blob", "uploads", 200, post(uploads::action)),
        op(M::POST, "/v1/datasets/{dataset_id}/images", "/v1/datasets/{dataset_id}/images", "Create an image from a blob", "images", 201, post(images::create_images)),
        op(M::GET, "/v1/datasets/{dataset_id}/images", "/v1/datasets/{dataset_id}/images", "List a dataset's images", "images", 200, get(images::list_images)),
        op(M::POST, "/v1/datasets/{dataset_id}/{action}", "/v1/datasets/{dataset_id}/images:batchCreate", "Create up to 1000 images", "images", 201, post(datasets::post_action)),
        op(M::DELETE, "/v1/datasets/{dataset_id}/images/{name}", "/v1/datasets/{dataset_id}/images/{name}", "Delete an image by name", "images", 204, delete(images::delete_image)),
        op(M::GET, "/v1/images/{image_id}", "/v1/images/{image_id}", "Get an image", "images", 200, get(images::get_image)),
        op(M::DELETE, "/v1/images/{image_id}", "/v1/images/{image_id}", "Delete an image by id", "images", 204, delete(images::delete_image_by_id)),
        op(M::GET, "/v1/images/{image_id}/bytes", "/v1/images/{image_id}/bytes", "Image bytes (Range, ETag, 304)", "images", 200, get(image_files::image_bytes)),
        op(M::GET, "/v1/images/{image_id}/thumbnail", "/v1/images/{image_id}/thumbnail", "A JPEG thumbnail (`?size=N`, 16..1024)", "images", 200, get(image_files::thumbnail)),
        op(M::GET, "/v1/images/{image_id}/exif", "/v1/images/{image_id}/exif", "EXIF fields as text", "images", 200, get(image_files::exif)),
        op(M::GET, "/v1/reconstructions/{recon_id}", "/v1/reconstructions/{recon_id}", "Get a reconstruction", "reconstructions", 200, get(reconstructions::get)),
        op(M::GET, "/v1/reconstructions/{recon_id}/submodels", "/v1/reconstructions/{recon_id}/submodels", "The reconstruction's sub-models", "reconstructions", 200, get(reconstructions::submodels)),
        op(M::GET, "/v1/submodels/{submodel_id}", "/v1/submodels/{submodel_id}", "A sub-model", "reconstructions", 200, get(reconstructions::get_submodel)),
        op(M::GET, "/v1/reconstructions/{recon_id}/snapshots", "/v1/reconstructions/{recon_id}/snapshots", "Sealed snapshot sequence numbers", "reconstructions", 200, get(reconstructions::snapshots)),
        op(M::GET, "/v1/reconstructions/{recon_id}/snapshots/{seq}/submodels/{idx}/{name}", "/v1/reconstructions/{recon_id}/snapshots/{seq}/submodels/{idx}/{name}", "A sealed snapshot's file for one sub-model (immutable; ETag, Range)", "reconstructions", 200, get(reconstructions::submodel_file)),
        op(M::POST, "/v1/reconstructions/{recon_id}/dense", "/v1/reconstructions/{recon_id}/dense", "Dense stereo on a reconstruction (optional; 501: dense.patch_match_stereo)", "reconstructions", 202, post(optional::dense)),
        op(M::POST, "/v1/reconstructions:merge", "/v1/reconstructions:merge", "Merge reconstructions (optional; 501: recon.merge)", "reconstructions", 202, post(optional::merge)),
        op(M::POST, "/v1/reconstructions/{recon_id}/localize", "/v1/reconstructions/{recon_id}/localize", "Localize a photo against a reconstruction (optional; 501: localize.from_memory)", "reconstructions", 202, post(optional::localize)),
        op(M::POST, "/v1/oneshot/localize", "/v1/oneshot/localize", "Localize a photo (optional; 501: localize.from_memory)", "reconstructions", 202, post(optional::oneshot_localize)),
        op(M::GET, "/v1/reconstructions/{recon_id}/snapshots/{seq}/{name}", "/v1/reconstructions/{recon_id}/snapshots/{seq}/{name}", "A sealed snapshot's file (immutable; ETag, Range)", "reconstructions", 200, get(reconstructions::file)),
        // sfmapi OPTIONAL endpoints not offered here: 404 for a missing resource, else 501.
        op(M::GET, "/v1/datasets/{dataset_id}/similarity", "/v1/datasets/{dataset_id}/similarity", "Image similarity (optional; 501: similarity.dhash)", "optional", 200, get(optional::similarity)),
        op(M::POST, "/v1/datasets/{dataset_id}/{action}", "/v1/datasets/{dataset_id}/similarity:build", "Build a similarity index (optional; 501)", "optional", 200, post(datasets::post_action)),
        op(M::GET, "/v1/images/{image_id}/pose_prior", "/v1/images/{image_id}/pose_prior", "An image's pose prior (optional; 501: pose_priors.read_write)", "optional", 200, get(optional::pose_prior)),
        op(M::PUT, "/v1/images/{image_id}/pose_prior", "/v1/images/{image_id}/pose_prior", "Set an image's pose prior (optional; 501)", "optional", 200, put(optional::pose_prior)),
        op(M::DELETE, "/v1/images/{image_id}/pose_prior", "/v1/images/{image_id}/pose_prior", "Remove an image's pose prior (optional; 501)", "optional", 204, delete(optional::pose_prior)),
        op(M::GET, "/v1/datasets/{dataset_id}/pose_priors", "/v1/datasets/{dataset_id}/pose_priors", "A dataset's pose priors (optional; 501)", "optional", 200, get(optional::pose_priors)),
        op(M::PUT, "/v1/datasets/{dataset_id}/pose_priors", "/v1/datasets/{dataset_id}/pose_priors", "Set a dataset's pose priors (optional; 501)", "optional", 200, put(optional::pose_priors)),
        op(M::POST, "/v1/reconstructions/{recon_id}/georegister", "/v1/reconstructions/{recon_id}/georegister", "Sim(3) georegistration (optional; 501: georegister.sim3)", "optional", 202, post(optional::georegister)),
        op(M::POST, "/v1/reconstructions/{recon_id}", "/v1/reconstructions/{recon_id}:toCubemap", "Spherical to cubemap (optional; 501: projection.equirectangular_to_cubemap)", "optional", 202, post(optional::recon_action)),
        op(M::POST, "/v1/reconstructions/{recon_id}", "/v1/reconstructions/{recon_id}:bundleAdjust", "Bundle adjustment of a finished reconstruction (optional; 501: ba.standard)", "optional", 202, post(optional::recon_action)),
        op(M::POST, "/v1/reconstructions/{recon_id}", "/v1/reconstructions/{recon_id}:triangulate", "Re-triangulation (optional; 501: triangulate.retri)", "optional", 202, post(optional::recon_action)),
        op(M::POST, "/v1/reconstructions/{recon_id}", "/v1/reconstructions/{recon_id}:relocalize", "Register new photos (optional; 501: relocalize.images)", "optional", 202, post(optional::recon_action)),
        op(M::POST, "/v1/reconstructions/{recon_id}", "/v1/reconstructions/{recon_id}:poseGraphOptimize", "Pose-graph optimisation (optional; 501: pgo.optimize)", "optional", 202, post(optional::recon_action)),
        op(M::POST, "/v1/reconstructions/{recon_id}", "/v1/reconstructions/{recon_id}:export", "Export (optional; 501: export.*)", "optional", 202, post(optional::recon_action)),
        op(M::POST, "/v1/reconstructions/{recon_id}", "/v1/reconstructions/{recon_id}:undistort", "Undistort images (optional; 501: image.undistort)", "optional", 202, post(optional::recon_action)),
        op(M::POST, "/v1/datasets/{dataset_id}", "/v1/datasets/{dataset_id}:renderCubemap", "Render cubemaps (optional; 501: projection.equirectangular_to_cubemap)", "optional", 202, post(optional::dataset_action)),
        op(M::POST, "/v1/datasets/{dataset_id}", "/v1/datasets/{dataset_id}:projectImages", "Project images (optional; 501: projection.cubemap_rig)", "optional", 202, post(optional::dataset_action)),
        op(M::POST, "/v1/datasets/{dataset_id}", "/v1/datasets/{dataset_id}:renderEquirectangular", "Render equirectangular images (optional; 501: projection.cubemap_to_equirectangular)", "optional", 202, post(optional::dataset_action)),
        op(M::POST, "/v1/datasets/{dataset_id}", "/v1/datasets/{dataset_id}:renderPerspective", "Render perspective images (optional; 501: projection.equirectangular_to_perspective)", "optional", 202, post(optional::dataset_action)),
        op(M::GET, "/v1/reconstructions/{recon_id}/snapshots/{seq}/tiles/index.json", "/v1/reconstructions/{recon_id}/snapshots/{seq}/tiles/index.json", "Octree tile manifest (optional; 501: snapshots.tiles)", "optional", 200, get(optional::tiles)),
        op(M::GET, "/v1/reconstructions/{recon_id}/snapshots/{seq}/tiles/{level}/{x}/{y}/{z}", "/v1/reconstructions/{recon_id}/snapshots/{seq}/tiles/{level}/{x}/{y}/{z}.bin", "An octree tile (optional; 501)", "optional", 200, get(optional::tiles)),
        op(M::GET, "/v1/reconstructions/{recon_id}/snapshots/{seq}/images/{image_id}/observations", "/v1/reconstructions/{recon_id}/snapshots/{seq}/images/{image_id}/observations", "An image's observations (optional; 501: snapshots.observations)", "optional", 200, get(optional::observations)),
        op(M::GET, "/v1/reconstructions/{recon_id}/snapshots/{seq}/points/{point3d_id}/visibility", "/v1/reconstructions/{recon_id}/snapshots/{seq}/points/{point3d_id}/visibility", "A point's visibility (optional; 501)", "optional", 200, get(optional::observations)),
        op(M::GET, "/v1/jobs", "/v1/jobs", "List jobs", "jobs", 200, get(jobs::list)),
        op(M::GET, "/v1/jobs/{job_id}", "/v1/jobs/{job_id}", "JobDetail", "jobs", 200, get(jobs::get)),
        op(M::DELETE, "/v1/jobs/{job_id}", "/v1/jobs/{job_id}", "Erase a run whose stages have all ended, with its files, tasks and events (409 while any runs)", "jobs", 204, delete(jobs::delete)),
        op(M::PATCH, "/v1/jobs/{job_id}", "/v1/jobs/{job_id}", "Rename a run (`{\"label\": …}`)", "jobs", 200, patch(jobs::patch)),
        op(M::POST, "/v1/jobs/{job_id}", "/v1/jobs/{job_id}:cancel", "Cancel (`?force=true`: revoke leases now)", "jobs", 200, post(jobs::action)),
        op(M::POST, "/v1/jobs/{job_id}", "/v1/jobs/{job_id}:resume", "Resume failed or cancelled tasks (202)", "jobs", 202, post(jobs::action)),
        op(M::GET, "/v1/jobs/{job_id}/progress", "/v1/jobs/{job_id}/progress", "JobProgress: a compact polling snapshot", "jobs", 200, get(jobs::progress)),
        op(M::GET, "/v1/jobs/{job_id}/artifacts", "/v1/jobs/{job_id}/artifacts", "The job's stage outputs (`?kind=`)", "jobs", 200, get(artifacts::of_job)),
        op(M::GET, "/v1/jobs/{job_id}/artifacts/{artifact_id}/files/{*name}", "/v1/jobs/{job_id}/artifacts/{artifact_id}/files/{name}", "One file of a sealed stage output, as an attachment (ETag, Range)", "jobs", 200, get(downloads::artifact_file)),
        op(M::GET, "/v1/reconstructions/{recon_id}/report", "/v1/reconstructions/{recon_id}/report", "What the run was asked and did: stages, timings, photos left out, files to download", "reconstructions", 200, get(downloads::report)),
        op(M::GET, "/v1/reconstructions/{recon_id}/artifacts", "/v1/reconstructions/{recon_id}/artifacts", "The reconstruction's stage outputs (`?kind=`)", "reconstructions", 200, get(artifacts::of_reconstruction)),
        op(M::GET, "/v1/jobs/{job_id}/events", "/v1/jobs/{job_id}/events", "Progress events (SSE; Last-Event-ID)", "jobs", 200, get(events::sse)),
        op(M::GET, "/v1/x-tessera/projects/{project_id}/privacy", "/v1/x-tessera/projects/{project_id}/privacy", "Privacy settings, and how many photos are not yet re-decided at the current subjects", "x-tessera", 200, get(privacy::get_settings)),
        op(M::PUT, "/v1/x-tessera/projects/{project_id}/privacy", "/v1/x-tessera/projects/{project_id}/privacy", "Set the match threshold and blur growth; re-blurs every photo", "x-tessera", 202, axum::routing::put(privacy::put_settings)),
        op(M::POST, "/v1/x-tessera/projects/{project_id}/subjects", "/v1/x-tessera/projects/{project_id}/subjects", "Enrol an opted-out person from reference blobs; re-blurs every photo", "x-tessera", 201, post(privacy::enrol)),
        op(M::GET, "/v1/x-tessera/projects/{project_id}/subjects", "/v1/x-tessera/projects/{project_id}/subjects", "List opted-out people", "x-tessera", 200, get(privacy::list_subjects)),
        op(M::GET, "/v1/x-tessera/projects/{project_id}/clusters", "/v1/x-tessera/projects/{project_id}/clusters", "List the people the project's photos show, most photos first (admin)", "x-tessera", 200, get(clusters::list)),
        op(M::POST, "/v1/x-tessera/projects/{project_id}/clusters/{cluster_id}/opt-out", "/v1/x-tessera/projects/{project_id}/clusters/{cluster_id}/opt-out", "Opt a cluster's person out from its views; re-blurs every photo (admin)", "x-tessera", 201, post(clusters::opt_out)),
        op(M::DELETE, "/v1/x-tessera/projects/{project_id}/subjects/{subject_id}", "/v1/x-tessera/projects/{project_id}/subjects/{subject_id}", "Remove an opted-out person; re-blurs every photo", "x-tessera", 202, delete(privacy::remove_subject)),
        op(M::POST, "/v1/x-tessera/projects/{project_id}/photos", "/v1/x-tessera/projects/{project_id}/photos", "Add a photo from a blob (ingest, then face processing)", "x-tessera", 202, post(photos::add_photo)),
        op(M::GET, "/v1/x-tessera/projects/{project_id}/photos", "/v1/x-tessera/projects/{project_id}/photos", "A project's photos, newest first, each with its state (failed ones with the reason), faces and variants", "x-tessera", 200, get(photo_review::list)),
        op(M::GET, "/v1/x-tessera/photos/{photo_id}/original", "/v1/x-tessera/photos/{photo_id}/original", "The unblurred original as uploaded (admin keys only; audited)", "x-tessera", 200, get(photo_review::original)),
        op(M::POST, "/v1/x-tessera/projects/{project_id}/photos:presign", "/v1/x-tessera/projects/{project_id}/photos:presign", "A URL to upload a photo straight to the bucket (S3 only)", "x-tessera", 201, post(photos::presign_photo)),
        op(M::GET, "/v1/x-tessera/photos/{photo_id}", "/v1/x-tessera/photos/{photo_id}", "A photo: faces, decisions, variants, publication", "x-tessera", 200, get(photos::get_photo)),
        op(M::GET, "/v1/x-tessera/photos/{photo_id}/files/{variant}", "/v1/x-tessera/photos/{photo_id}/files/{variant}", "A published file or its thumbnail (`?thumbnail=true`)", "x-tessera", 200, get(photos::file)),
        op(M::PUT, "/v1/x-tessera/photos/{photo_id}/blur-regions", "/v1/x-tessera/photos/{photo_id}/blur-regions", "Replace manual blur regions; re-blurs", "x-tessera", 202, axum::routing::put(photos::put_regions)),
        op(M::DELETE, "/v1/x-tessera/photos/{photo_id}", "/v1/x-tessera/photos/{photo_id}", "Erase a photo, its upload and every file made from it", "x-tessera", 204, delete(photos::erase)),
        op(M::GET, "/v1/x-tessera/audit", "/v1/x-tessera/audit", "The tenant's audit trail, newest first (admin)", "x-tessera", 200, get(privacy::audit_trail)),
        op(M::POST, "/v1/x-tessera/photos/{photo_id}", "/v1/x-tessera/photos/{photo_id}:reprocess", "Re-blur from stored faces", "x-tessera", 202, post(photos::action)),
        op(M::GET, "/ws/v1/jobs/{job_id}", "/ws/v1/jobs/{job_id}", "Progress over WebSocket (hello, events, cancel_requested, terminal; ping and cancel)", "jobs", 101, get(ws::upgrade)),
        op(M::POST, "/v1/x-tessera/webhooks", "/v1/x-tessera/webhooks", "Create a webhook (the signing secret is in this answer only)", "x-tessera", 201, post(webhooks::create)),
        op(M::GET, "/v1/x-tessera/webhooks", "/v1/x-tessera/webhooks", "List webhooks", "x-tessera", 200, get(webhooks::list)),
        op(M::GET, "/v1/x-tessera/webhooks/{webhook_id}", "/v1/x-tessera/webhooks/{webhook_id}", "Get a webhook", "x-tessera", 200, get(webhooks::get)),
        op(M::DELETE, "/v1/x-tessera/webhooks/{webhook_id}", "/v1/x-tessera/webhooks/{webhook_id}", "Delete a webhook", "x-tessera", 204, delete(webhooks::delete)),
        op(M::GET, "/v1/x-tessera/webhooks/{webhook_id}/deliveries", "/v1/x-tessera/webhooks/{webhook_id}/deliveries", "Deliveries to a webhook, newest first, with their tries and last answer", "x-tessera", 200, get(webhooks::deliveries)),
        op(M::POST, "/v1/admin/api-keys", "/v1/admin/api-keys", "Create an API key (admin)", "admin", 201, post(admin::create)),
        op(M::GET, "/v1/admin/api-keys", "/v1/admin/api-keys", "List API keys (admin)", "admin", 200, get(admin::list)),
        op(M::DELETE, "/v1/admin/api-keys/{key_id}", "/v1/admin/api-keys/{key_id}", "Revoke an API key (admin)", "admin", 200, delete(admin::revoke)),
    ]
}
