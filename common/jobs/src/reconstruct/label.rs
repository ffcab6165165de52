//! The name a run gets when nobody names it: what it was made of and how, so two runs
//! of one dataset read differently in a list ("Flight 1 · 12 photos · global ·
//! georeferenced", not "reconstruct Flight 1" twice).

use tessera_core::spec::{Georef, ReconstructionSpec};

/// `source` is the dataset's name (or the photos' folder); `images` how many photos the
/// run starts with. The CLI and the API both name runs with this.
pub fn default_label(source: &str, spec: &ReconstructionSpec, images: usize) -> String {
    // The mapper as the spec spells it (`incremental`, `global`, …).
    let mapper = serde_json::to_value(spec.mapper)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let photos = if images == 1 { "photo" } else { "photos" };
    let mut parts = vec![
        source.trim().to_string(),
        format!("{images} {photos}"),
        mapper,
    ];
    match spec.georef {
        Georef::None => {}
        Georef::Gps { .. } => parts.push("georeferenced by GPS".into()),
        Georef::Gcp { .. } => parts.push("georeferenced by GCPs".into()),
    }
    parts.retain(|p| !p.is_empty());
    parts.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::spec::MapperKind;

    #[test]
    fn two_runs_of_one_dataset_read_differently() {
        let mut spec: ReconstructionSpec = serde_json::from_value(serde_json::json!({
            "project": "01JA0000000000000000000000", "image_set": "datasets/x/images",
            "backend": {"name": "pycolmap"}, "camera_model": "SIMPLE_RADIAL",
            "max_features": 8192, "max_image_size": 1600, "pairs": {"strategy": "exhaustive"},
            "mapper": "incremental", "ba": "standard", "georef": {"mode": "none"},
            "exports": ["points-bin"]
        }))
        .unwrap();
        let plain = default_label("Flight 1", &spec, 12);
        assert_eq!(plain, "Flight 1 · 12 photos · incremental");
        spec.mapper = MapperKind::Global;
        spec.georef = Georef::Gps { target_epsg: None };
        assert_eq!(
            default_label("Flight 1", &spec, 12),
            "Flight 1 · 12 photos · global · georeferenced by GPS"
        );
        assert_eq!(
            default_label(" ", &spec, 1),
            "1 photo · global · georeferenced by GPS"
        );
    }
}
