# The bare COLMAP 4 baseline of `tessera bench reconstruct`: what a user who knows
# pycolmap would run instead of Tessera, with pycolmap's own defaults. One JSON line out.
import json
import sys
import time

import pycolmap

database, images, output = sys.argv[1:4]
stages = []


def timed(stage, call):
    started = time.monotonic()
    result = call()
    stages.append({"stage": stage, "wall_s": time.monotonic() - started})
    return result


timed("extract", lambda: pycolmap.extract_features(database, images))
timed("match", lambda: pycolmap.match_exhaustive(database))
models = timed("map", lambda: pycolmap.incremental_mapping(database, images, output))
best = max(models.values(), key=lambda m: m.num_reg_images()) if models else None
print(json.dumps({
    "version": pycolmap.__version__,
    "stages": stages,
    "registered": best.num_reg_images() if best else 0,
    "points": best.num_points3D() if best else 0,
    "mean_reprojection_error": best.compute_mean_reprojection_error() if best else None,
}))
