//! The web console in a real browser: `console/tests/e2e.mjs`, Playwright (playwright-core,
//! installed by `scripts/setup` from the lockfile) driving Debian's Chromium with WebGL
//! through SwiftShader, against the real `tessera serve` this workspace built. The script
//! fails on any console error; its screenshots land in `target/console-screenshots/`
//! of the repository (CI keeps them).

use std::process::Command;
use tessera_tests::{repo_root, tessera_bin};

#[test]
fn the_console_works_end_to_end_in_chromium() {
    let root = repo_root();
    let script = root.join("console/tests/e2e.mjs");
    assert!(
        root.join("console/tests/node_modules/playwright-core")
            .is_dir(),
        "playwright-core is not installed; run scripts/setup (it runs npm ci in console/tests)"
    );
    let out = Command::new("node")
        .arg(&script)
        .env("TESSERA_BIN", tessera_bin())
        .env("REPO", &root)
        .env("SCREENSHOTS", root.join("target/console-screenshots"))
        .output()
        .expect("node runs (scripts/setup installs Node.js and Chromium)");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the browser test failed:\n{said}");
    assert!(said.contains("passed in"), "{said}");
    for view in [
        "0-project",
        "1-dataset",
        "2-reconstruction",
        "2b-downloads",
        "3-privacy",
        "4-photo",
        "4-webhook",
        "5-api-key",
        // Every page at 360 px on a touch phone.
        "phone-projects",
        "phone-project",
        "phone-dataset",
        "phone-reconstruction",
        "phone-privacy",
        "phone-photo",
        "phone-webhooks",
        "phone-webhook",
    ] {
        let shot = root.join(format!("target/console-screenshots/{view}.png"));
        assert!(
            std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000),
            "no screenshot of {view}"
        );
    }
}
