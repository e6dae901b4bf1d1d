//! Prometheus metrics (text exposition format at `/metrics`): per-route request duration, response size
//! and in-flight requests, shaped like assisted-image-service's, plus the state of the OS image catalog,
//! the number of hosts in each state, and the work of the store's writer and of the controllers (what a
//! latency spike is queued behind).
//!
//! Every label value is a `&'static str` chosen by the server or a number it computed (an HTTP
//! status code), never text from a request: a client that sends ten thousand distinct methods or
//! paths must not make ten thousand series. Methods outside [`method_label`]'s list count as
//! `other`, paths as the route template that answered them. The one exception is the catalog's
//! `version`/`arch`, which come from the operator's `--os-image` options.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::controllers::runtime::ControllerMetrics;
use crate::http::Completion;
use crate::image::catalog::{Catalog, EntryState};
use crate::store::kube::ClusterUsage;
use crate::store::sqlite::WriterStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub handler: &'static str,
    pub method: &'static str,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandlerLabels {
    pub handler: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ImageLabels {
    pub version: String,
    pub arch: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    pub status: &'static str,
}

/// The `method` label of a request: one of the methods this server answers, else `other` (a
/// method is any token up to the head's size limit, and must not become a series of its own).
pub fn method_label(method: &http::Method) -> &'static str {
    use http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

pub struct Metrics {
    registry: Registry,
    hosts: Family<HostLabels, Gauge>,
    duration: Family<RequestLabels, Histogram>,
    size: Family<RequestLabels, Histogram>,
    inflight: Family<HandlerLabels, Gauge>,
    aborted: Family<HandlerLabels, Counter>,
    os_images: Family<ImageLabels, Gauge>,
}

impl Metrics {
    /// Metrics of a server whose store's writer thread counts into `writer`, and whose controllers
    /// into `controllers`.
    pub fn new(writer: Arc<WriterStats>, controllers: Arc<ControllerMetrics>) -> Arc<Metrics> {
        Metrics::with_cluster(writer, controllers, None)
    }

    /// [`Metrics::new`], plus what a Kubernetes store's requests, watches and cache amount to.
    pub fn with_cluster(
        writer: Arc<WriterStats>,
        controllers: Arc<ControllerMetrics>,
        cluster: Option<Arc<ClusterUsage>>,
    ) -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("bootstream");
        // Fine below a second for the API (its calls take milliseconds), coarse above for downloads.
        let duration = Family::<RequestLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 50.0, 100.0, 300.0,
                600.0,
            ])
        });
        let size =
            Family::<RequestLabels, Histogram>::new_with_constructor(|| Histogram::new([100.0, 1e6, 5e8, 1e9, 1e10]));
        let inflight = Family::<HandlerLabels, Gauge>::default();
        let aborted = Family::<HandlerLabels, Counter>::default();
        let os_images = Family::<ImageLabels, Gauge>::default();
        registry.register(
            "http_request_duration_seconds",
            "Time from request to the last byte of the response",
            duration.clone(),
        );
        registry.register("http_response_size_bytes", "Response body bytes written", size.clone());
        registry.register("http_requests_inflight", "Requests being answered", inflight.clone());
        registry.register(
            "http_responses_aborted",
            "Responses not written completely (client gone, timeout, base image changed)",
            aborted.clone(),
        );
        registry.register("os_images", "OS images of the catalog by state (1 = in that state)", os_images.clone());
        let hosts = Family::<HostLabels, Gauge>::default();
        registry.register("hosts", "Hosts by state of the host state machine", hosts.clone());
        registry.register_collector(Box::new(WorkCollector { writer, controllers }));
        if let Some(usage) = cluster {
            registry.register_collector(Box::new(ClusterCollector(usage)));
        }
        Arc::new(Metrics { registry, hosts, duration, size, inflight, aborted, os_images })
    }

    pub fn started(&self, handler: &'static str) {
        self.inflight.get_or_create(&HandlerLabels { handler }).inc();
    }

    pub fn completed(&self, c: &Completion) {
        let labels = RequestLabels { handler: c.route, method: method_label(&c.method), code: c.status.as_u16() };
        self.duration.get_or_create(&labels).observe(c.elapsed.as_secs_f64());
        self.size.get_or_create(&labels).observe(c.body_bytes as f64);
        self.inflight.get_or_create(&HandlerLabels { handler: c.route }).dec();
        if !c.complete {
            self.aborted.get_or_create(&HandlerLabels { handler: c.route }).inc();
        }
    }

    /// The exposition text, with the catalog's state and the host counts (`(state, count)`) of now.
    pub fn render(&self, catalog: &Catalog, hosts: &[(crate::hosts::HostStatus, usize)]) -> String {
        for (status, n) in hosts {
            self.hosts.get_or_create(&HostLabels { status: status.as_str() }).set(*n as i64);
        }
        self.os_images.clear();
        for e in catalog.entries() {
            let state = match e.state {
                EntryState::Loading => "loading",
                EntryState::Ready(_) => "ready",
                EntryState::Failed(_) => "failed",
            };
            self.os_images
                .get_or_create(&ImageLabels { version: e.spec.version, arch: e.spec.arch, state: state.into() })
                .set(1);
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterRequestLabels {
    verb: &'static str,
    resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: &'static str,
}

/// The Kubernetes store's load on the API server and its cache (every label a fixed name).
struct ClusterCollector(Arc<ClusterUsage>);

impl std::fmt::Debug for ClusterCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterCollector")
    }
}

impl Collector for ClusterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType;
        let mut family = encoder.encode_descriptor(
            "kube_requests",
            "Requests sent to the Kubernetes API server, by verb and resource",
            None,
            MetricType::Counter,
        )?;
        for ((verb, resource), n) in self.0.requests() {
            ConstCounter::new(n).encode(family.encode_family(&ClusterRequestLabels { verb, resource })?)?;
        }
        let mut family = encoder.encode_descriptor(
            "kube_watch_restarts",
            "Times a watch listed everything again after its first list (410 Gone, a dropped connection)",
            None,
            MetricType::Counter,
        )?;
        for (resource, n) in self.0.watch_restarts() {
            ConstCounter::new(n).encode(family.encode_family(&ResourceLabels { resource })?)?;
        }
        let mut family = encoder.encode_descriptor(
            "kube_cache_objects",
            "Objects of each watched kind held in the controller's cache",
            None,
            MetricType::Gauge,
        )?;
        for (resource, n) in self.0.cached_objects() {
            ConstGauge::new(n as i64).encode(family.encode_family(&ResourceLabels { resource })?)?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

/// A per-controller counter: its name, help, and how to read it from the totals.
type ControllerCounter = (&'static str, &'static str, fn(&ControllerTotals) -> f64);

#[derive(Default)]
struct ControllerTotals {
    depth: i64,
    reconciles: u64,
    errors: u64,
    seconds: f64,
}

/// Counters that other parts own (the store's writer thread, the controllers), read at each scrape.
#[derive(Debug)]
struct WorkCollector {
    writer: Arc<WriterStats>,
    controllers: Arc<ControllerMetrics>,
}

fn counter<N: prometheus_client::encoding::EncodeCounterValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)
}

impl Collector for WorkCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let w = &self.writer;
        let (queued, written) = (w.queued.load(Relaxed), w.written.load(Relaxed));
        let waiting = ConstGauge::new(queued.saturating_sub(written) as i64);
        waiting.encode(encoder.encode_descriptor(
            "store_writes_waiting",
            "Writes handed to the store's writer thread and not yet run",
            None,
            waiting.metric_type(),
        )?)?;
        counter(&mut encoder, "store_writes", "Writes the store's writer thread ran", written)?;
        counter(
            &mut encoder,
            "store_transactions",
            "SQLite transactions the writer ran (writes waiting together share one)",
            w.transactions.load(Relaxed),
        )?;
        counter(
            &mut encoder,
            "store_writer_busy_seconds",
            "Time the writer thread spent running transactions, commit included",
            w.busy_micros.load(Relaxed) as f64 / 1e6,
        )?;
        let buckets: Vec<(f64, u64)> = crate::store::sqlite::TRANSACTION_BUCKET_MICROS
            .iter()
            .map(|&micros| micros as f64 / 1e6)
            .chain([f64::INFINITY])
            .zip(w.transaction_buckets.iter().map(|c| c.load(Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        encoder
            .encode_descriptor(
                "store_transaction_seconds",
                "Time each transaction of the store's writer thread took, commit included (a write also waits for those queued ahead of it)",
                None,
                prometheus_client::metrics::MetricType::Histogram,
            )?
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                w.busy_micros.load(Relaxed) as f64 / 1e6,
                count,
                &buckets,
                None,
            )?;
        counter(
            &mut encoder,
            "store_commit_seconds",
            "Time the writer thread spent in COMMIT (WAL append, and checkpoints when the checkpointer falls behind)",
            w.commit_micros.load(Relaxed) as f64 / 1e6,
        )?;
        counter(
            &mut encoder,
            "store_checkpoints",
            "WAL checkpoints the store's checkpointer thread ran",
            w.checkpoints.load(Relaxed),
        )?;
        counter(
            &mut encoder,
            "store_checkpoint_seconds",
            "Time the checkpointer thread spent copying the WAL into the database file",
            w.checkpoint_micros.load(Relaxed) as f64 / 1e6,
        )?;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let depth = ConstGauge::new(rt.metrics().global_queue_depth() as i64);
            depth.encode(encoder.encode_descriptor(
                "runtime_global_queue_depth",
                "Tasks ready to run and waiting in the async runtime's shared queue",
                None,
                depth.metric_type(),
            )?)?;
        }
        counter(
            &mut encoder,
            "discovery_content_builds",
            "InfraEnv discovery contents (Ignition, archive, static-network ramdisk) built because none was cached for the InfraEnv's current spec and references",
            crate::image::CONTENT_BUILDS.load(Relaxed),
        )?;
        counter(
            &mut encoder,
            "http_idle_connections_reclaimed",
            "Idle keep-alive connections closed to make room for new connections, the server being at its connection limit",
            crate::http::idle::reclaimed_total(),
        )?;
        counter(
            &mut encoder,
            "store_objects_read",
            "Objects the store handed to its callers (decoded, or visited by a list), the controllers' reads included",
            crate::store::OBJECTS_READ.load(Relaxed),
        )?;
        counter(
            &mut encoder,
            "store_changes_fed",
            "Changes the store fed to its subscribers (the controllers' triggers)",
            crate::store::CHANGES_FED.load(Relaxed),
        )?;
        counter(
            &mut encoder,
            "pool_records_visited",
            "Host records the pool's lookups visited (its periodic monitor and these metrics' counts not included)",
            crate::pool::RECORDS_VISITED.load(Relaxed),
        )?;
        counter(
            &mut encoder,
            "controller_feed_resyncs",
            "Times a controller's change feed fell behind and it re-listed every object",
            self.controllers.feed_resyncs(),
        )?;

        // Per controller name (a controller with several workers is one entry; tests may run several).
        let mut by_name: std::collections::BTreeMap<&str, ControllerTotals> = Default::default();
        let controllers = self.controllers.controllers();
        for c in &controllers {
            let e = by_name.entry(c.name).or_default();
            e.depth += c.depth() as i64;
            e.reconciles += c.reconciles.load(Relaxed);
            e.errors += c.errors.load(Relaxed);
            e.seconds += c.reconcile_micros.load(Relaxed) as f64 / 1e6;
        }
        let labels = |name: &'static str| ControllerLabels { controller: name };
        let mut family = encoder.encode_descriptor(
            "controller_queue_depth",
            "Keys queued or being reconciled",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (name, e) in &by_name {
            ConstGauge::new(e.depth).encode(family.encode_family(&labels(name))?)?;
        }
        let counters: [ControllerCounter; 3] = [
            ("controller_reconciles", "Reconciles run", |e| e.reconciles as f64),
            ("controller_reconcile_errors", "Reconciles that failed (and were requeued)", |e| e.errors as f64),
            ("controller_reconcile_seconds", "Time spent in reconciles", |e| e.seconds),
        ];
        for (metric, help, value) in counters {
            let mut family =
                encoder.encode_descriptor(metric, help, None, prometheus_client::metrics::MetricType::Counter)?;
            for (name, e) in &by_name {
                ConstCounter::new(value(e)).encode(family.encode_family(&labels(name))?)?;
            }
        }
        Ok(())
    }
}
