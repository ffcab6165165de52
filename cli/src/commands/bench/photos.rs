//! `tessera bench photos DIR`: what face processing costs per photo on one core, pass by
//! pass, against the same photos searched with every pass and against a bare decode and
//! encode, all in the same run; and, with `--against-deface`, `tessera blur` against
//! `deface` as whole processes on one core, side by side over the same photos.

use crate::commands::blur::{Privacy, reference_sets};
use crate::output::emit;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;
use tessera_core::SubjectId;
use tessera_core::privacy::{MatchPolicy, SubjectEmbeddings};
use tessera_faces::FaceModels;
use tessera_faces::search::{Pass, PassCost, Thoroughness};
use tessera_jobs::photos::{FaceService, decide, faces, project, render, upload as photo_upload};

#[derive(clap::Args, Debug)]
pub struct PhotosBench {
    /// Folder of photos.
    pub dir: PathBuf,
    #[command(flatten)]
    pub privacy: Privacy,
    /// Timed passes over the folder (after one warm-up pass).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Also time `tessera blur` against deface (this command, or a path to it) as whole
    /// processes on one core over the folder's JPEG and PNG photos, `--rounds` times each,
    /// alternating. deface is not installed by Tessera: `pip install deface onnxruntime`.
    #[arg(long, num_args = 0..=1, default_missing_value = "deface")]
    pub against_deface: Option<String>,
}

/// Keep this thread (and ONNX Runtime's single intra-op thread, which is this one) on
/// one core, so the figures are per core.
fn pin_to_one_core() -> bool {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; pid 0 is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

#[derive(Default)]
struct Timed {
    total_ms: f64,
    decode_ms: f64,
    embed_ms: f64,
    render_ms: f64,
    cost: [PassCost; Pass::ALL.len()],
    /// Deciding, with the second looks at close calls.
    decide_ms: f64,
    looked_again: usize,
    faces: usize,
    files: usize,
}

/// Everything face_process does to one photo's bytes, without storage.
fn process_once(
    models: &FaceModels,
    how: Thoroughness,
    name: &str,
    bytes: &[u8],
    subjects: &[SubjectEmbeddings],
    policy: MatchPolicy,
) -> anyhow::Result<Timed> {
    let t0 = Instant::now();
    let img = photo_upload::decode(name, bytes)
        .map_err(anyhow::Error::msg)?
        .rgb;
    let t1 = Instant::now();
    let searched = faces::faces_searched(models, &img, how, policy)?;
    let mut faces = searched.faces;
    let t_decide = Instant::now();
    let looked = decide::decide(models, &img, &mut faces, subjects, policy)?;
    let decide_ms = t_decide.elapsed().as_secs_f64() * 1e3;
    let t2 = Instant::now();
    let plans = render::plan(&faces, &[], tessera_faces::blur::DEFAULT_EXPAND);
    let mut files = 0;
    for p in &plans {
        render::render(&img, &p.blur, &render::FileMeta::default()).map_err(anyhow::Error::msg)?;
        files += 1;
    }
    Ok(Timed {
        total_ms: t0.elapsed().as_secs_f64() * 1e3,
        decode_ms: (t1 - t0).as_secs_f64() * 1e3,
        embed_ms: searched.embed_ms,
        render_ms: t2.elapsed().as_secs_f64() * 1e3,
        cost: searched.cost,
        decide_ms,
        looked_again: looked.looked_again,
        faces: faces.len(),
        files,
    })
}

/// The least any publisher does with a photo: decode it, encode it and a thumbnail.
fn baseline_once(name: &str, bytes: &[u8]) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let img = photo_upload::decode(name, bytes)
        .map_err(anyhow::Error::msg)?
        .rgb;
    render::jpeg(&img).map_err(anyhow::Error::msg)?;
    render::jpeg(&render::thumbnail(&img)).map_err(anyhow::Error::msg)?;
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// One search's figures over the timed rounds.
struct Series {
    totals: Vec<f64>,
    sum: Timed,
}

impl Series {
    fn run(
        models: &FaceModels,
        how: Thoroughness,
        inputs: &[(String, Vec<u8>)],
        rounds: u32,
        subjects: &[SubjectEmbeddings],
        policy: MatchPolicy,
    ) -> anyhow::Result<Series> {
        let mut s = Series {
            totals: Vec::new(),
            sum: Timed::default(),
        };
        for _ in 0..rounds {
            for (name, bytes) in inputs {
                let t = process_once(models, how, name, bytes, subjects, policy)?;
                s.totals.push(t.total_ms);
                s.sum.total_ms += t.total_ms;
                s.sum.decode_ms += t.decode_ms;
                s.sum.embed_ms += t.embed_ms;
                s.sum.render_ms += t.render_ms;
                s.sum.decide_ms += t.decide_ms;
                s.sum.looked_again += t.looked_again;
                for (acc, c) in s.sum.cost.iter_mut().zip(t.cost) {
                    acc.runs += c.runs;
                    acc.ms += c.ms;
                }
                s.sum.faces += t.faces;
                s.sum.files += t.files;
            }
        }
        s.totals.sort_by(f64::total_cmp);
        Ok(s)
    }

    /// Per photo: the mean of each step, and each kind of pass's runs and time.
    fn report(&self) -> serde_json::Value {
        let n = self.totals.len().max(1) as f64;
        let passes: serde_json::Map<String, serde_json::Value> = Pass::ALL
            .iter()
            .map(|p| {
                let c = self.sum.cost[*p as usize];
                (
                    p.as_str().to_string(),
                    serde_json::json!({
                        "runs_per_photo": c.runs as f64 / n,
                        "ms_per_photo": c.ms / n,
                    }),
                )
            })
            .collect();
        serde_json::json!({
            "p50_ms": percentile(&self.totals, 0.5),
            "p95_ms": percentile(&self.totals, 0.95),
            "mean_ms": self.sum.total_ms / n,
            "decode_ms_per_photo": self.sum.decode_ms / n,
            "embed_ms_per_photo": self.sum.embed_ms / n,
            "render_ms_per_photo": self.sum.render_ms / n,
            "decide_ms_per_photo": self.sum.decide_ms / n,
            "faces_looked_again_per_photo": self.sum.looked_again as f64 / n,
            "passes": passes,
            "faces_per_photo": self.sum.faces as f64 / n,
            "files_per_photo": self.sum.files as f64 / n,
        })
    }
}

pub async fn bench(json: bool, b: PhotosBench) -> anyhow::Result<ExitCode> {
    let images = crate::photos::list_images(&b.dir)?;
    let refs = b
        .privacy
        .opted_out
        .as_deref()
        .map(reference_sets)
        .transpose()?
        .unwrap_or_default();
    let deface = b.against_deface.clone();
    let process_args = whole_process_args(&b);
    let (dir, rounds) = (b.dir.clone(), b.rounds);
    let mut result = tokio::task::spawn_blocking(move || -> anyhow::Result<serde_json::Value> {
        let pinned = pin_to_one_core();
        let load = Instant::now();
        let models = FaceService::load_from_env(b.privacy.detector, 1)?;
        let first_load_ms = load.elapsed().as_secs_f64() * 1e3;
        let mut subjects = Vec::new();
        for (_, paths) in &refs {
            let mut embeddings = Vec::new();
            for p in paths {
                embeddings.push(project::reference_embedding(
                    &models,
                    &p.display().to_string(),
                    &std::fs::read(p)?,
                )?);
            }
            subjects.push(SubjectEmbeddings {
                subject: SubjectId::new(),
                embeddings,
            });
        }
        let policy = MatchPolicy::from_threshold(b.privacy.threshold);
        let mut inputs = Vec::new();
        for p in &images {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("photo")
                .to_string();
            let bytes = std::fs::read(p)?;
            // Photos the pipeline would refuse are left out of the timing.
            if photo_upload::decode(&name, &bytes).is_ok() {
                inputs.push((name, bytes));
            }
        }
        if inputs.is_empty() {
            bail!(
                "no photo in {} decodes; nothing to measure",
                b.dir.display()
            );
        }
        for (name, bytes) in &inputs {
            process_once(&models, Thoroughness::Gated, name, bytes, &subjects, policy)?;
        }
        let wall = Instant::now();
        let gated = Series::run(&models, Thoroughness::Gated, &inputs, b.rounds, &subjects, policy)?;
        let wall_s = wall.elapsed().as_secs_f64();
        let every = Series::run(&models, Thoroughness::Every, &inputs, b.rounds, &subjects, policy)?;
        let mut bases = Vec::new();
        for _ in 0..b.rounds {
            for (name, bytes) in &inputs {
                bases.push(baseline_once(name, bytes)?);
            }
        }
        bases.sort_by(f64::total_cmp);
        let base_mean = bases.iter().sum::<f64>() / bases.len() as f64;
        let g = gated.report();
        let e = every.report();
        Ok(serde_json::json!({
            "photos": inputs.len(),
            "rounds": b.rounds,
            "pinned_to_one_core": pinned,
            "detector": b.privacy.detector.as_str(),
            "policy": if b.privacy.threshold.is_some() { "threshold" } else { "fail_closed" },
            "onnxruntime": models.runtime_version,
            "model_load_ms": models.load_ms,
            "first_load_ms_with_runtime": first_load_ms,
            "photos_per_sec": gated.totals.len() as f64 / wall_s,
            "p50_ms": g["p50_ms"],
            "p95_ms": g["p95_ms"],
            "mean_ms": g["mean_ms"],
            "gated": g,
            "every_pass": e,
            "ratio_mean_vs_every_pass": gated.sum.total_ms / every.sum.total_ms.max(1e-9),
            "baseline_decode_encode_p50_ms": percentile(&bases, 0.5),
            "ratio_mean_vs_baseline": (gated.sum.total_ms / gated.totals.len() as f64) / base_mean.max(1e-9),
            "faces_per_round": gated.sum.faces / b.rounds as usize,
            "every_pass_faces_per_round": every.sum.faces / b.rounds as usize,
            "files_per_round": gated.sum.files / b.rounds as usize,
        }))
    })
    .await??;
    if let Some(cmd) = deface {
        let side =
            tokio::task::spawn_blocking(move || against_deface(&dir, &cmd, &process_args, rounds))
                .await??;
        result["against_deface"] = side;
    }
    emit(json, &result, || summary(&result));
    Ok(ExitCode::SUCCESS)
}

fn summary(r: &serde_json::Value) -> String {
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let mut lines = vec![format!(
        "{} photos × {} rounds on one core ({}): mean {:.1} ms, p50 {:.1} ms, p95 {:.1} ms; {:.2}× the time of every pass on every photo (mean {:.1} ms); {:.2}× a bare decode+encode (p50 {:.1} ms)",
        r["photos"],
        r["rounds"],
        r["detector"].as_str().unwrap_or(""),
        f(&r["mean_ms"]),
        f(&r["p50_ms"]),
        f(&r["p95_ms"]),
        f(&r["ratio_mean_vs_every_pass"]),
        f(&r["every_pass"]["mean_ms"]),
        f(&r["ratio_mean_vs_baseline"]),
        f(&r["baseline_decode_encode_p50_ms"]),
    )];
    lines.push(format!(
        "{:<12} {:>14} {:>12} {:>14} {:>12}",
        "pass", "runs/photo", "ms/photo", "every: runs", "every: ms"
    ));
    for p in Pass::ALL {
        let (g, e) = (
            &r["gated"]["passes"][p.as_str()],
            &r["every_pass"]["passes"][p.as_str()],
        );
        lines.push(format!(
            "{:<12} {:>14.2} {:>12.1} {:>14.2} {:>12.1}",
            p.as_str(),
            f(&g["runs_per_photo"]),
            f(&g["ms_per_photo"]),
            f(&e["runs_per_photo"]),
            f(&e["ms_per_photo"]),
        ));
    }
    for step in ["decode", "embed", "decide", "render"] {
        let k = format!("{step}_ms_per_photo");
        lines.push(format!(
            "{:<12} {:>14} {:>12.1} {:>14} {:>12.1}",
            step,
            "",
            f(&r["gated"][&k]),
            "",
            f(&r["every_pass"][&k]),
        ));
    }
    if let Some(d) = r.get("against_deface") {
        lines.push(format!(
            "whole processes on one core, {} photos: tessera blur {:.2} s, deface {:.2} s (best of {}): tessera is {:.2}× deface's speed",
            d["photos"],
            f(&d["tessera_blur_s"]),
            f(&d["deface_s"]),
            d["rounds"],
            f(&d["speed_vs_deface"]),
        ));
    }
    lines.join("\n")
}

/// `tessera blur`'s privacy arguments as this bench was given them.
fn whole_process_args(b: &PhotosBench) -> Vec<String> {
    let mut args = vec![
        "--detector".to_string(),
        b.privacy.detector.as_str().to_string(),
    ];
    if let Some(d) = &b.privacy.opted_out {
        args.extend(["--opted-out".to_string(), d.display().to_string()]);
    }
    if let Some(t) = b.privacy.threshold {
        args.extend(["--threshold".to_string(), t.to_string()]);
    }
    args
}

/// Runs `cmd` pinned to core 0 (set in the child before it starts, so every thread it
/// makes stays there); wall seconds.
fn timed_on_one_core(cmd: &mut Command) -> anyhow::Result<f64> {
    use std::os::unix::process::CommandExt;
    // SAFETY: sched_setaffinity is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t0 = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {:?}", cmd.get_program()))?;
    let s = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    Ok(s)
}

/// A fresh copy of `photos` in a new folder under `scratch`.
fn copy_of(photos: &[PathBuf], scratch: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let dir = scratch.join(name);
    std::fs::create_dir_all(&dir)?;
    for p in photos {
        let to = dir.join(p.file_name().context("a photo has no file name")?);
        std::fs::copy(p, &to).with_context(|| format!("cannot copy {}", p.display()))?;
    }
    Ok(dir)
}

/// `tessera blur` and deface, each as a whole process on core 0 over the same JPEG and
/// PNG photos (deface reads no HEIC), alternating, `rounds` times each; the best time of
/// each is compared, as the least disturbed by other work on a shared machine.
fn against_deface(
    dir: &Path,
    deface: &str,
    privacy_args: &[String],
    rounds: u32,
) -> anyhow::Result<serde_json::Value> {
    let photos: Vec<PathBuf> = crate::photos::list_images(dir)?
        .into_iter()
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| ["jpg", "jpeg", "png"].contains(&e.to_ascii_lowercase().as_str()))
        })
        .collect();
    if photos.is_empty() {
        bail!(
            "{} has no JPEG or PNG photo for deface to read",
            dir.display()
        );
    }
    let tessera = std::env::current_exe().context("cannot find this tessera binary")?;
    let scratch = tempfile::tempdir()?;
    let (mut best_t, mut best_d) = (f64::INFINITY, f64::INFINITY);
    for r in 0..rounds {
        let input = copy_of(&photos, scratch.path(), &format!("tessera-in-{r}"))?;
        let out = scratch.path().join(format!("tessera-out-{r}"));
        let t = timed_on_one_core(
            Command::new(&tessera)
                .arg("blur")
                .arg(&input)
                .arg("--out")
                .arg(&out)
                .args(privacy_args),
        )?;
        best_t = best_t.min(t);
        let input = copy_of(&photos, scratch.path(), &format!("deface-in-{r}"))?;
        let d = timed_on_one_core(Command::new(deface).arg(&input))
            .with_context(|| format!("deface (`{deface}`): install it with `pip install deface onnxruntime`, or give its path to --against-deface"))?;
        best_d = best_d.min(d);
    }
    Ok(serde_json::json!({
        "photos": photos.len(),
        "rounds": rounds,
        "tessera_blur_s": best_t,
        "deface_s": best_d,
        "speed_vs_deface": best_d / best_t.max(1e-9),
        "tessera_args": privacy_args,
    }))
}
