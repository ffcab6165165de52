//! Loading ONNX Runtime from a shared library at run time.
//!
//! The library is the `libonnxruntime.so` from the `onnxruntime` wheel on PyPI (no binary
//! is downloaded at build time). It is loaded once per process; ort refuses a library
//! older than the API it was built for with an error, which is turned into a startup
//! error that says what to install.

use crate::error::FaceError;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable naming the library.
pub const DYLIB_ENV: &str = "ORT_DYLIB_PATH";

/// A loaded ONNX Runtime.
#[derive(Clone)]
pub struct OnnxRuntime {
    pub(crate) env: ort::environment::Environment,
    /// The library's version string (e.g. `1.32.0`).
    pub version: String,
    /// Where it was loaded from.
    pub path: PathBuf,
}

/// The ONNX Runtime version `scripts/setup-onnx` installs.
pub const INSTALLED_VERSION: &str = "1.32.0";

static LOADED: OnceLock<Result<OnnxRuntime, String>> = OnceLock::new();

impl OnnxRuntime {
    /// The library named by `ORT_DYLIB_PATH`, or where `scripts/setup` installs it
    /// (`~/.cache/tessera/onnxruntime/1.32.0/`) when the variable is not set; loaded
    /// once per process.
    pub fn from_env() -> Result<OnnxRuntime, FaceError> {
        let path = std::env::var_os(DYLIB_ENV)
            .map(PathBuf::from)
            .or_else(|| {
                crate::models::installed(&format!("onnxruntime/{INSTALLED_VERSION}"))
                    .map(|d| d.join(format!("libonnxruntime.so.{INSTALLED_VERSION}")))
            })
            .ok_or_else(|| FaceError::Runtime {
                path: format!("${DYLIB_ENV}"),
                reason: "the variable is not set and there is no home folder to look in".into(),
            })?;
        Self::load(&path)
    }

    /// The library at `path`. A process holds one ONNX Runtime: the first successful
    /// load wins and later calls get it whatever path they name.
    pub fn load(path: &Path) -> Result<OnnxRuntime, FaceError> {
        if let Some(Ok(rt)) = LOADED.get() {
            return Ok(rt.clone());
        }
        if !path.is_file() {
            return Err(FaceError::Runtime {
                path: path.display().to_string(),
                reason: "no such file".into(),
            });
        }
        let result = LOADED.get_or_init(|| {
            let builder = ort::init_from(path).map_err(|e| e.to_string())?;
            let env = builder
                .with_name("tessera")
                .build()
                .map_err(|e| e.to_string())?;
            let version = version_of(path)?;
            Ok(OnnxRuntime {
                env,
                version,
                path: path.to_path_buf(),
            })
        });
        result.clone().map_err(|reason| FaceError::Runtime {
            path: path.display().to_string(),
            reason,
        })
    }
}

/// The library's own version string, from `OrtGetApiBase()->GetVersionString()`.
fn version_of(path: &Path) -> Result<String, String> {
    // SAFETY: the library was just loaded by ort from the same path, so its
    // initialisers have run; OrtGetApiBase takes no arguments and returns a pointer to a
    // static table whose GetVersionString returns a static NUL-terminated string.
    unsafe {
        let lib = libloading::Library::new(path).map_err(|e| e.to_string())?;
        let get: libloading::Symbol<unsafe extern "C" fn() -> *const ort::sys::OrtApiBase> = lib
            .get(b"OrtGetApiBase")
            .map_err(|_| "it does not export OrtGetApiBase; it is not ONNX Runtime".to_string())?;
        let base = get();
        if base.is_null() {
            return Err("OrtGetApiBase returned null".into());
        }
        let v = ((*base).GetVersionString)();
        Ok(std::ffi::CStr::from_ptr(v).to_string_lossy().into_owned())
    }
}
