//! JSON logs for CloudWatch: one object per line, with the span fields (task_id,
//! job_id, photo, epoch, message_id) on every line so that one task can be followed
//! with a single filter.

/// Install the JSON subscriber (level from `RUST_LOG`, default `info`). Safe to call twice.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(true)
        .with_target(false)
        .without_time()
        .try_init();
}
