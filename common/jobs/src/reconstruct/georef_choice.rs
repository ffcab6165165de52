//! Whether a run is placed on the map by its photos' GPS when nobody said: a geotagged
//! set is expected to come out metric and where it was taken, a set without GPS in its
//! own frame. Chosen, not asked for, so a failed alignment keeps the model in its own
//! frame with a warning instead of failing the run (`ReconstructionSpec::georef_if_possible`).

use tessera_core::spec::Georef;

/// What was chosen and why, for the report and the job's events.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GeorefChoice {
    /// The georeferencing chosen.
    pub georef: Georef,
    /// Why, in a sentence.
    pub why: String,
}

impl GeorefChoice {
    /// Put the choice in the job's events (best effort, as the pair choice).
    pub async fn announce(&self, engine: &tessera_engine::Engine, job: tessera_core::JobId) {
        super::announce(engine, job, format!("georeference: {}", self.why)).await;
    }
}

/// The least share of photos that must carry GPS.
pub const MIN_SHARE: f64 = 0.8;
/// The least number: three points fix a similarity transform.
pub const MIN_PHOTOS: usize = 3;

/// GPS (local east-north-up, metres) when at least [`MIN_SHARE`] of at least
/// [`MIN_PHOTOS`] photos carry it; none otherwise.
pub fn choose(with_gps: usize, photos: usize) -> GeorefChoice {
    if with_gps >= MIN_PHOTOS && with_gps as f64 >= MIN_SHARE * photos as f64 {
        GeorefChoice {
            georef: Georef::Gps { target_epsg: None },
            why: format!(
                "{with_gps} of {photos} photos carry GPS: the model is placed by it, in metres east, north and up"
            ),
        }
    } else {
        GeorefChoice {
            georef: Georef::None,
            why: format!(
                "{with_gps} of {photos} photos carry GPS (georeferencing needs {MIN_PHOTOS} and {:.0} %): the model stays in its own frame",
                MIN_SHARE * 100.0
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_photos_with_gps_are_placed_by_it() {
        assert_eq!(choose(12, 12).georef, Georef::Gps { target_epsg: None });
        assert_eq!(choose(8, 10).georef, Georef::Gps { target_epsg: None });
        assert_eq!(choose(7, 10).georef, Georef::None);
        assert_eq!(
            choose(2, 2).georef,
            Georef::None,
            "two points fix no similarity"
        );
        assert_eq!(choose(0, 0).georef, Georef::None);
        assert!(choose(7, 10).why.contains("7 of 10"));
    }
}
