//! `/ws/v1/jobs/{job_id}`: the WebSocket progress protocol. The server sends `hello`,
//! then every event after `?last_event_id=N` (each once, in order), `cancel_requested`
//! when a cancel is seen, and `terminal` with the job's status before closing with 1000.
//! The client may send `{"op": "ping"}` (answered `pong`) and `{"op": "cancel",
//! "force": bool}`; anything else is answered with `error` and a 1008 close. A revoked
//! key ends the session (1008), and so do 30 minutes (1001: reconnect with the last id).

use crate::ApiState;
use crate::auth::Caller;
use crate::problem::Problem;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_core::JobId;
use tessera_core::job::CancelMode;
use tessera_engine::Engine;

/// `?last_event_id=N`.
#[derive(Debug, Deserialize, Default)]
pub struct Resume {
    /// Send events after this one.
    pub last_event_id: Option<u64>,
}

/// Upgrade, after checking the job belongs to the caller.
pub async fn upgrade(
    State(s): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<Resume>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, Problem> {
    let job = super::jobs::owned(&s, &caller, &id).await?;
    let ws =
        ws.map_err(|e| Problem::bad_request(format!("this path needs a WebSocket upgrade: {e}")))?;
    let engine = s.engine.clone();
    let start = q.last_event_id.unwrap_or(0);
    let guard = super::stream_guard::StreamGuard::new(caller, s.engine.ports().store.clone());
    Ok(ws.on_upgrade(move |socket| session(socket, engine, job.id, start, guard)))
}

async fn send(socket: &mut WebSocket, v: Value) -> bool {
    socket
        .send(Message::Text(v.to_string().into()))
        .await
        .is_ok()
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.to_string().into(),
        })))
        .await;
}

async fn session(
    mut socket: WebSocket,
    engine: Engine,
    job: JobId,
    mut seen: u64,
    mut guard: super::stream_guard::StreamGuard,
) {
    if !send(
        &mut socket,
        json!({ "kind": "hello", "job_id": job, "last_event_id": seen }),
    )
    .await
    {
        return;
    }
    let mut told_cancel = false;
    // Reads in a row that found no new event: an idle session reads less often.
    let mut idle = 0u32;
    loop {
        if let Some(why) = guard.check().await {
            send(
                &mut socket,
                json!({ "kind": "error", "message": why.reason() }),
            )
            .await;
            // 1008 (policy) for a revoked key, 1001 (going away: reconnect) for the limit.
            let code = match why {
                super::stream_guard::Ended::Revoked => 1008,
                super::stream_guard::Ended::TooLong => 1001,
            };
            return close(&mut socket, code, why.reason()).await;
        }
        // Events first, then the job's state: when it is terminal, every event is stored.
        let Ok(j) = engine.job(job).await else {
            send(
                &mut socket,
                json!({ "kind": "error", "message": "the job could not be read" }),
            )
            .await;
            return close(&mut socket, 1011, "internal error").await;
        };
        let finished = j.is_over();
        let Ok(events) = engine.ports().events.read_after(job, seen, 500).await else {
            send(
                &mut socket,
                json!({ "kind": "error", "message": "events could not be read" }),
            )
            .await;
            return close(&mut socket, 1011, "internal error").await;
        };
        let drained = events.is_empty();
        idle = if drained { idle.saturating_add(1) } else { 0 };
        for e in events {
            seen = e.seq;
            if !send(&mut socket, tessera_core::event::sfmapi::event(&e)).await {
                return;
            }
        }
        if let Some(c) = &j.cancel
            && !told_cancel
        {
            told_cancel = true;
            if !send(
                &mut socket,
                json!({ "kind": "cancel_requested", "force": c.mode == CancelMode::Force }),
            )
            .await
            {
                return;
            }
        }
        if finished && drained {
            send(
                &mut socket,
                json!({ "kind": "terminal", "status": super::jobs::status(&j) }),
            )
            .await;
            return close(&mut socket, 1000, "job finished").await;
        }
        let wait = tokio::time::sleep(super::stream_guard::idle_delay(idle.saturating_sub(1)));
        tokio::pin!(wait);
        loop {
            tokio::select! {
                _ = &mut wait => break,
                msg = socket.recv() => match msg {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                    Some(Ok(Message::Text(t))) => {
                        let op: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
                        match op["op"].as_str() {
                            Some("ping") => {
                                if !send(&mut socket, json!({ "kind": "pong" })).await {
                                    return;
                                }
                            }
                            Some("cancel") => {
                                let mode = if op["force"].as_bool().unwrap_or(false) { CancelMode::Force } else { CancelMode::Cooperative };
                                if let Err(e) = engine.cancel(job, mode).await {
                                    send(&mut socket, json!({ "kind": "error", "message": e.to_string() })).await;
                                }
                            }
                            _ => {
                                send(&mut socket, json!({ "kind": "error", "message": "unknown frame; send {\"op\": \"ping\"} or {\"op\": \"cancel\", \"force\": false}" })).await;
                                return close(&mut socket, 1008, "unknown op").await;
                            }
                        }
                    }
                    Some(Ok(_)) => {}
                },
            }
        }
    }
}
