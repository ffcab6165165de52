//! The console's files as `tessera serve` (and the `api` function, the same router)
//! serves them: the page at `/`, every module the page imports, a strict CSP, ETags.

use reqwest::StatusCode;
use tessera_api::AuthMode;

mod support;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_and_every_module_it_imports_are_served_with_a_strict_policy() {
    // With API keys on: the files hold no data and need none.
    let s = serve(AuthMode::ApiKey, false).await;
    let c = client();
    let page = c.get(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    let html = page.text().await.unwrap();
    assert!(html.contains("/console/src/main.js") && html.contains("/console/app.css"));

    // Follow the imports from main.js: every module is served, so a file left out of
    // `console::ASSETS` fails here rather than in a browser.
    let mut todo = vec!["src/main.js".to_string()];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(path) = todo.pop() {
        if !seen.insert(path.clone()) {
            continue;
        }
        let r = c
            .get(format!("{}/console/{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(
            r.headers()["content-type"],
            "text/javascript; charset=utf-8"
        );
        let etag = r.headers()["etag"].to_str().unwrap().to_string();
        let src = r.text().await.unwrap();
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        for line in src.lines().filter(|l| l.starts_with("import ")) {
            let spec = line.rsplit(['\'', '"']).nth(1).unwrap();
            let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
            for seg in spec.split('/') {
                match seg {
                    "." => {}
                    ".." => {
                        parts.pop();
                    }
                    s => parts.push(s),
                }
            }
            todo.push(parts.join("/"));
        }
        let again = c
            .get(format!("{}/console/{path}", s.base))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
    }
    assert!(seen.len() >= 10, "{seen:?}");
    assert_eq!(
        seen.len() + 2,
        tessera_api::console::ASSETS.len(),
        "every listed module is imported (plus index.html and app.css): {seen:?}"
    );
    for missing in ["/console/src/nope.js", "/console/../Cargo.toml"] {
        let r = c.get(format!("{}{missing}", s.base)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{missing}");
    }
}
