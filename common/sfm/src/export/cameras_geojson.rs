//! The registered cameras' positions as GeoJSON (RFC 7946): one Point feature per photo,
//! at WGS 84 longitude and latitude (the only CRS GeoJSON allows) and the model's height,
//! with the same position in the output CRS as a property, so a survey tool gets both
//! without converting.

use crate::error::ModelError;
use crate::model::Reconstruction;
use serde_json::{Value, json};
use tessera_core::crs::EarthPlacement;

/// The FeatureCollection of `rec`'s registered cameras, by image id. A model in its own
/// frame has no place on the earth: that is an error, not an empty collection.
pub fn cameras_geojson(
    rec: &Reconstruction,
    placement: &EarthPlacement,
) -> Result<Value, ModelError> {
    let mut features = Vec::with_capacity(rec.images.len());
    for img in rec.images.values() {
        let c = img.center();
        let g = placement.geodetic(c)?.ok_or_else(|| {
            ModelError::Inconsistent(
                "cameras-geojson needs a georeferenced model, and this one is in its own frame"
                    .into(),
            )
        })?;
        let mut properties = json!({
            "name": img.name,
            "image_id": img.id,
            "camera_id": img.camera_id,
        });
        if let Some(crs) = &placement.crs {
            let [x, y, z] = placement.place(c)?;
            properties["position"] =
                json!({ "crs": format!("EPSG:{}", crs.code), "x": x, "y": y, "z": z });
        }
        features.push(json!({
            "type": "Feature",
            "id": img.name,
            "geometry": { "type": "Point", "coordinates": [g.lon, g.lat, g.h] },
            "properties": properties,
        }));
    }
    Ok(json!({
        "type": "FeatureCollection",
        "features": features,
        "x-tessera": {
            "coordinates": "WGS 84 longitude and latitude in degrees; height in metres as the model carries it (the photos' GPS altitudes, or the control file's heights)",
            "crs": placement.crs.as_ref().map(|c| json!({ "code": format!("EPSG:{}", c.code), "name": c.name })),
        },
    }))
}
