"""Read Tessera's survey exports back with readers Tessera does not share code with:
laspy (LAS 1.4, and LAZ through lazrs) and pyproj (PROJ's own transformations).

    read_exports.py OUT_DIR PHOTOS_GPS_JSON

PHOTOS_GPS_JSON is {name: [lat, lon, alt]} for the photos that carry GPS. Prints one JSON
object of what it found; the Rust test decides what is right.
"""
import json
import sys
from pathlib import Path

import laspy
import numpy as np
import pyproj


def main():
    out = Path(sys.argv[1])
    gps = json.loads(Path(sys.argv[2]).read_text())
    found = {}

    las = laspy.read(out / "model.las")
    h = las.header
    crs = h.parse_crs()
    found["las"] = {
        "version": f"{h.version.major}.{h.version.minor}",
        "point_format": h.point_format.id,
        "points": int(h.point_count),
        "epsg": crs.to_epsg() if crs is not None else None,
        "crs_name": crs.name if crs is not None else None,
        "extra_dimensions": list(h.point_format.extra_dimension_names),
        "track_length_min": int(np.min(las["track_length"])) if h.point_count else None,
        "reprojection_error_max": float(np.max(las["reprojection_error"])) if h.point_count else None,
        "rgb_max": int(max(np.max(las.red), np.max(las.green), np.max(las.blue))) if h.point_count else None,
    }
    xyz = np.column_stack([las.x, las.y, las.z])

    if (out / "model.laz").exists():
        laz = laspy.read(out / "model.laz")
        lxyz = np.column_stack([laz.x, laz.y, laz.z])
        found["laz"] = {
            "points": int(laz.header.point_count),
            "epsg": laz.header.parse_crs().to_epsg() if laz.header.parse_crs() is not None else None,
            "max_difference_from_las": float(np.max(np.abs(lxyz - xyz))) if len(xyz) else 0.0,
            "same_track_lengths": bool(np.array_equal(laz["track_length"], las["track_length"])),
        }

    cams = json.loads((out / "cameras.geojson").read_text())
    epsg = found["las"]["epsg"]
    to_crs = pyproj.Transformer.from_crs("EPSG:4979", f"EPSG:{epsg}", always_xy=True)
    from_crs = pyproj.Transformer.from_crs(f"EPSG:{epsg}", "EPSG:4326", always_xy=True)
    geod = pyproj.Geod(ellps="WGS84")
    projection_error = 0.0
    from_gps = []
    for f in cams["features"]:
        lon, lat, height = f["geometry"]["coordinates"]
        pos = f["properties"]["position"]
        x, y, z = to_crs.transform(lon, lat, height)
        projection_error = max(projection_error, abs(x - pos["x"]), abs(y - pos["y"]), abs(z - pos["z"]))
        g = gps.get(f["properties"]["name"])
        if g is not None:
            _, _, metres = geod.inv(lon, lat, g[1], g[0])
            from_gps.append(metres)
    found["cameras"] = {
        "type": cams["type"],
        "features": len(cams["features"]),
        "position_crs": sorted({f["properties"]["position"]["crs"] for f in cams["features"]}),
        "max_projection_difference_m": projection_error,
        "horizontal_from_gps_m": sorted(from_gps),
    }

    # Where the points are, back in longitude and latitude by PROJ: around the cameras.
    lons, lats = from_crs.transform(np.median(xyz[:, 0]), np.median(xyz[:, 1]))
    cam_lon = float(np.median([f["geometry"]["coordinates"][0] for f in cams["features"]]))
    cam_lat = float(np.median([f["geometry"]["coordinates"][1] for f in cams["features"]]))
    _, _, apart = geod.inv(float(lons), float(lats), cam_lon, cam_lat)
    found["points_median_from_cameras_m"] = apart
    print(json.dumps(found))


if __name__ == "__main__":
    main()
