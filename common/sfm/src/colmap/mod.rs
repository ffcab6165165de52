//! The COLMAP command-line backend: version and capability detection, command lines
//! for each stage, progress parsed from its output, and checks of what it wrote
//! (its exit code alone cannot be trusted).

pub mod commands;
pub mod database;
pub mod progress;

use crate::backend::BackendInfo;
use std::collections::BTreeSet;
use std::process::Command;

/// Problems finding COLMAP.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// Not installed.
    #[error(
        "`{program}` could not be run ({source}); install COLMAP (Debian: `apt-get install colmap`, or run scripts/setup) or set TESSERA_COLMAP"
    )]
    Missing {
        /// What was tried.
        program: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Its banner was not understood.
    #[error("`{program} help` did not print a COLMAP version banner; got: {banner}")]
    Unrecognised {
        /// What was run.
        program: String,
        /// First line printed.
        banner: String,
    },
}

/// The COLMAP program to run: `$TESSERA_COLMAP` or `colmap`.
pub fn program() -> String {
    std::env::var("TESSERA_COLMAP").unwrap_or_else(|_| "colmap".into())
}

/// Parse COLMAP's banner (`COLMAP 3.8 -- Structure-from-Motion …` and
/// `(Commit … with CUDA)`): version and CUDA.
pub fn parse_banner(text: &str) -> Option<(String, bool)> {
    let first = text
        .lines()
        .find(|l| l.trim_start().starts_with("COLMAP "))?;
    let version = first
        .trim_start()
        .strip_prefix("COLMAP ")?
        .split_whitespace()
        .next()?
        .to_string();
    if !version.chars().next()?.is_ascii_digit() {
        return None;
    }
    let cuda = text.contains("with CUDA");
    Some((version, cuda))
}

fn at_least(version: &str, major: u32, minor: u32) -> bool {
    let mut it = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// What COLMAP `version` (with or without CUDA) can do through Tessera.
pub fn capabilities(version: &str, cuda: bool) -> BTreeSet<String> {
    let mut caps: BTreeSet<String> = [
        "features.extract.sift",
        "pairs.exhaustive",
        "pairs.sequential",
        "pairs.spatial",
        "pairs.vocabtree",
        "map.incremental",
        "map.hierarchical",
        "ba.standard",
        "ba.two_stage",
        "triangulate.retri",
        "relocalize.images",
        "georegister.sim3",
        "export.ply",
        "export.nvm",
        "export.colmap_text",
        "export.colmap_bin",
        "export.points_bin",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    if at_least(version, 3, 14) && cuda {
        caps.insert("map.global".into());
    }
    if cuda {
        caps.insert("dense.patch_match_stereo".into());
        caps.insert("dense.stereo_fusion".into());
    }
    caps
}

/// Run `colmap help` and describe the backend.
pub fn detect() -> Result<BackendInfo, DetectError> {
    let program = program();
    let out = Command::new(&program)
        .arg("help")
        .output()
        .map_err(|source| DetectError::Missing {
            program: program.clone(),
            source,
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (version, cuda) = parse_banner(&text).ok_or_else(|| DetectError::Unrecognised {
        program: program.clone(),
        banner: text
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect(),
    })?;
    Ok(BackendInfo {
        name: "colmap".into(),
        capabilities: capabilities(&version, cuda),
        version,
        cuda,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banners_are_parsed() {
        let cpu = "\nCOLMAP 3.8 -- Structure-from-Motion and Multi-View Stereo\n              (Commit Unknown on Unknown without CUDA)\n";
        assert_eq!(parse_banner(cpu), Some(("3.8".into(), false)));
        let gpu = "COLMAP 3.14.0.dev0 -- Structure-from-Motion and Multi-View Stereo\n(Commit abc on 2026-01-01 with CUDA)";
        assert_eq!(parse_banner(gpu), Some(("3.14.0.dev0".into(), true)));
        assert_eq!(parse_banner("command not found"), None);
    }

    #[test]
    fn global_mapping_needs_cuda_colmap_3_14() {
        assert!(!capabilities("3.8", false).contains("map.global"));
        assert!(!capabilities("3.14", false).contains("map.global"));
        assert!(capabilities("3.14.1", true).contains("map.global"));
        assert!(capabilities("4.0", true).contains("dense.stereo_fusion"));
    }
}
