//! Notices: what Tessera tells a tenant's webhooks when a job ends or a photo's
//! publication changes, so a client need not poll or hold a stream open.
//!
//! A [`Notice`] has an id that is the same however often it is raised (a retried task,
//! a reaper that repeats a crashed step, two tasks of one job that both see it fail):
//! deliveries are keyed by subscription and notice id, so a receiver gets each notice
//! once per subscription, and every retry of one delivery carries the same id.
//!
//! Each delivery is signed: `Tessera-Webhook-Signature: v1=<hex HMAC-SHA256>` over
//! `"<id>.<timestamp>.<body>"` with the subscription's secret ([`signature`]). The
//! timestamp is the attempt's, so a receiver can refuse old replays.
//!
//! Targets are checked twice ([`check_target`] when a subscription is made, and
//! [`is_private`] on every address the name resolves to at delivery): a webhook must not
//! become a way to reach the operator's own network (loopback, private ranges, link-local
//! cloud metadata) unless the operator says so.

use crate::clock::Millis;
use crate::ids::{ProjectId, TenantId, WebhookId};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::net::IpAddr;

/// The job kind that carries one delivery of one notice to one webhook.
pub const DELIVERY_JOB: &str = "webhook_delivery";
/// Its one task's kind (the `notify.` attempt policy: retried for about a day).
pub const DELIVERY_TASK: &str = "notify.deliver";
/// The job that publishes one notice to the notice bus, made when publishing it inline
/// failed: the bus is retried by the `notify.*` attempt policy, and nothing (a photo
/// being withheld, a task's end) waits for it.
pub const PUBLISH_JOB: &str = "notice_publish";
/// Its one task's kind.
pub const PUBLISH_TASK: &str = "notify.publish";

/// What happened, as a receiver filters on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum NoticeType {
    /// Every task of a job succeeded.
    #[serde(rename = "job.succeeded")]
    JobSucceeded,
    /// A task of a job failed for good; the job will not finish unless resumed.
    #[serde(rename = "job.failed")]
    JobFailed,
    /// A job was cancelled.
    #[serde(rename = "job.cancelled")]
    JobCancelled,
    /// A photo's blurred files are served.
    #[serde(rename = "photo.published")]
    PhotoPublished,
    /// A photo that was served is withheld until it is decided again (a subject opted
    /// out, its blur regions changed): copies made of it should be taken down.
    #[serde(rename = "photo.unpublished")]
    PhotoUnpublished,
    /// A photo's processing failed for good; nothing of it is served.
    #[serde(rename = "photo.failed")]
    PhotoFailed,
    /// A project's re-blur sweep (after a subject change) finished.
    #[serde(rename = "reblur.finished")]
    ReblurFinished,
}

impl NoticeType {
    /// Every type, in the order the API lists them.
    pub const ALL: [NoticeType; 7] = [
        NoticeType::JobSucceeded,
        NoticeType::JobFailed,
        NoticeType::JobCancelled,
        NoticeType::PhotoPublished,
        NoticeType::PhotoUnpublished,
        NoticeType::PhotoFailed,
        NoticeType::ReblurFinished,
    ];

    /// The wire name (`job.succeeded`).
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeType::JobSucceeded => "job.succeeded",
            NoticeType::JobFailed => "job.failed",
            NoticeType::JobCancelled => "job.cancelled",
            NoticeType::PhotoPublished => "photo.published",
            NoticeType::PhotoUnpublished => "photo.unpublished",
            NoticeType::PhotoFailed => "photo.failed",
            NoticeType::ReblurFinished => "reblur.finished",
        }
    }

    /// The type named `name`.
    pub fn parse(name: &str) -> Option<NoticeType> {
        NoticeType::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl std::fmt::Display for NoticeType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing that happened, as it is delivered (the body of a webhook request).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    /// Stable: the same for every raise of the same happening (see [`Notice::new`]).
    pub id: String,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: NoticeType,
    /// When it happened (RFC 3339 on the wire).
    #[serde(with = "rfc3339")]
    pub occurred_at: Millis,
    /// Whose it is.
    pub tenant: TenantId,
    /// The project it happened in, when there is one.
    pub project: Option<ProjectId>,
    /// What a receiver needs to act without another request (ids, status, reason).
    pub data: serde_json::Value,
}

impl Notice {
    /// A notice whose id is derived from `kind` and `about` (what makes this happening
    /// one: a job id, a photo id and the version published), so raising it again gives
    /// the same id.
    pub fn new(
        kind: NoticeType,
        about: &str,
        tenant: TenantId,
        project: Option<ProjectId>,
        occurred_at: Millis,
        data: serde_json::Value,
    ) -> Notice {
        use sha2::Digest;
        let digest = Sha256::digest(format!("{}\n{tenant}\n{about}", kind.as_str()));
        Notice {
            id: format!("ntc_{}", &hex::encode(digest)[..32]),
            kind,
            occurred_at,
            tenant,
            project,
            data,
        }
    }
}

mod rfc3339 {
    use crate::clock::Millis;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &Millis, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&m.to_rfc3339())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Millis, D::Error> {
        let text = String::deserialize(d)?;
        Millis::parse_rfc3339(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not an RFC 3339 time")))
    }
}

/// A tenant's webhook: where, which notices, and the secret deliveries are signed with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subscription {
    /// Its id.
    pub id: WebhookId,
    /// Whose notices it receives; never another tenant's.
    pub tenant: TenantId,
    /// Only this project's notices; `None`: every project of the tenant.
    pub project: Option<ProjectId>,
    /// Where deliveries are POSTed (checked by [`check_target`]).
    pub url: String,
    /// The HMAC key; shown once, when the webhook is made.
    pub secret: String,
    /// The notice types it receives; never empty.
    pub events: Vec<NoticeType>,
    /// When it was made.
    pub created_at: Millis,
}

impl Subscription {
    /// Whether `notice` is delivered to this webhook.
    pub fn wants(&self, notice: &Notice) -> bool {
        self.tenant == notice.tenant
            && self.project.is_none_or(|p| notice.project == Some(p))
            && self.events.contains(&notice.kind)
    }
}

/// The signature header's value for one delivery attempt.
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    format!(
        "v1={}",
        hex::encode(mac(secret, id, timestamp, body).finalize().into_bytes())
    )
}

/// Whether `header` (one or more `v1=<hex>`, comma separated) signs this delivery with
/// `secret`; compared in constant time.
pub fn verify(secret: &str, id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    header.split(',').map(str::trim).any(|part| {
        part.strip_prefix("v1=")
            .and_then(|h| hex::decode(h).ok())
            .is_some_and(|sig| mac(secret, id, timestamp, body).verify_slice(&sig).is_ok())
    })
}

fn mac(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    m.update(id.as_bytes());
    m.update(b".");
    m.update(timestamp.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m
}

/// Why a webhook target is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Not an absolute http(s) URL, or one with credentials in it.
    #[error("webhook url `{url}`: {why}")]
    Malformed {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// It points into the operator's own network.
    #[error(
        "webhook url `{url}` reaches {addr}, a loopback, private, link-local or otherwise \
         non-public address; webhooks go to public addresses unless the operator allows \
         private ones (TESSERA_WEBHOOKS_ALLOW_PRIVATE=1)"
    )]
    Private {
        /// The URL given.
        url: String,
        /// The address it names or resolves to.
        addr: String,
    },
}

/// The environment variable by which an operator lets webhooks reach loopback and
/// private addresses (`1`): for a receiver inside the operator's own network, and for
/// tests. Read where a webhook is made and where it is delivered.
pub const ALLOW_PRIVATE_ENV: &str = "TESSERA_WEBHOOKS_ALLOW_PRIVATE";

/// Whether the operator allows private webhook targets ([`ALLOW_PRIVATE_ENV`] is `1`).
pub fn private_targets_allowed() -> bool {
    std::env::var(ALLOW_PRIVATE_ENV).is_ok_and(|v| v == "1")
}

/// Longest webhook URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// Check a webhook URL as given: absolute `http`/`https`, a host, no user or password,
/// and, where the host is an address or `localhost`, a public one unless
/// `allow_private`. Names are resolved (and checked) again at every delivery.
pub fn check_target(url: &str, allow_private: bool) -> Result<url::Url, TargetError> {
    let malformed = |why: &str| TargetError::Malformed {
        url: url.chars().take(200).collect(),
        why: why.to_string(),
    };
    if url.len() > MAX_URL_LEN {
        return Err(malformed(&format!("longer than {MAX_URL_LEN} characters")));
    }
    let parsed = url::Url::parse(url).map_err(|e| malformed(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(malformed("use an http:// or https:// URL"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(malformed(
            "credentials in the URL are not accepted; verify the signature instead",
        ));
    }
    let private = |addr: String| TargetError::Private {
        url: url.to_string(),
        addr,
    };
    match parsed.host() {
        None => return Err(malformed("it names no host")),
        Some(url::Host::Ipv4(a)) if !allow_private && is_private(IpAddr::V4(a)) => {
            return Err(private(a.to_string()));
        }
        Some(url::Host::Ipv6(a)) if !allow_private && is_private(IpAddr::V6(a)) => {
            return Err(private(a.to_string()));
        }
        Some(url::Host::Domain(d)) if !allow_private => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            if d == "localhost" || d.ends_with(".localhost") || d.ends_with(".internal") {
                return Err(private(d));
            }
        }
        _ => {}
    }
    Ok(parsed)
}

/// Whether `ip` is not a public unicast address: loopback, unspecified, private
/// (RFC 1918, unique local), shared (100.64/10), link-local (cloud metadata lives
/// there), multicast, broadcast, documentation and benchmarking ranges, and IPv6 forms
/// that embed one of those (IPv4-mapped, NAT64).
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let [o0, o1, ..] = a.octets();
            a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || a.is_documentation()
                || o0 == 0
                || (o0 == 100 && (64..128).contains(&o1))
                || (o0 == 192 && o1 == 0 && a.octets()[2] == 0)
                || (o0 == 198 && (18..20).contains(&o1))
                || o0 >= 240
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            let o = a.octets();
            let embedded = |i: usize| {
                is_private(IpAddr::V4(std::net::Ipv4Addr::new(
                    o[i],
                    o[i + 1],
                    o[i + 2],
                    o[i + 3],
                )))
            };
            // IPv4-mapped and IPv4-compatible (`::a.b.c.d`, which `::1` is one of).
            if a.is_loopback() || a.is_unspecified() || a.to_ipv4().is_some() {
                return a.is_loopback() || a.is_unspecified() || embedded(12);
            }
            // NAT64 (64:ff9b::/96) carries an IPv4 address last; 6to4 (2002::/16) second.
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                return embedded(12);
            }
            if s[0] == 0x2002 {
                return embedded(2);
            }
            a.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x2001 && s[1] == 0) // Teredo: reaches an IPv4 peer
                || (s[0] == 0x64 && s[1] == 0xff9b) // local-use NAT64 (64:ff9b:1::/48)
                || (s[0] == 0x100 && s[1..4] == [0, 0, 0]) // discard
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_and_any_change_breaks_it() {
        let body = br#"{"id":"ntc_1"}"#;
        let sig = signature("whsec_x", "ntc_1", 1_700_000_000, body);
        assert!(verify("whsec_x", "ntc_1", 1_700_000_000, body, &sig));
        assert!(verify(
            "whsec_x",
            "ntc_1",
            1_700_000_000,
            body,
            &format!("v1=00, {sig}")
        ));
        assert!(!verify("whsec_y", "ntc_1", 1_700_000_000, body, &sig));
        assert!(!verify("whsec_x", "ntc_2", 1_700_000_000, body, &sig));
        assert!(!verify("whsec_x", "ntc_1", 1_700_000_001, body, &sig));
        assert!(!verify("whsec_x", "ntc_1", 1_700_000_000, b"{}", &sig));
        assert!(!verify("whsec_x", "ntc_1", 1_700_000_000, body, "v1=zz"));
    }

    #[test]
    fn a_notice_raised_twice_has_one_id_and_another_happening_another() {
        let t = TenantId::local();
        let a = Notice::new(
            NoticeType::JobFailed,
            "job/1",
            t.clone(),
            None,
            Millis(1),
            serde_json::Value::Null,
        );
        let b = Notice::new(
            NoticeType::JobFailed,
            "job/1",
            t.clone(),
            None,
            Millis(2),
            serde_json::Value::Null,
        );
        let c = Notice::new(
            NoticeType::JobSucceeded,
            "job/1",
            t.clone(),
            None,
            Millis(1),
            serde_json::Value::Null,
        );
        let other: TenantId = "other".parse().unwrap();
        let d = Notice::new(
            NoticeType::JobFailed,
            "job/1",
            other,
            None,
            Millis(1),
            serde_json::Value::Null,
        );
        assert_eq!(a.id, b.id);
        assert_ne!(a.id, c.id);
        assert_ne!(a.id, d.id);
        let wire = serde_json::to_value(&a).unwrap();
        assert_eq!(wire["type"], "job.failed");
        assert_eq!(wire["occurred_at"], "1970-01-01T00:00:00.001Z");
        assert_eq!(serde_json::from_value::<Notice>(wire).unwrap(), a);
    }

    #[test]
    fn a_webhook_gets_only_its_tenants_and_projects_notices_of_its_types() {
        let p = ProjectId::new();
        let sub = Subscription {
            id: WebhookId::new(),
            tenant: TenantId::local(),
            project: Some(p),
            url: "https://example.com/hook".into(),
            secret: "s".into(),
            events: vec![NoticeType::PhotoPublished],
            created_at: Millis(0),
        };
        let n = |kind, tenant: &str, project| {
            Notice::new(
                kind,
                "x",
                tenant.parse().unwrap(),
                project,
                Millis(0),
                serde_json::Value::Null,
            )
        };
        assert!(sub.wants(&n(NoticeType::PhotoPublished, "local", Some(p))));
        assert!(!sub.wants(&n(NoticeType::PhotoPublished, "other", Some(p))));
        assert!(!sub.wants(&n(
            NoticeType::PhotoPublished,
            "local",
            Some(ProjectId::new())
        )));
        assert!(!sub.wants(&n(NoticeType::PhotoPublished, "local", None)));
        assert!(!sub.wants(&n(NoticeType::PhotoFailed, "local", Some(p))));
        let every = Subscription {
            project: None,
            ..sub
        };
        assert!(every.wants(&n(
            NoticeType::PhotoPublished,
            "local",
            Some(ProjectId::new())
        )));
        assert!(!every.wants(&n(NoticeType::PhotoPublished, "other", None)));
    }

    #[test]
    fn targets_in_the_operators_network_are_refused_unless_allowed() {
        for url in [
            "http://127.0.0.1:8080/hook",
            "http://10.1.2.3/",
            "http://172.20.0.1/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://100.100.0.1/",
            "http://0.0.0.0/",
            "http://[::1]/",
            "http://[fd00:ec2::254]/",
            "http://[fe80::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[64:ff9b::a00:1]/",
            "http://[::169.254.169.254]/",
            "http://[2002:a9fe:a9fe::1]/",
            "http://[2001:0:4136:e378::1]/",
            "http://[64:ff9b:1::1]/",
            "http://[fec0::1]/",
            "http://[100::1]/",
            "http://192.0.0.8/",
            "http://localhost:9000/",
            "http://api.localhost/",
            "http://metadata.google.internal/",
            "http://2130706433/",
        ] {
            assert!(
                matches!(check_target(url, false), Err(TargetError::Private { .. })),
                "{url} was accepted"
            );
            assert!(
                check_target(url, true).is_ok(),
                "{url} refused though allowed"
            );
        }
        for url in [
            "https://example.com/hook",
            "http://93.184.216.34:8080/x",
            "https://[2606:4700::1]/",
        ] {
            assert!(check_target(url, false).is_ok(), "{url}");
        }
        for url in [
            "ftp://example.com/",
            "file:///etc/passwd",
            "https://u:p@example.com/",
            "/relative",
            "",
        ] {
            assert!(
                matches!(check_target(url, true), Err(TargetError::Malformed { .. })),
                "{url} was accepted"
            );
        }
    }
}
