//! The job kinds Tessera knows: how each is planned into tasks, and the handler of
//! each task kind. Every binary that runs workers registers [`registry`]; the
//! reconstruction and photo kinds join here as their issues land.
#![deny(missing_docs)]

pub mod bench;
pub mod demo;
pub mod erase_job;
pub mod notify;
pub mod photos;
pub mod reconstruct;

use tessera_engine::Registry;

/// Every task kind this build can run; face models load from the environment on the
/// first photo task.
pub fn registry() -> Registry {
    registry_with(std::sync::Arc::new(photos::FaceService::from_env()))
}

/// Every task kind, with the given face models.
pub fn registry_with(faces: std::sync::Arc<photos::FaceService>) -> Registry {
    let mut r = Registry::new();
    demo::register(&mut r);
    bench::register(&mut r);
    reconstruct::register(&mut r);
    photos::register(&mut r, faces);
    notify::register(&mut r);
    r
}
