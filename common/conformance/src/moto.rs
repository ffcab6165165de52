//! A real AWS-compatible server for tests: `moto_server` from PyPI (installed by
//! `scripts/setup-aws-tools`), started on a free port of 127.0.0.1 for one test and
//! killed when the handle drops (or when the thread that started it ends).
//!
//! It speaks the S3, DynamoDB and SQS wire protocols, with conditional writes,
//! transactions, receive counts, redrive to dead-letter queues and S3 → SQS
//! notifications, so the AWS adapters are tested through the real AWS SDK.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The account id moto uses in ARNs.
pub const ACCOUNT: &str = "123456789012";
/// The region the tests use.
pub const REGION: &str = "us-east-1";

/// A running `moto_server`.
pub struct MotoServer {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

/// The launcher script (`scripts/moto_serve.py`): moto's server with DynamoDB requests
/// serialised, as DynamoDB serialises conditional writes per item.
/// Found at run time from the running test's package folder upward, so a test binary
/// reused from a shared target directory uses this checkout's script.
fn launcher() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .expect("a package folder or a working directory");
    start
        .ancestors()
        .map(|d| d.join("scripts/moto_serve.py"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no scripts/moto_serve.py above {}", start.display()))
}

/// The Python that has moto: beside `moto_server` (`TESSERA_MOTO_SERVER`, else the
/// setup script's venv).
pub fn python() -> PathBuf {
    binary().with_file_name("python")
}

/// Where `moto_server` is: `TESSERA_MOTO_SERVER`, else the setup script's venv.
pub fn binary() -> PathBuf {
    std::env::var_os("TESSERA_MOTO_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/tessera/venv-aws/bin/moto_server")
        })
}

impl MotoServer {
    /// Start a server and wait until it accepts connections.
    pub fn start() -> MotoServer {
        let bin = binary();
        assert!(
            bin.exists(),
            "moto_server is not at {}: run scripts/setup-aws-tools (or set TESSERA_MOTO_SERVER)",
            bin.display()
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut cmd = Command::new(python());
        cmd.arg(launcher())
            .args(["127.0.0.1", &port.to_string()])
            // Every read the fast path writes is also written by moto's own serializer
            // and compared (scripts/moto_serve.py): the adapter tests hold it to moto.
            .env("TESSERA_MOTO_CHECK_JSON", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to kill the
        // server when the thread that started it (the test) ends.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().expect("moto_server starts");
        let endpoint = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "moto_server did not listen on port {port} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        MotoServer { child, endpoint }
    }

    /// The ARN of SQS queue `name` on this server.
    pub fn queue_arn(name: &str) -> String {
        format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}")
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
