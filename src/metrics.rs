//! Prometheus metrics (text exposition format at `/metrics`): per-route request duration, response size
//! and in-flight requests, shaped like assisted-image-service's, plus the state of the OS image catalog
//! and the number of hosts in each state.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::catalog::{Catalog, EntryState};
use crate::http::Completion;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub handler: String,
    pub method: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandlerLabels {
    pub handler: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ImageLabels {
    pub version: String,
    pub arch: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    pub status: String,
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
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("bootstream");
        let duration = Family::<RequestLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.001, 0.01, 0.1, 1.0, 10.0, 50.0, 100.0, 300.0, 600.0])
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
        Arc::new(Metrics { registry, hosts, duration, size, inflight, aborted, os_images })
    }

    pub fn started(&self, handler: &'static str) {
        self.inflight.get_or_create(&HandlerLabels { handler: handler.to_string() }).inc();
    }

    pub fn completed(&self, c: &Completion) {
        let labels = RequestLabels {
            handler: c.route.to_string(),
            method: c.method.to_string(),
            code: c.status.as_u16().to_string(),
        };
        self.duration.get_or_create(&labels).observe(c.elapsed.as_secs_f64());
        self.size.get_or_create(&labels).observe(c.body_bytes as f64);
        self.inflight.get_or_create(&HandlerLabels { handler: c.route.to_string() }).dec();
        if !c.complete {
            self.aborted.get_or_create(&HandlerLabels { handler: c.route.to_string() }).inc();
        }
    }

    /// The exposition text, with the catalog's state and the host counts (`(state, count)`) of now.
    pub fn render(&self, catalog: &Catalog, hosts: &[(crate::hosts::HostStatus, usize)]) -> String {
        for (status, n) in hosts {
            self.hosts.get_or_create(&HostLabels { status: status.as_str().to_string() }).set(*n as i64);
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
