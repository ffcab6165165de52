//! Faces joining their project's clusters as photos are decided, what erasing a photo
//! takes back from them, and listing and opting a cluster out. The rules are in
//! [`tessera_core::clusters`]; this module stores them.
//!
//! A cluster is stored as:
//! - its **head** (id, centroid, photos: a few hundred bytes), in one of 16 partitions of
//!   the project's cluster heads: what every face's search for its cluster reads. It is
//!   written when the cluster starts and when its centroid has moved past
//!   [`tessera_core::clusters::HEAD_DRIFT`], so a person in every photo of a burst does not
//!   write a shared partition once a photo;
//! - its **body** (the whole cluster: counts, standing inputs and up to 24 views, about
//!   25 KB), in a partition of its own, written whenever its views change, conditioned on
//!   its revision (which guards every join);
//! - its **counters** (faces and photos), 8 shards picked by the photo, added to by every
//!   join and subtracted from by the photo's erasure;
//! - which cluster each face joined, one record per join transaction (all the faces it
//!   committed) in the photo's own partition, written only if absent, so the photo's
//!   erasure sweeps the records. Every join transaction also moves the photo's joins
//!   guard ([`tessera_core::records::photo_joins_key`]) on the revision its run read
//!   before reading the records, and so does every change erasure makes to them: two runs
//!   that join one photo's faces at once (its first processing and an opt-out's
//!   re-decision), or a join and an erasure, cannot both commit what they planned from
//!   the same read, and no face is counted twice. One record a face
//!   put a 150-face crowd's 300 write units into its partition within a second (the load
//!   rehearsal, issue 23); one a transaction puts a few.
//!
//! When a join changes its cluster's standing in a way that may change another photo's
//! decision (a new subject matched by a clear view; twenty clear views that match nobody,
//! where some member leaned to a match), it is committed in one transaction with a
//! re-decision of every photo of the project ([`super::project::redecide_with`]): the
//! same durable sweep as an opt-out, so the change cannot be stored without the work that
//! applies it, and photos decided before it are withheld until decided again (fail
//! closed). So is a join or an erasure that withdraws a release (the cluster stops saying
//! "nobody", or its clear views came closer to a subject): the members it released would
//! otherwise stay shown on evidence that is gone.
//!
//! Cost, per photo with `f` faces in a project with `c` clusters, joining `k` of them: 16
//! queries of heads, one of the photo's memberships, one read of each joined cluster's
//! body, and about `⌈(3k + 7s) / 44⌉` transactions where `s` of the `k` are started by
//! it (a new cluster's 8 counter shards).

mod join;
mod listing;
mod store;

pub use join::{JOIN_WRITES, Joined, join};
pub use listing::{Listed, MAX_LISTED, list, opt_out};
pub use store::{counts, erase_all, forget_photo, heads, load, of_faces};
