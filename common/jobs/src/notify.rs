//! `notify.deliver`: POST one notice to one webhook, signed; a try that does not get a
//! 2xx answer fails transiently and the attempt policy retries it for about a day.
//!
//! Every try carries the notice's id (`Tessera-Webhook-Id`, the same on every retry),
//! its own timestamp and the signature of both with the body
//! (`tessera_core::notify::signature`). Redirects are not followed. The target's name is
//! resolved here and every address checked ([`is_private`]); the request goes to those
//! addresses only, so a name that resolves to a public address when the webhook is made
//! and to the operator's network later reaches nothing.

use async_trait::async_trait;
use std::net::SocketAddr;
use std::time::Duration;
use tessera_core::catalog::{CatalogError, webhooks};
use tessera_core::notify::{self, Notice, check_target, is_private, signature};
use tessera_core::{Millis, WebhookId};
use tessera_engine::{Registry, TaskContext, TaskError, TaskHandler, TaskOutput};

/// How long one try waits for the receiver's answer.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The request headers a receiver reads.
pub mod headers {
    /// The notice's id: the same on every retry of one delivery.
    pub const ID: &str = "tessera-webhook-id";
    /// Seconds since the epoch when this try was made (signed).
    pub const TIMESTAMP: &str = "tessera-webhook-timestamp";
    /// `v1=<hex HMAC-SHA256 of "<id>.<timestamp>.<body>">`.
    pub const SIGNATURE: &str = "tessera-webhook-signature";
    /// Which try this is, from 1.
    pub const ATTEMPT: &str = "tessera-webhook-attempt";
}

/// Register the delivery task kinds.
pub fn register(r: &mut Registry) {
    r.register(notify::DELIVERY_TASK, Deliver)
        .register(notify::PUBLISH_TASK, Publish);
}

/// Publishes one notice to the notice bus, after publishing it inline failed.
pub struct Publish;

#[async_trait]
impl TaskHandler for Publish {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let task = ctx.task();
        let notice: Notice = serde_json::from_value(task.payload["notice"].clone())
            .map_err(|e| TaskError::poison(format!("task {} carries no notice: {e}", task.id)))?;
        ctx.publish(std::slice::from_ref(&notice)).await?;
        tracing::info!(task_id = %task.id, notice = %notice.id, kind = %notice.kind, attempt = task.attempts, "notice published to the bus");
        Ok(TaskOutput::result(
            serde_json::json!({ "published": true, "attempt": task.attempts }),
        ))
    }
}

/// Delivers one notice to one webhook.
pub struct Deliver;

#[async_trait]
impl TaskHandler for Deliver {
    async fn run(&self, ctx: &TaskContext) -> Result<TaskOutput, TaskError> {
        let task = ctx.task();
        let webhook: WebhookId = task
            .payload
            .get("webhook")
            .and_then(|w| w.as_str())
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| TaskError::poison(format!("task {} names no webhook", task.id)))?;
        let notice: Notice = serde_json::from_value(task.payload["notice"].clone())
            .map_err(|e| TaskError::poison(format!("task {} carries no notice: {e}", task.id)))?;
        let store = ctx.ports().store.as_ref();
        let sub = match webhooks::get(store, &notice.tenant, webhook).await {
            Ok(s) => s,
            Err(CatalogError::NotFound(_)) => {
                tracing::info!(task_id = %task.id, webhook = %webhook, notice = %notice.id, "webhook deleted; not delivered");
                return Ok(TaskOutput::result(serde_json::json!({
                    "delivered": false, "reason": "the webhook was deleted",
                })));
            }
            Err(CatalogError::Store(e)) => return Err(e.into()),
            Err(e) => return Err(TaskError::permanent(e.to_string())),
        };
        if sub.tenant != notice.tenant || task.tenant.as_ref() != Some(&sub.tenant) {
            return Err(TaskError::poison(format!(
                "task {} would deliver a notice of tenant `{}` to a webhook of `{}`",
                task.id, notice.tenant, sub.tenant
            )));
        }
        let allow_private = notify::private_targets_allowed();
        let url = check_target(&sub.url, allow_private)
            .map_err(|e| TaskError::permanent(e.to_string()))?;
        let addrs = resolve(&url, allow_private).await?;
        let body = serde_json::to_vec(&notice).expect("a notice serializes");
        let timestamp = Millis::now().0 / 1000;
        let client = client_for(&url, &addrs)?;
        let sent = client
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::USER_AGENT,
                concat!("Tessera-Webhooks/", env!("CARGO_PKG_VERSION")),
            )
            .header(headers::ID, &notice.id)
            .header(headers::TIMESTAMP, timestamp.to_string())
            .header(
                headers::SIGNATURE,
                signature(&sub.secret, &notice.id, timestamp, &body),
            )
            .header(headers::ATTEMPT, task.attempts.to_string())
            .body(body);
        let answer = tokio::select! {
            a = sent.send() => a,
            () = ctx.cancel_token().cancelled() => {
                return Err(TaskError::cancelled("delivery cancelled"));
            }
        };
        let host = url.host_str().unwrap_or_default().to_string();
        match answer {
            Ok(r) if r.status().is_success() => {
                tracing::info!(task_id = %task.id, webhook = %webhook, notice = %notice.id, kind = %notice.kind, status = r.status().as_u16(), attempt = task.attempts, "notice delivered");
                Ok(TaskOutput::result(serde_json::json!({
                    "delivered": true, "status": r.status().as_u16(), "attempt": task.attempts,
                })))
            }
            Ok(r) if r.status().is_redirection() => Err(TaskError::transient(format!(
                "{host} answered {} (redirects are not followed; give the webhook its final URL)",
                r.status()
            ))),
            Ok(r) => Err(TaskError::transient(format!(
                "{host} answered {}",
                r.status()
            ))),
            Err(e) => Err(TaskError::transient(format!(
                "{host} could not be reached: {}",
                error_chain(&e)
            ))),
        }
    }
}

/// The addresses `url`'s host resolves to, each checked unless private ones are allowed.
async fn resolve(url: &url::Url, allow_private: bool) -> Result<Vec<SocketAddr>, TaskError> {
    let host = url
        .host_str()
        .ok_or_else(|| TaskError::permanent(format!("webhook url `{url}` names no host")))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| TaskError::transient(format!("resolving {host}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(TaskError::transient(format!(
            "{host} resolves to no address"
        )));
    }
    if !allow_private && let Some(a) = addrs.iter().find(|a| is_private(a.ip())) {
        // The address goes to the operator's log only: the tenant reads this error, and
        // the answers of the operator's resolver are no business of theirs.
        tracing::warn!(url = %url, addr = %a.ip(), "webhook target resolves to a non-public address; refused");
        return Err(TaskError::permanent(
            notify::TargetError::Private {
                url: url.to_string(),
                addr: "a non-public address".into(),
            }
            .to_string(),
        ));
    }
    Ok(addrs)
}

/// A client that connects to `addrs` only (for `url`'s host) and follows no redirect.
fn client_for(url: &url::Url, addrs: &[SocketAddr]) -> Result<reqwest::Client, TaskError> {
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(DELIVERY_TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .no_proxy();
    if let Some(url::Host::Domain(d)) = url.host() {
        b = b.resolve_to_addrs(d, addrs);
    }
    b.build()
        .map_err(|e| TaskError::transient(format!("building the HTTP client: {e}")))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
