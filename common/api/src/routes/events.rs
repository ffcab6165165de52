//! `GET /v1/jobs/{id}/events`: Server-Sent Events, each with `id: <seq>`, resumable with
//! `Last-Event-ID` (or `?after=`) so a client that reconnects gets every event exactly
//! once. The stream ends after the job has ended and every event was sent, when its key
//! is revoked, or at its time limit (`stream_guard`: 30 minutes, or less where the
//! server runs in a function with a shorter timeout), with a last `x-tessera.stream_end` event
//! saying why and where to resume. An idle stream reads less often, down to every 2 s.
//!
//! Each event's data is sfmapi's `ProgressEvent` v1 (`tessera_core::event::sfmapi`), and
//! its SSE event name is its `kind`. The closing notice is the extension kind
//! `x-tessera.stream_end`, with the same envelope and no id, so that a client's
//! Last-Event-ID stays the last event's.

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::extract::{Path, Query as QueryParams, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use std::convert::Infallible;
use std::time::Duration;

/// `?after=N`.
#[derive(Debug, Deserialize, Default)]
pub struct After {
    /// Send events after this sequence number.
    pub after: Option<u64>,
}

/// Events read per poll.
const BATCH: usize = 500;

/// The SSE stream.
pub async fn sse(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    QueryParams(q): QueryParams<After>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    let job = super::jobs::owned(&s, &caller, &id).await?;
    let from_header = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.trim().parse::<u64>().map_err(|_| {
                Problem::bad_request(format!(
                    "Last-Event-ID `{v}` is not an event sequence number"
                ))
            })
        })
        .transpose()?;
    let start = from_header.or(q.after).unwrap_or(0);
    let engine = s.engine.clone();
    let job_id = job.id;
    let guard = super::stream_guard::StreamGuard::new(caller, s.engine.ports().store.clone());
    // (last sequence sent, events read and not yet sent, whether every event is sent,
    // the stream's limits, empty reads in a row, whether the stream is closing)
    let stream = futures_util::stream::unfold(
        (start, Vec::new().into_iter(), false, guard, 0u32, false),
        move |(mut seen, mut pending, mut ended, mut guard, mut idle, closing)| {
            let engine = engine.clone();
            async move {
                if closing {
                    return None;
                }
                loop {
                    if let Some(e) = pending.next() {
                        let e: tessera_core::event::ProgressEvent = e;
                        seen = e.seq;
                        let v = tessera_core::event::sfmapi::event(&e);
                        let kind = v["kind"].as_str().unwrap_or("event").to_string();
                        let ev = Event::default()
                            .id(e.seq.to_string())
                            .event(kind)
                            .data(v.to_string());
                        return Some((Ok(ev), (seen, pending, ended, guard, 0, false)));
                    }
                    if ended {
                        return None;
                    }
                    if let Some(why) = guard.check().await {
                        tracing::info!(job_id = %job_id, reason = why.reason(), "event stream ended");
                        // Said before closing, without an id (the client's Last-Event-ID
                        // stays the last event's): why, and where to resume.
                        let end = stream_end(job_id, seen, why.reason());
                        let ev = Event::default()
                            .event(end["kind"].as_str().unwrap_or_default())
                            .retry(Duration::from_secs(1))
                            .data(end.to_string());
                        return Some((Ok(ev), (seen, pending, ended, guard, idle, true)));
                    }
                    // Read the job's state before the events: if it had ended, every event it
                    // will ever have is stored, and one more read drains them.
                    let finished = match engine.job(job_id).await {
                        Ok(j) => j.is_over(),
                        Err(_) => true,
                    };
                    match engine.ports().events.read_after(job_id, seen, BATCH).await {
                        Ok(batch) if !batch.is_empty() => pending = batch.into_iter(),
                        Ok(_) if finished => ended = true,
                        Ok(_) => {
                            tokio::time::sleep(super::stream_guard::idle_delay(idle)).await;
                            idle = idle.saturating_add(1);
                        }
                        Err(e) => {
                            tracing::warn!(job_id = %job_id, error = %e, "event stream read failed; ending the stream (the client resumes with Last-Event-ID)");
                            return None;
                        }
                    }
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The notice a stream ends with before the job has: why, and the event to resume after.
/// The envelope of every event (its `seq` is the last event's: nothing new happened), under
/// an extension kind, which sfmapi's SDKs pass to a catch-all.
fn stream_end(job: tessera_core::JobId, seen: u64, reason: &str) -> serde_json::Value {
    use tessera_core::event::sfmapi::{EXTENSION_PREFIX, SCHEMA_VERSION};
    serde_json::json!({
        "schema_version": SCHEMA_VERSION,
        "kind": format!("{EXTENSION_PREFIX}stream_end"),
        "ts": tessera_core::Millis::now().to_rfc3339(),
        "job_id": job,
        "task_id": null,
        "seq": seen,
        "reason": reason,
        "resume_after": seen,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_conformance::sfmapi_event::{EXTENSION_PREFIX, violations};

    #[test]
    fn the_closing_notice_is_an_extension_kind_with_the_envelope() {
        let end = stream_end(tessera_core::JobId::new(), 41, "revoked");
        assert!(violations(&end).is_empty(), "{end}: {:?}", violations(&end));
        assert_eq!(end["kind"], format!("{EXTENSION_PREFIX}stream_end"));
        assert_eq!(
            (end["seq"].as_u64(), end["resume_after"].as_u64()),
            (Some(41), Some(41))
        );
        assert_eq!(end["reason"], "revoked");
    }
}
