//! `tessera reconstruct`'s flags, and the recipe they ask for: what the command line
//! says, translated into the one recipe every way in prepares
//! (`tessera_jobs::reconstruct::recipe`).

use anyhow::{Context, bail};
use std::path::PathBuf;
use tessera_core::crs::OutputCrs;
use tessera_core::spec::{
    BaMode, BackendSpec, CameraModel, ExportFormat, Georef, MapperKind, PairStrategy,
};
use tessera_jobs::reconstruct::recipe::{self, GeorefAsk, PairsAsk, Recipe};

/// The project every embedded reconstruction belongs to.
pub const LOCAL_PROJECT: &str = "00000000000000000000000000";

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pairs {
    /// Chosen from the photos (tessera_jobs::reconstruct::pairing): every pair up to 60
    /// photos, then neighbours by GPS, then by name order for frames, then every pair
    /// again up to 200 unordered photos, then retrieval by a tree trained on the photos.
    Auto,
    Exhaustive,
    Sequential,
    Spatial,
    /// Retrieval: each photo with the `--num-images` that look most like it, by the tree
    /// `--vocab-tree` names or one trained from the photos' own features.
    Vocabtree,
}

/// The reconstruction engine.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineArg {
    /// pycolmap (COLMAP 4) where installed, else the COLMAP command line.
    Auto,
    /// COLMAP 4 through pycolmap.
    Pycolmap,
    /// The COLMAP command line (Debian's 3.8 here; the worker image's CUDA build on AWS).
    Colmap,
}

impl EngineArg {
    /// The backend this names, its version resolved now, at submission.
    pub fn resolve(self) -> anyhow::Result<BackendSpec> {
        use tessera_jobs::reconstruct::stages;
        match self {
            EngineArg::Auto => stages::default_backend(),
            EngineArg::Pycolmap => stages::resolve("pycolmap"),
            EngineArg::Colmap => stages::resolve("colmap"),
        }
        .map_err(|e| anyhow::anyhow!(e.message))
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapper {
    Incremental,
    Hierarchical,
    Global,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ba {
    Standard,
    TwoStage,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeorefArg {
    /// GPS when at least 80 % of three or more photos carry it, else none; a model
    /// that cannot be placed stays in its own frame with a warning.
    Auto,
    None,
    /// Align to EXIF GPS in a local east-north-up frame.
    Gps,
    /// Align to EXIF GPS in earth-centred coordinates (EPSG:4978).
    GpsEcef,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Folder of photos.
    pub images: PathBuf,
    /// Output folder: sparse/0 (COLMAP binary), the exports, report.json.
    #[arg(long)]
    pub out: PathBuf,
    /// How image pairs are chosen.
    #[arg(long, value_enum, default_value_t = Pairs::Auto)]
    pub pairs: Pairs,
    /// Sequential pairs: images matched with each following one.
    #[arg(long, default_value_t = recipe::SEQUENTIAL_OVERLAP, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub overlap: u32,
    /// Spatial pairs: neighbours per image.
    #[arg(long, default_value_t = recipe::SPATIAL_NEIGHBOURS, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub neighbors: u32,
    /// Spatial pairs: each photo also with this many following photos of its flight
    /// strip (0: none; `--pairs auto` adds 4 for geotagged sets).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub strip_overlap: u32,
    /// Vocabulary-tree pairs: a tree file built for this engine (COLMAP 4's for pycolmap);
    /// without one, a tree is trained from the photos' own features.
    #[arg(long)]
    pub vocab_tree: Option<PathBuf>,
    /// Vocabulary-tree pairs: photos retrieved per photo.
    #[arg(long, default_value_t = tessera_jobs::reconstruct::pairing::VOCAB_TREE_IMAGES, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub num_images: u32,
    /// Engine: pycolmap (COLMAP 4) where installed, else the COLMAP command line.
    #[arg(long, value_enum, default_value_t = EngineArg::Auto)]
    pub engine: EngineArg,
    /// Mapper (`global` needs the pycolmap engine, or a CUDA COLMAP >= 3.14).
    #[arg(long, value_enum, default_value_t = Mapper::Incremental)]
    pub mapper: Mapper,
    /// Bundle adjustment.
    #[arg(long, value_enum, default_value_t = Ba::Standard)]
    pub ba: Ba,
    /// Map in overlapping clusters that run in parallel and are merged: `auto` (above
    /// 400 photos), `none`, a cluster size (`25`), or a size and the photos each cluster
    /// shares with its neighbours (`25/8`; default a third of the size).
    #[arg(long, default_value = "auto")]
    pub split: tessera_jobs::reconstruct::recipe::SplitAsk,
    /// Georeferencing.
    #[arg(long, value_enum, default_value_t = GeorefArg::Auto)]
    pub georef: GeorefArg,
    /// Place the model by ground control points: an OpenDroneMap `gcp_list.txt` (first
    /// line the coordinate system, then `geo_x geo_y geo_z im_x im_y image_name
    /// [gcp_name]` per mark). The survey exports default to its coordinate system.
    #[arg(long)]
    pub gcp: Option<PathBuf>,
    /// Exports, comma-separated: ply, nvm, colmap-text, colmap-bin, points-bin, and for a
    /// georeferenced model las, laz (points in `--crs`) and cameras-geojson.
    #[arg(long, value_delimiter = ',', default_value = "ply,colmap-bin")]
    pub export: Vec<String>,
    /// Coordinate system of the las, laz and cameras-geojson exports: EPSG:NNNN, or auto
    /// (the UTM zone of the photos). Default: auto for an east-north-up model, EPSG:4978
    /// for `--georef gps-ecef`.
    #[arg(long, value_parser = parse_crs)]
    pub crs: Option<OutputCrs>,
    /// COLMAP camera model.
    #[arg(long, default_value = "SIMPLE_RADIAL")]
    pub camera_model: String,
    /// SIFT features per image (default: chosen from the photos' size and number).
    #[arg(long)]
    pub max_features: Option<u32>,
    /// Longest image side used for features, in pixels (default: chosen from the photos'
    /// size and number).
    #[arg(long)]
    pub max_image_size: Option<u32>,
    /// Feed COLMAP the pixels as stored, ignoring EXIF orientation (by default a phone
    /// portrait is turned upright first, as every viewer shows it).
    #[arg(long)]
    pub ignore_exif_orientation: bool,
    /// Give every photo its own intrinsics, even where all share one size (photos from
    /// several lenses or zoom settings at one resolution). By default photos of one size
    /// share one camera.
    #[arg(long)]
    pub per_image_intrinsics: bool,
    /// Continue a previous run of the same reconstruction (damaged checkpoints re-run).
    #[arg(long)]
    pub resume: bool,
    /// Tasks run at once in this process (default: one, or for a split run one per
    /// cluster up to the number of CPUs; the memory gate holds back what does not fit).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub workers: Option<u32>,
    /// Print the spec this run would submit and the choices made from the photos, and
    /// run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Set a stage's memory estimate for its first attempt, e.g. `map=20` (MB); the
    /// stage is killed above twice that and retried one resource class up.
    #[arg(long, value_parser = parse_limit)]
    pub memory_limit: Vec<(String, u64)>,
}

fn parse_crs(s: &str) -> Result<OutputCrs, String> {
    s.parse()
}

fn parse_limit(s: &str) -> Result<(String, u64), String> {
    let (stage, mb) = s.split_once('=').ok_or("use STAGE=MB, e.g. map=20")?;
    let mb: u64 = mb
        .parse()
        .map_err(|_| format!("`{mb}` is not a number of megabytes"))?;
    Ok((stage.to_string(), mb))
}

/// The ground control file `--gcp` names: its object-store key (named by its content,
/// so the same file makes the same spec), its bytes and what it says; every problem
/// named with the file's path before anything runs.
pub struct ControlInput {
    /// Where it is stored.
    pub key: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Parsed.
    pub file: tessera_core::gcp::ControlFile,
}

/// The object-store key of the tree `--vocab-tree` names: named by its content, so the
/// same tree makes the same spec wherever the file lies. Hashed as it is read (a tree can
/// be hundreds of megabytes), once: the run stores the file under the key its spec holds.
fn tree_key(args: &Args) -> anyhow::Result<Option<String>> {
    use sha2::Digest;
    let Some(path) = &args.vocab_tree else {
        return Ok(None);
    };
    if !matches!(args.pairs, Pairs::Vocabtree) {
        bail!("--vocab-tree is for --pairs vocabtree");
    }
    let mut file = std::fs::File::open(path)
        .with_context(|| format!("cannot read the vocabulary tree {}", path.display()))?;
    let mut hasher = sha2::Sha256::new();
    let size = std::io::copy(&mut file, &mut hasher)
        .with_context(|| format!("cannot read the vocabulary tree {}", path.display()))?;
    if size == 0 {
        bail!(
            "the vocabulary tree {} is empty; leave --vocab-tree out to train one from the photos",
            path.display()
        );
    }
    Ok(Some(format!(
        "inputs/vocab-trees/{}.bin",
        &hex::encode(hasher.finalize())[..32]
    )))
}

/// `--gcp`, read and checked.
pub fn control_input(args: &Args) -> anyhow::Result<Option<ControlInput>> {
    let Some(path) = &args.gcp else {
        return Ok(None);
    };
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read the ground control file {}", path.display()))?
        .len();
    if size > tessera_core::gcp::MAX_BYTES {
        bail!(
            "{} is {size} bytes; a gcp_list.txt is a line per mark, and files over {} bytes are refused",
            path.display(),
            tessera_core::gcp::MAX_BYTES
        );
    }
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the ground control file {}", path.display()))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| {
        anyhow::anyhow!(
            "{} is not text; --gcp takes an OpenDroneMap gcp_list.txt",
            path.display()
        )
    })?;
    let file =
        tessera_core::gcp::parse(text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    Ok(Some(ControlInput {
        key: format!("inputs/gcp/{}.txt", &digest[..32]),
        bytes,
        file,
    }))
}

/// What `args` ask for, as a [`Recipe`]: the flags translated, every choice left to the
/// photos made by [`recipe::prepare`], as for the API.
pub fn recipe_from(args: &Args) -> anyhow::Result<Recipe> {
    let camera_model: CameraModel = serde_json::from_value(serde_json::json!(args.camera_model))
        .map_err(|_| {
            anyhow::anyhow!(
                "--camera-model `{}` is not a COLMAP model (SIMPLE_RADIAL, PINHOLE, OPENCV, …)",
                args.camera_model
            )
        })?;
    let mut exports = Vec::new();
    for e in &args.export {
        let f: ExportFormat =
            serde_json::from_value(serde_json::json!(e.trim())).map_err(|_| {
                anyhow::anyhow!(
                    "--export `{e}` is not one of ply, nvm, colmap-text, colmap-bin, points-bin, las, laz, cameras-geojson"
                )
            })?;
        exports.push(f);
    }
    let tree = tree_key(args)?;
    let pairs = match args.pairs {
        Pairs::Auto => PairsAsk::Auto,
        Pairs::Exhaustive => PairsAsk::Given(PairStrategy::Exhaustive),
        Pairs::Sequential => PairsAsk::Given(PairStrategy::Sequential {
            overlap: args.overlap,
        }),
        Pairs::Spatial => PairsAsk::Given(PairStrategy::Spatial {
            max_neighbors: args.neighbors,
            max_distance_m: recipe::SPATIAL_DISTANCE_M,
            strip_overlap: args.strip_overlap,
        }),
        Pairs::Vocabtree => PairsAsk::Given(PairStrategy::VocabTree {
            tree,
            num_images: args.num_images,
        }),
    };
    Ok(Recipe {
        camera_model,
        pairs,
        mapper: match args.mapper {
            Mapper::Incremental => MapperKind::Incremental,
            Mapper::Hierarchical => MapperKind::Hierarchical,
            Mapper::Global => MapperKind::Global,
        },
        ba: match args.ba {
            Ba::Standard => BaMode::Standard,
            Ba::TwoStage => BaMode::TwoStage,
        },
        split: args.split,
        georef: match (control_input(args)?, args.georef) {
            (Some(_), GeorefArg::None) => {
                bail!(
                    "--gcp places the model by ground control, and --georef none leaves it in its own frame; drop one"
                )
            }
            (Some(c), GeorefArg::GpsEcef) => GeorefAsk::Given(Georef::Gcp {
                file: c.key,
                target_epsg: Some(4978),
            }),
            (Some(c), _) => GeorefAsk::Given(Georef::Gcp {
                file: c.key,
                target_epsg: None,
            }),
            (None, GeorefArg::Auto) => GeorefAsk::Auto,
            (None, GeorefArg::None) => GeorefAsk::Given(Georef::None),
            (None, GeorefArg::Gps) => GeorefAsk::Given(Georef::Gps { target_epsg: None }),
            (None, GeorefArg::GpsEcef) => GeorefAsk::Given(Georef::Gps {
                target_epsg: Some(4978),
            }),
        },
        exports,
        crs: args.crs,
        max_features: args.max_features,
        max_image_size: args.max_image_size,
        respect_exif_orientation: !args.ignore_exif_orientation,
        per_image_intrinsics: args.per_image_intrinsics,
    })
}
