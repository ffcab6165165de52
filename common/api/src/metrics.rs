//! `GET /metrics`: Prometheus text exposition of what this API process has served
//! (requests by method, route template and status; request latency sums), of the tasks
//! its workers ended (by kind and final state, `tessera_engine::outcomes`), and of the
//! queues it feeds (visible, in flight, dead), read from the queue port per scrape.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

#[derive(Default)]
struct Counters {
    /// (method, route, status) → (count, seconds).
    requests: BTreeMap<(String, String, u16), (u64, f64)>,
}

fn counters() -> &'static Mutex<Counters> {
    static C: OnceLock<Mutex<Counters>> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// Count one request. `route` is the matched route template (`/v1/jobs/{job_id}`),
/// never the raw path, so ids do not explode the label set.
pub fn record(method: &str, route: &str, status: u16, took: Duration) {
    let mut c = counters().lock().unwrap_or_else(|p| p.into_inner());
    let e = c
        .requests
        .entry((method.to_string(), route.to_string(), status))
        .or_default();
    e.0 += 1;
    e.1 += took.as_secs_f64();
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text: the request counters, `queues` as (name, visible, hidden,
/// dead), and `tasks` ended in this process as (task kind, state, count).
pub fn render(queues: &[(String, u64, u64, u64)], tasks: &[(String, String, u64)]) -> String {
    let mut out = String::new();
    out += "# HELP tessera_build_info The running server.\n# TYPE tessera_build_info gauge\n";
    let _ = writeln!(
        out,
        "tessera_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    out += "# HELP tessera_http_requests_total HTTP requests served, by route template.\n# TYPE tessera_http_requests_total counter\n";
    let c = counters().lock().unwrap_or_else(|p| p.into_inner());
    for ((m, r, s), (n, _)) in &c.requests {
        let _ = writeln!(
            out,
            "tessera_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{s}\"}} {n}",
            label(m),
            label(r)
        );
    }
    out += "# HELP tessera_http_request_seconds_sum Time spent serving them.\n# TYPE tessera_http_request_seconds_sum counter\n";
    for ((m, r, s), (_, secs)) in &c.requests {
        let _ = writeln!(
            out,
            "tessera_http_request_seconds_sum{{method=\"{}\",route=\"{}\",status=\"{s}\"}} {secs:.6}",
            label(m),
            label(r)
        );
    }
    drop(c);
    out += "# HELP tessera_tasks_ended_total Tasks this process ended, by task kind and final state (alert on failed and dead).\n# TYPE tessera_tasks_ended_total counter\n";
    for (kind, state, n) in tasks {
        let _ = writeln!(
            out,
            "tessera_tasks_ended_total{{kind=\"{}\",state=\"{}\"}} {n}",
            label(kind),
            label(state)
        );
    }
    out += "# HELP tessera_records_unreadable_total Records this process could not read and skipped (the log has their keys).\n# TYPE tessera_records_unreadable_total counter\n";
    let _ = writeln!(
        out,
        "tessera_records_unreadable_total {}",
        tessera_engine::outcomes::unreadable_total()
    );
    out += "# HELP tessera_queue_messages Messages in the task queues, by state.\n# TYPE tessera_queue_messages gauge\n";
    for (q, visible, hidden, dead) in queues {
        for (state, n) in [("visible", visible), ("in_flight", hidden), ("dead", dead)] {
            let _ = writeln!(
                out,
                "tessera_queue_messages{{queue=\"{}\",state=\"{state}\"}} {n}",
                label(q)
            );
        }
    }
    out
}
