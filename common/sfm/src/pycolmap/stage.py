"""Tessera's COLMAP 4 stage runner: one reconstruction stage per process, through pycolmap.

The Rust backend (`common/sfm/src/pycolmap/mod.rs`) embeds this file, writes it into the
user's cache (`~/.cache/tessera/pycolmap-runner/<hash>/`) and starts it as
`python stage.py <stage> --flag value ...`.
It speaks to Tessera in JSON lines on stdout, each with a `tessera` key:

    {"tessera": "started",  "phase": "global_positioning"}   (a phase within the stage's)
    {"tessera": "progress", "phase": "...", "current": 3, "total": 12}
    {"tessera": "figure",   "name": "registered_images", "value": 12}
    {"tessera": "warning",  "message": "..."}
    {"tessera": "done",     "stage": "extract"}

Anything else (COLMAP's own log lines) is kept only as the tail shown on failure. The
exit status is one signal among several: Tessera reads the database and the models this
writes, exactly as it does after the COLMAP command line.
"""

import argparse
import json
import os
import sqlite3
import sys
import time


# COLMAP draws RANSAC samples from a generator seeded from the clock unless an option
# gives a seed, and `set_random_seed` seeds only the calling thread's generator, not the
# matcher's worker threads: with only that, a relocalize test registered 2 of 2 new photos
# alone and 1 of 2 under load (CI). Each stochastic step gets this seed through its own
# options, so a stage's result is the photos', not the moment's or the scheduler's.
SEED = 0


def emit(kind, **fields):
    fields["tessera"] = kind
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def fail(message, code=2):
    emit("error", message=message)
    sys.exit(code)


try:
    import numpy as np
    import pycolmap
except ImportError as e:  # the venv is incomplete: say which one and how to mend it
    fail(f"pycolmap is not importable from {sys.executable} ({e}); run scripts/setup-pycolmap")

pycolmap.logging.minloglevel = 1  # warnings and errors only: the tail stays readable
pycolmap.logging.logtostderr = True


class Verbose:
    """COLMAP's own INFO lines while a call runs: they are the only progress COLMAP 4
    reports during extraction and matching (`Processed file [3/12]`, `Processing block
    [1/4, 2/4]`), and Tessera reads them as it reads COLMAP 3.8's. Nothing else may
    touch the database meanwhile: COLMAP treats a busy database as fatal."""

    def __enter__(self):
        pycolmap.logging.minloglevel = 0
        return self

    def __exit__(self, *exc):
        pycolmap.logging.minloglevel = 1


def settle(database):
    """Leave the database one self-contained file: COLMAP 4 writes in WAL mode, and
    Tessera stores `database.db` alone as the stage's checkpoint. A WAL still holding
    pages (a reader was open when COLMAP closed) would make that copy malformed."""
    c = sqlite3.connect(database)
    try:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        c.execute("PRAGMA journal_mode=DELETE")
    finally:
        c.close()


def device(args):
    return pycolmap.Device.cuda if args.gpu else pycolmap.Device.cpu


def extract(args):
    names = []
    if args.image_list:
        with open(args.image_list) as f:
            names = [line.strip() for line in f if line.strip()]
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = args.camera_model
    if args.existing_camera is not None:
        reader.existing_camera_id = args.existing_camera
    options = pycolmap.FeatureExtractionOptions()
    options.max_image_size = args.max_image_size
    options.sift.max_num_features = args.max_features
    options.sift.first_octave = args.first_octave
    options.num_threads = args.threads
    # COLMAP 4's AUTO shares a camera between photos whose size and EXIF agree.
    mode = {
        "single": pycolmap.CameraMode.SINGLE,
        "auto": pycolmap.CameraMode.AUTO,
        "per_image": pycolmap.CameraMode.PER_IMAGE,
    }[args.camera_mode]
    with Verbose():
        pycolmap.extract_features(
            args.database,
            args.images,
            image_names=names,
            camera_mode=mode,
            reader_options=reader,
            extraction_options=options,
            device=device(args),
        )
    if args.weak_below:
        look_again(args, names, mode, reader, options)
    settle(args.database)


def look_again(args, names, mode, reader, options):
    """Photos whose features came out under `--weak-below` (weak texture: water, fields,
    haze) extracted again with the lower `--weak-peak-threshold`, the others left as they
    are: SIFT on a photo's own pixels keeps few extrema where contrast is low, and a photo
    with a few hundred features may not register. COLMAP extracts a photo whose features
    are missing from the database again, on its own image row and camera."""
    c = sqlite3.connect(args.database)
    try:
        rows = c.execute(
            "SELECT images.image_id, images.name FROM images "
            "LEFT JOIN keypoints ON keypoints.image_id = images.image_id "
            "WHERE COALESCE(keypoints.rows, 0) < ?",
            (args.weak_below,),
        ).fetchall()
        if names:
            wanted = set(names)
            rows = [r for r in rows if r[1] in wanted]
        if not rows:
            return
        ids = [(r[0],) for r in rows]
        c.executemany("DELETE FROM keypoints WHERE image_id = ?", ids)
        c.executemany("DELETE FROM descriptors WHERE image_id = ?", ids)
        c.commit()
    finally:
        c.close()
    emit("figure", name="photos_extracted_again", value=len(rows))
    options.sift.peak_threshold = args.weak_peak_threshold
    # Quietly: COLMAP's own `Processed file [1/4]` lines would read as the stage's
    # progress going back from all photos to the first of these few.
    pycolmap.extract_features(
        args.database,
        args.images,
        image_names=[r[1] for r in rows],
        camera_mode=mode,
        reader_options=reader,
        extraction_options=options,
        device=device(args),
    )


def train_tree(args):
    """A vocabulary tree trained from this database's own SIFT descriptors (what COLMAP's
    vocab_tree_builder does), for retrieval pairs where no tree ships. An even, seeded
    sample of each photo's descriptors is read one photo at a time, so memory is the
    sample (`--descriptors` × 128 floats), not the set."""
    db = pycolmap.Database.open(args.database)
    try:
        images = db.read_all_images()
        if not images:
            fail("the database has no photos to train a vocabulary tree from")
        per_image = max(1, args.descriptors // len(images))
        rng = np.random.default_rng(SEED)
        sample = []
        for im in images:
            d = db.read_descriptors(im.image_id).to_float().data
            if d.shape[0] > per_image:
                d = d[np.sort(rng.choice(d.shape[0], per_image, replace=False))]
            sample.append(np.asarray(d, dtype=np.float32))
    finally:
        db.close()
    sample = np.concatenate(sample) if sample else np.zeros((0, 128), np.float32)
    words = min(args.words, max(1, sample.shape[0] // 40))
    if sample.shape[0] < 2 or words < 2:
        fail(f"{sample.shape[0]} descriptors are too few to train a vocabulary tree; match every pair instead")
    index = pycolmap.VisualIndex.create(sample.shape[1], 64)
    options = pycolmap.VisualIndex.BuildOptions()
    options.num_visual_words = words
    options.num_iterations = 11
    options.num_rounds = 1
    index.build(options, pycolmap.FeatureDescriptorsFloat(pycolmap.FeatureExtractorType.SIFT, sample))
    index.write(args.out)
    emit("figure", name="tree_words", value=words)
    emit("figure", name="tree_descriptors", value=int(sample.shape[0]))


def match(args):
    matching = pycolmap.FeatureMatchingOptions()
    verification = pycolmap.TwoViewGeometryOptions()
    verification.ransac.random_seed = SEED
    dev = device(args)
    kw = {"verification_options": verification, "device": dev}
    if args.strategy == "exhaustive":
        call = lambda: pycolmap.match_exhaustive(args.database, matching, **kw)  # noqa: E731
    elif args.strategy == "sequential":
        pairing = pycolmap.SequentialPairingOptions()
        pairing.overlap = args.overlap
        call = lambda: pycolmap.match_sequential(args.database, matching, pairing, **kw)  # noqa: E731
    elif args.strategy == "spatial":
        pairing = pycolmap.SpatialPairingOptions()
        pairing.max_num_neighbors = args.max_neighbors
        pairing.max_distance = args.max_distance
        call = lambda: pycolmap.match_spatial(args.database, matching, pairing, **kw)  # noqa: E731
    elif args.strategy == "listed":
        # Pairs Tessera listed (a survey's flight-strip neighbours); the ones already
        # in the database are skipped by COLMAP's matcher.
        pairing = pycolmap.ImportedPairingOptions()
        pairing.match_list_path = args.pairs
        call = lambda: pycolmap.match_image_pairs(args.database, matching, pairing, **kw)  # noqa: E731
    elif args.strategy == "vocabtree":
        pairing = pycolmap.VocabTreePairingOptions()
        pairing.vocab_tree_path = args.vocab_tree
        pairing.num_images = args.num_images
        call = lambda: pycolmap.match_vocabtree(args.database, matching, pairing, **kw)  # noqa: E731
    else:
        fail(f"unknown pair strategy `{args.strategy}`")
    with Verbose():
        call()
    settle(args.database)


def incremental_options(args):
    options = pycolmap.IncrementalPipelineOptions()
    options.random_seed = SEED
    options.extract_colors = bool(args.images)
    if getattr(args, "snapshots", None):
        options.snapshot_path = args.snapshots
        options.snapshot_frames_freq = args.snapshot_every
    # A relaxed second pass: the thresholds come from Tessera (backend::RELAXED_INIT).
    if getattr(args, "init_min_inliers", None) is not None:
        options.mapper.init_min_num_inliers = args.init_min_inliers
        options.mapper.init_min_tri_angle = args.init_min_tri_angle
        options.mapper.abs_pose_min_num_inliers = args.abs_pose_min_inliers
    # One cluster of a split run: only these photos are mapped.
    if getattr(args, "image_list", None):
        with open(args.image_list, encoding="utf-8") as f:
            options.image_names = [line.strip() for line in f if line.strip()]
    return options


def map_incremental(args):
    options = incremental_options(args)
    total = len(options.image_names) or count_images(args.database)
    registered = [0]

    # Counted per model: a new model starts from its initial pair of two photos.
    def initial_pair():
        registered[0] = 2
        emit("progress", phase="incremental_register", current=2, total=total)

    def next_image():
        registered[0] = min(registered[0] + 1, total)
        emit("progress", phase="incremental_register", current=registered[0], total=total)

    models = pycolmap.incremental_mapping(
        args.database,
        args.images or "",
        args.output,
        options,
        input_path=args.input or "",
        initial_image_pair_callback=initial_pair,
        next_image_callback=next_image,
    )
    report_models(models)


def map_hierarchical(args):
    options = pycolmap.HierarchicalPipelineOptions()
    options.incremental_options = incremental_options(args)
    if args.leaf_max_images:
        options.clustering_options.leaf_max_num_images = args.leaf_max_images
        options.clustering_options.image_overlap = args.image_overlap
    emit("started", phase="hierarchical_cluster")
    models = pycolmap.hierarchical_mapping(args.database, args.images, args.output, options)
    report_models(models)


def map_global(args):
    options = pycolmap.GlobalPipelineOptions()
    options.random_seed = SEED
    emit("started", phase="global_positioning")
    models = pycolmap.global_mapping(args.database, args.images, args.output, options)
    # Like the incremental pipeline, one numbered folder per model.
    report_models(models)


def report_models(models):
    sizes = sorted((m.num_reg_images() for m in models.values()), reverse=True)
    emit("figure", name="models", value=len(sizes))
    if sizes:
        emit("figure", name="registered_images", value=sizes[0])


def count_images(database):
    db = pycolmap.Database.open(database)
    try:
        return db.num_images()
    finally:
        db.close()


def bundle_adjust(args):
    rec = pycolmap.Reconstruction(args.input)
    options = pycolmap.BundleAdjustmentOptions()
    if args.fix_intrinsics:
        options.refine_focal_length = False
        options.refine_principal_point = False
        options.refine_extra_params = False
    before = rec.compute_mean_reprojection_error()
    pycolmap.bundle_adjustment(rec, options)
    emit("figure", name="mean_reprojection_error_before", value=before)
    emit("figure", name="mean_reprojection_error", value=rec.compute_mean_reprojection_error())
    os.makedirs(args.output, exist_ok=True)
    rec.write(args.output)


def georegister(args):
    rec = pycolmap.Reconstruction(args.input)
    db = pycolmap.Database.open(args.database)
    try:
        priors = {p.corr_data_id.id: p for p in db.read_all_pose_priors() if p.has_position()}
        images = {i.image_id: i for i in db.read_all_images()}
    finally:
        db.close()
    # The ENU origin is the first photo by name that carries GPS, registered or not: the
    # same origin Tessera measures the alignment residual from.
    located = sorted(
        (images[i].name, i, np.asarray(p.position, dtype=np.float64))
        for i, p in priors.items()
        if i in images and p.coordinate_system == pycolmap.PosePriorCoordinateSystem.WGS84
    )
    registered_ids = set(rec.reg_image_ids())
    registered = [(name, lla) for name, i, lla in located if i in registered_ids]
    if len(registered) < 3:
        fail(f"only {len(registered)} registered photos carry GPS; georegistration needs 3")
    names = [name for name, _ in registered]
    lla = np.array([lla for _, lla in registered])
    gps = pycolmap.GPSTransform()
    if args.ecef:
        target = np.array(gps.ellipsoid_to_ecef(lla))
    else:
        origin = located[0][2]
        target = np.array(gps.ellipsoid_to_enu(lla, origin[0], origin[1], origin[2]))
    ransac = pycolmap.RANSACOptions()
    ransac.random_seed = SEED
    ransac.max_error = args.max_error
    sim3 = pycolmap.align_reconstruction_to_locations(rec, names, target, 3, ransac)
    if sim3 is None:
        fail("the model could not be aligned to the photos' GPS within the error bound")
    rec.transform(sim3)
    os.makedirs(args.output, exist_ok=True)
    rec.write(args.output)


def register(args):
    options = pycolmap.IncrementalPipelineOptions()
    options.random_seed = SEED
    # One thread: with the seed alone, whether a marginal new photo registered still
    # turned on thread timing (the relocalize test registered 1 of 2 in 1 of 4 runs
    # under three CPU burners, 0 of 8 failed with one thread). Registering a few photos
    # into a finished model is short; a result that depends on the scheduler is not.
    options.num_threads = 1
    options.extract_colors = False
    options.fix_existing_frames = True
    options.multiple_models = False
    # The mapping stage's last look: the model's photos and the ones in no model only.
    if args.image_list:
        with open(args.image_list, encoding="utf-8") as f:
            options.image_names = [line.strip() for line in f if line.strip()]
    os.makedirs(args.output, exist_ok=True)
    # No colours are read, but the pipeline wants an image folder that exists.
    models = pycolmap.incremental_mapping(
        args.database, args.input, args.output, options, input_path=args.input
    )
    if not models:
        fail("no photo could be registered into the model")
    best = max(models.values(), key=lambda m: m.num_reg_images())
    total = count_images(args.database)
    if best.num_reg_images() < total and args.relaxed_abs_pose_min_inliers:
        # A new photo that overlaps the model only a little (fewer features, another
        # size) can miss COLMAP's default 30 pose inliers by a few, and whether it does
        # can turn on thread timing: it gets a second try from the first pass's result,
        # at the relaxed threshold the mapping stage's second pass uses.
        first = args.output + ".first"
        os.makedirs(first, exist_ok=True)
        best.write(first)
        options.mapper.abs_pose_min_num_inliers = args.relaxed_abs_pose_min_inliers
        again = pycolmap.incremental_mapping(args.database, first, args.output, options, input_path=first)
        if again:
            retry = max(again.values(), key=lambda m: m.num_reg_images())
            emit("figure", name="registered_on_second_try", value=retry.num_reg_images() - best.num_reg_images())
            if retry.num_reg_images() > best.num_reg_images():
                best = retry
    best.write(args.output)


def triangulate(args):
    rec = pycolmap.Reconstruction(args.input)
    os.makedirs(args.output, exist_ok=True)
    out = pycolmap.triangulate_points(rec, args.database, args.images, args.output, clear_points=True)
    emit("figure", name="points", value=out.num_points3D())


def main():
    parser = argparse.ArgumentParser(prog="stage.py")
    sub = parser.add_subparsers(dest="stage", required=True)

    p = sub.add_parser("extract")
    p.add_argument("--database", required=True)
    p.add_argument("--images", required=True)
    p.add_argument("--camera-model", default="SIMPLE_RADIAL")
    p.add_argument("--camera-mode", choices=["single", "auto", "per_image"], default="auto")
    p.add_argument("--max-image-size", type=int, default=3200)
    p.add_argument("--max-features", type=int, default=8192)
    p.add_argument("--first-octave", type=int, default=-1)
    p.add_argument("--threads", type=int, default=-1)
    p.add_argument("--weak-below", type=int, default=0)
    p.add_argument("--weak-peak-threshold", type=float, default=0.004)
    p.add_argument("--image-list")
    p.add_argument("--existing-camera", type=int)
    p.add_argument("--gpu", type=int, default=0)
    p.set_defaults(run=extract)

    p = sub.add_parser("match")
    p.add_argument("--database", required=True)
    p.add_argument("--strategy", required=True)
    p.add_argument("--overlap", type=int, default=10)
    p.add_argument("--max-neighbors", type=int, default=20)
    p.add_argument("--max-distance", type=float, default=1000.0)
    p.add_argument("--vocab-tree", default="")
    p.add_argument("--num-images", type=int, default=50)
    p.add_argument("--pairs", default="")
    p.add_argument("--gpu", type=int, default=0)
    p.set_defaults(run=match)

    p = sub.add_parser("train-tree")
    p.add_argument("--database", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--words", type=int, required=True)
    p.add_argument("--descriptors", type=int, required=True)
    p.set_defaults(run=train_tree)

    p = sub.add_parser("map")
    p.add_argument("--database", required=True)
    p.add_argument("--images", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--snapshots")
    p.add_argument("--snapshot-every", type=int, default=10)
    p.add_argument("--input")
    p.add_argument("--init-min-inliers", type=int)
    p.add_argument("--init-min-tri-angle", type=float)
    p.add_argument("--abs-pose-min-inliers", type=int)
    p.add_argument("--image-list")
    p.set_defaults(run=map_incremental)

    p = sub.add_parser("map_hierarchical")
    p.add_argument("--database", required=True)
    p.add_argument("--images", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--leaf-max-images", type=int, default=0)
    p.add_argument("--image-overlap", type=int, default=50)
    p.set_defaults(run=map_hierarchical)

    p = sub.add_parser("map_global")
    p.add_argument("--database", required=True)
    p.add_argument("--images", required=True)
    p.add_argument("--output", required=True)
    p.set_defaults(run=map_global)

    p = sub.add_parser("bundle_adjust")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--fix-intrinsics", type=int, default=0)
    p.set_defaults(run=bundle_adjust)

    p = sub.add_parser("georegister")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--database", required=True)
    p.add_argument("--ecef", type=int, default=0)
    p.add_argument("--max-error", type=float, required=True)
    p.set_defaults(run=georegister)

    p = sub.add_parser("register")
    p.add_argument("--database", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--relaxed-abs-pose-min-inliers", type=int, default=0)
    p.add_argument("--image-list")
    p.set_defaults(run=register)

    p = sub.add_parser("triangulate")
    p.add_argument("--database", required=True)
    p.add_argument("--images", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.set_defaults(run=triangulate)

    p = sub.add_parser("version")
    p.set_defaults(run=lambda _: emit("version", version=pycolmap.__version__, cuda=pycolmap.has_cuda))

    args = parser.parse_args()
    # The calling thread's generator too (what an option does not reach).
    if hasattr(pycolmap, "set_random_seed"):
        pycolmap.set_random_seed(SEED)
    started = time.monotonic()
    args.run(args)
    emit("done", stage=args.stage, seconds=round(time.monotonic() - started, 3))


if __name__ == "__main__":
    main()
