//! The browser boundary: which web pages may call this server, and under which host names.
//!
//! A browser attaches nothing secret to a cross-site request in `api_key` mode (the key
//! is a header a page must set itself), but in `none` mode every request is the local
//! tenant with admin rights, so any page the user visits could drive the API — through a
//! form post, a WebSocket (which CORS does not cover), or a DNS name rebound to
//! 127.0.0.1. So: a request carrying an `Origin` is served only when that origin is this
//! server's own or one the operator allowed (`--cors-origin`), and, where the server
//! knows its names (bound to a specific address), only under those names.

use axum::http::HeaderMap;
use std::net::SocketAddr;

/// Which origins and host names this server answers.
#[derive(Debug, Clone, Default)]
pub struct BrowserPolicy {
    /// Origins (`scheme://host[:port]`) allowed besides the server's own; `*` allows any.
    pub cors_origins: Vec<String>,
    /// `Host` header values accepted (lowercase); `None` where the server cannot know
    /// its names (bound to every interface, or behind a function URL).
    pub hosts: Option<Vec<String>>,
}

/// What the policy says of one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No `Origin` (not a browser page) or the server's own origin: serve, no CORS headers.
    SameOrigin,
    /// An allowed other origin: serve, and echo it in `Access-Control-Allow-Origin`.
    Cors(String),
    /// Refuse, saying why.
    Refused(String),
}

impl BrowserPolicy {
    /// The policy of a server listening on `addr`: a loopback address is reachable as
    /// `localhost`, `127.0.0.1` and `[::1]` at its port; a specific address as itself;
    /// an unspecified one (`0.0.0.0`) under any name.
    pub fn for_listener(addr: SocketAddr, cors_origins: Vec<String>) -> Self {
        let port = addr.port();
        let hosts = if addr.ip().is_unspecified() {
            None
        } else if addr.ip().is_loopback() {
            Some(vec![
                format!("localhost:{port}"),
                format!("127.0.0.1:{port}"),
                format!("[::1]:{port}"),
            ])
        } else {
            Some(vec![addr.to_string().to_ascii_lowercase()])
        };
        BrowserPolicy {
            cors_origins: normalize(cors_origins),
            hosts,
        }
    }

    /// The `api` function's policy: any host name (the function URL's), origins from
    /// `TESSERA_CORS_ORIGINS` (comma-separated; empty: the function URL's own only).
    pub fn from_env() -> Self {
        Self::function_url(&std::env::var("TESSERA_CORS_ORIGINS").unwrap_or_default())
    }

    /// A function URL's policy with these comma-separated allowed origins.
    pub fn function_url(origins: &str) -> Self {
        BrowserPolicy {
            cors_origins: normalize(origins.split(',').map(str::to_string).collect()),
            hosts: None,
        }
    }

    /// Judge a request by its headers.
    pub fn judge(&self, headers: &HeaderMap) -> Verdict {
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase);
        if let Some(hosts) = &self.hosts {
            let known = host
                .as_deref()
                .is_some_and(|h| hosts.iter().any(|k| k == h || without_default_port(k) == h));
            if !known {
                return Verdict::Refused(format!(
                    "this server answers as {}, not as `{}` (a DNS name pointed at it is refused); use one of those names",
                    hosts.join(", "),
                    host.as_deref().unwrap_or("(no Host header)")
                ));
            }
        }
        let Some(origin) = headers
            .get(axum::http::header::ORIGIN)
            .and_then(|v| v.to_str().ok())
        else {
            return Verdict::SameOrigin;
        };
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        // The server's own pages, under the name in use or any other name it has.
        let own = authority.is_some_and(|a| {
            Some(a) == host.as_deref()
                || self
                    .hosts
                    .as_ref()
                    .is_some_and(|hs| hs.iter().any(|h| h == a || without_default_port(h) == a))
        });
        if own {
            return Verdict::SameOrigin;
        }
        if self.cors_origins.iter().any(|o| o == "*" || *o == origin) {
            return Verdict::Cors(origin);
        }
        Verdict::Refused(format!(
            "requests from web pages at `{origin}` are refused: only this server's own pages may call it (an operator allows more with `tessera serve --cors-origin ORIGIN` or the stack's ApiAllowedOrigins)"
        ))
    }
}

fn normalize(origins: Vec<String>) -> Vec<String> {
    origins
        .into_iter()
        .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
        .filter(|o| !o.is_empty())
        .collect()
}

/// `localhost:80` is also sent as plain `localhost`.
fn without_default_port(host: &str) -> &str {
    host.strip_suffix(":80").unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("host", host.parse().unwrap());
        if let Some(o) = origin {
            h.insert("origin", o.parse().unwrap());
        }
        h
    }

    #[test]
    fn own_pages_and_allowed_origins_pass_others_and_rebound_names_do_not() {
        let p = BrowserPolicy::for_listener(
            "127.0.0.1:8080".parse().unwrap(),
            vec!["https://console.example/".into()],
        );
        assert_eq!(
            p.judge(&headers("127.0.0.1:8080", None)),
            Verdict::SameOrigin
        );
        assert_eq!(
            p.judge(&headers("LOCALHOST:8080", None)),
            Verdict::SameOrigin
        );
        assert_eq!(
            p.judge(&headers("localhost:8080", Some("http://localhost:8080"))),
            Verdict::SameOrigin
        );
        assert_eq!(
            p.judge(&headers("localhost:8080", Some("https://console.example"))),
            Verdict::Cors("https://console.example".into())
        );
        for (host, origin) in [
            ("localhost:8080", Some("http://evil.example")),
            ("localhost:8080", Some("null")),
            ("localhost:8080", Some("http://localhost:9999")),
            ("evil.example:8080", None),
            ("evil.example:8080", Some("http://evil.example:8080")),
            ("127.0.0.1:9090", None),
        ] {
            assert!(
                matches!(p.judge(&headers(host, origin)), Verdict::Refused(_)),
                "{host} {origin:?}"
            );
        }
        let open = BrowserPolicy::for_listener("0.0.0.0:80".parse().unwrap(), vec!["*".into()]);
        assert_eq!(
            open.judge(&headers("anything", Some("http://x.example"))),
            Verdict::Cors("http://x.example".into())
        );
    }
}
