//! The per-second timeline: the agents' calls beside what the server's `/metrics` and `/proc` say it
//! was doing.

use std::time::{Duration, Instant};

use crate::procs::{cpu_seconds, thread_cpu};

/// What the server's `/metrics` says at one instant (counters are totals since it started).
#[derive(Clone, Copy, Default)]
pub struct ServerSample {
    /// Agent API calls answered, and those answered within 50 ms (server side: from the request's
    /// last byte to the response's).
    agent_calls: f64,
    agent_calls_fast: f64,
    writer_busy: f64,
    commit: f64,
    writes_waiting: f64,
    agent_queue: f64,
    runtime_queue: f64,
    resyncs: f64,
    transactions: f64,
    writes: f64,
    agent_reconciles: f64,
    /// Objects the store handed out, changes it fed to the controllers, host records the pool
    /// visited (totals).
    pub objects_read: f64,
    pub changes_fed: f64,
    pub records_visited: f64,
    /// Hosts binding (bound, not yet registered again) and installed.
    binding: f64,
    installed: f64,
    /// Seconds since the run began.
    at: f64,
    cpu: f64,
    bench_cpu: f64,
    /// CPU seconds of the server's async runtime threads (workers and blocking pool) and of its store writer.
    runtime_cpu: f64,
    writer_cpu: f64,
}

fn metric(line: &str) -> Option<(&str, f64)> {
    let (name, value) = line.rsplit_once(' ')?;
    Some((name, value.parse().ok()?))
}

pub async fn server_sample(
    client: &reqwest::Client,
    server: &str,
    pid: &str,
    start: Instant,
) -> anyhow::Result<ServerSample> {
    let text = client.get(format!("{server}/metrics")).send().await?.text().await?;
    let (runtime_cpu, writer_cpu) = thread_cpu(pid);
    let mut s = ServerSample {
        at: start.elapsed().as_secs_f64(),
        cpu: cpu_seconds(pid),
        bench_cpu: cpu_seconds("self"),
        runtime_cpu,
        writer_cpu,
        ..Default::default()
    };
    for (name, v) in text.lines().filter_map(metric) {
        let agent_api = name.contains("handler=\"/v2/");
        match name {
            n if agent_api && n.starts_with("bootstream_http_request_duration_seconds_count") => s.agent_calls += v,
            n if agent_api
                && n.starts_with("bootstream_http_request_duration_seconds_bucket")
                && n.contains("le=\"0.05\"") =>
            {
                s.agent_calls_fast += v
            }
            "bootstream_store_writer_busy_seconds_total" => s.writer_busy = v,
            "bootstream_store_commit_seconds_total" => s.commit = v,
            "bootstream_store_writes_waiting" => s.writes_waiting = v,
            "bootstream_controller_queue_depth{controller=\"agent\"}" => s.agent_queue = v,
            "bootstream_runtime_global_queue_depth" => s.runtime_queue = v,
            "bootstream_controller_feed_resyncs_total" => s.resyncs = v,
            "bootstream_store_transactions_total" => s.transactions = v,
            "bootstream_controller_reconciles_total{controller=\"agent\"}" => s.agent_reconciles = v,
            "bootstream_hosts{status=\"binding\"}" => s.binding = v,
            "bootstream_hosts{status=\"installed\"}" => s.installed = v,
            "bootstream_store_writes_total" => s.writes = v,
            "bootstream_store_objects_read_total" => s.objects_read = v,
            "bootstream_store_changes_fed_total" => s.changes_fed = v,
            "bootstream_pool_records_visited_total" => s.records_visited = v,
            _ => {}
        }
    }
    Ok(s)
}

/// Per second: the agents' calls (all, over 50 ms, slowest) and, from the server (rates over the
/// actual time between two samples, as a slow `/metrics` answer stretches it): agent API calls over
/// 50 ms by the server's own clock; CPU as % of one core (server; its async runtime threads and store
/// writer; the benchmark); the store's transactions and writes per second, the writer's
/// busy and commit time (% of the time), writes waiting for it; the agent controller's queue; the
/// async runtime's shared queue; change-feed resyncs.
pub fn print_timeline(agents: &[(u32, u32, f64)], server: &[ServerSample], marks: [Duration; 3]) {
    println!(
        "{:>4} {:>6} {:>5} {:>7} {:>6} {:>5} {:>5} {:>5} {:>5} {:>5} {:>6} {:>5} {:>5} {:>6} {:>6} {:>5} {:>5} {:>5} {:>4} {:>4}",
        "SEC",
        "CALLS",
        "SLOW",
        "MAX MS",
        "S.SLOW",
        "CPU%",
        "RT%",
        "WRT%",
        "BNCH%",
        "TX/S",
        "WRIT/S",
        "BUSY%",
        "COMT%",
        "W.WAIT",
        "QUEUE",
        "REC/S",
        "BIND",
        "INST",
        "RTQ",
        "RSYN"
    );
    let phase_mark = |sec: usize| marks.iter().position(|m| m.as_secs() as usize == sec);
    for sec in 1..server.len().max(agents.len()) {
        let (calls, slow, max) = agents.get(sec).copied().unwrap_or_default();
        let at = |i: usize| server.get(i).copied().unwrap_or_default();
        let (now, before) = (at(sec), at(sec - 1));
        let span = (now.at - before.at).max(0.001);
        let d = |f: fn(&ServerSample) -> f64| f(&now) - f(&before);
        let pct = |f: fn(&ServerSample) -> f64| d(f) / span * 100.0;
        let server_slow = d(|s| s.agent_calls) - d(|s| s.agent_calls_fast);
        let mark = match phase_mark(sec) {
            Some(0) => "  <- pool complete",
            Some(1) => "  <- binding starts",
            Some(2) => "  <- all installed",
            _ => "",
        };
        println!(
            "{sec:>4} {calls:>6} {slow:>5} {max:>7.1} {server_slow:>6.0} {:>5.0} {:>5.0} {:>5.0} {:>5.0} {:>5.0} {:>6.0} {:>5.0} {:>5.0} {:>6.0} {:>6.0} {:>5.0} {:>5.0} {:>5.0} {:>4.0} {:>4.0}{mark}",
            pct(|s| s.cpu),
            pct(|s| s.runtime_cpu),
            pct(|s| s.writer_cpu),
            pct(|s| s.bench_cpu),
            d(|s| s.transactions) / span,
            d(|s| s.writes) / span,
            pct(|s| s.writer_busy),
            pct(|s| s.commit),
            now.writes_waiting,
            now.agent_queue,
            d(|s| s.agent_reconciles) / span,
            now.binding,
            now.installed,
            now.runtime_queue,
            d(|s| s.resyncs),
        );
    }
}
