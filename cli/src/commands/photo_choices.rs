//! What the photos of a local reconstruction decide when no option is given: the pair
//! strategy (`--pairs auto`), the feature resolution and the georeferencing (`--georef
//! auto`). Each photo's size and EXIF are read once for all three; files that are not
//! images (ingest rejects them) do not count. The rules themselves are the jobs crate's
//! (`pairing`, `resolution`, `georef_choice`), shared with the other ways in.

use tessera_jobs::reconstruct::{self, georef_choice, pairing, resolution};

/// The three choices for one set of photos.
pub struct PhotoChoices {
    /// For `--pairs auto`.
    pub pairs: pairing::Choice,
    /// For a `--max-image-size` / `--max-features` not given.
    pub resolution: resolution::Resolution,
    /// For `--georef auto`.
    pub georef: georef_choice::GeorefChoice,
}

impl PhotoChoices {
    /// Read `photos` (name, bytes) once and choose.
    pub fn of(photos: &[(String, Vec<u8>)]) -> Self {
        let mut names = Vec::new();
        let mut sides = Vec::new();
        let mut with_gps = 0;
        for (name, bytes) in photos {
            let Ok(size) = imagesize::blob_size(bytes) else {
                continue;
            };
            names.push(name.as_str());
            sides.push(size.width.max(size.height) as u32);
            if reconstruct::images::exif_facts(bytes).1.is_some() {
                with_gps += 1;
            }
        }
        PhotoChoices {
            pairs: pairing::choose(&names, Some(with_gps)),
            resolution: resolution::choose(&sides),
            georef: georef_choice::choose(with_gps, names.len()),
        }
    }
}
