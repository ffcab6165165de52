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

    /// The policy of `tessera serve`, after the rules that keep a server from being
    /// everyone's admin: `--auth none` off loopback needs `insecure`; so does `*` among
    /// the allowed origins with `--auth none` (any page the user visits would act as the
    /// local admin); and a server bound to every interface (`0.0.0.0`, `[::]`) answers
    /// only under the `host_names` it is given (with or without its port) and the
    /// loopback names, since it cannot otherwise tell its own name from a DNS name
    /// rebound to it. The error says which flag to add.
    pub fn for_server(
        addr: SocketAddr,
        auth: crate::AuthMode,
        cors_origins: Vec<String>,
        host_names: &[String],
        insecure: bool,
    ) -> Result<Self, String> {
        let none = auth == crate::AuthMode::None;
        if none && !addr.ip().is_loopback() && !insecure {
            return Err(format!(
                "--auth none on {addr} would make anyone who can reach this machine the local tenant, with admin rights; use --auth api_key, or --addr 127.0.0.1:PORT, or add --insecure if you mean it"
            ));
        }
        let cors_origins = normalize(cors_origins);
        // `null` is what any page sends from a sandboxed frame: as open as `*`.
        if let Some(open) = cors_origins.iter().find(|o| *o == "*" || *o == "null")
            && none
            && !insecure
        {
            return Err(format!(
                "--cors-origin '{open}' with --auth none would let every web page the user visits act as the local tenant, with admin rights; name the pages' origins, use --auth api_key, or add --insecure if you mean it"
            ));
        }
        let mut policy = Self::for_listener(addr, cors_origins);
        let names: Vec<String> = host_names
            .iter()
            .map(|n| n.trim().to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        if addr.ip().is_unspecified() && names.is_empty() {
            return Err(format!(
                "bound to every interface ({addr}), the server cannot tell its own name from a DNS name rebound to it; name it with --host-name NAME (repeatable), or listen on one address"
            ));
        }
        // Names given are answered besides the address's own (a reverse proxy's name in
        // front of a loopback server, say); bound to every interface, only they and the
        // loopback names are.
        let port = addr.port();
        let mut hosts = policy.hosts.take().unwrap_or_else(|| {
            vec![
                format!("localhost:{port}"),
                format!("127.0.0.1:{port}"),
                format!("[::1]:{port}"),
            ]
        });
        for n in names {
            if !n.contains(':') || n.starts_with('[') && n.ends_with(']') {
                hosts.push(format!("{n}:{port}"));
            }
            hosts.push(n);
        }
        policy.hosts = Some(hosts);
        Ok(policy)
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
    #[test]
    fn a_server_for_everyone_needs_insecure_and_every_interface_needs_names() {
        use crate::AuthMode::{ApiKey, None as Open};
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let star = || vec!["*".to_string()];
        let named = ["photos.example".to_string()];
        let refused = |r: Result<BrowserPolicy, String>, flag: &str| {
            let e = r.expect_err("refused");
            assert!(e.contains(flag), "{e}");
        };
        refused(
            BrowserPolicy::for_server(any, Open, vec![], &named, false),
            "--insecure",
        );
        refused(
            BrowserPolicy::for_server(local, Open, star(), &[], false),
            "--insecure",
        );
        refused(
            BrowserPolicy::for_server(local, Open, vec!["null".into()], &[], false),
            "--insecure",
        );
        refused(
            BrowserPolicy::for_server(any, ApiKey, vec![], &[], false),
            "--host-name",
        );
        refused(
            BrowserPolicy::for_server(any, Open, vec![], &[], true),
            "--host-name",
        );
        assert!(BrowserPolicy::for_server(local, Open, star(), &[], true).is_ok());
        assert!(BrowserPolicy::for_server(local, ApiKey, star(), &[], false).is_ok());
        let p = BrowserPolicy::for_server(any, ApiKey, vec![], &named, false).unwrap();
        for host in ["photos.example:8080", "photos.example", "localhost:8080"] {
            assert_eq!(p.judge(&headers(host, None)), Verdict::SameOrigin, "{host}");
        }
        // A DNS name rebound to the machine is no longer answered.
        for host in ["evil.example:8080", "10.0.0.7:8080"] {
            assert!(
                matches!(p.judge(&headers(host, None)), Verdict::Refused(_)),
                "{host}"
            );
        }
        // On loopback behind a proxy: its own names and the proxy's.
        let proxied = BrowserPolicy::for_server(local, ApiKey, vec![], &named, false).unwrap();
        for host in ["photos.example", "127.0.0.1:8080"] {
            assert_eq!(
                proxied.judge(&headers(host, None)),
                Verdict::SameOrigin,
                "{host}"
            );
        }
        assert!(matches!(
            proxied.judge(&headers("evil.example", None)),
            Verdict::Refused(_)
        ));
    }
}
