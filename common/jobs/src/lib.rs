//! The job kinds Tessera knows: how each is planned into tasks, and the handler of
//! each task kind. Every binary that runs workers registers [`registry`]; the
//! reconstruction and photo kinds join here as their issues land.
#![deny(missing_docs)]

pub mod bench;
pub mod demo;
pub mod reconstruct;

use tessera_engine::Registry;

/// Every task kind this build can run.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    demo::register(&mut r);
    bench::register(&mut r);
    reconstruct::register(&mut r);
    r
}
