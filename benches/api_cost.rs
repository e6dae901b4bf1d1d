//! What one Kubernetes-API request costs as its input grows (issue 41): each request family at
//! input sizes ×1, ×4 and ×16, with the CPU it takes per request. A family whose cost grows faster
//! than its input (more than ×16 from ×1 to ×16, with a margin) is a bug: no request may cost more
//! than linear work in its size (n log n at most).
//!
//! `cargo bench --bench api_cost [-- BASE]`: BASE is the ×1 input size (items, fields or watchers;
//! default 1,000, watchers default a tenth of it). The API is the one `serve` gives kubectl,
//! called in-process (`KubeApi::handle`) with an in-memory store, so that what is measured is the
//! API's own work: parsing, patching, managed fields, admission, the size checks, the store's
//! write and the watch fan-out. CPU is the process's (all threads: the blocking pool that
//! parses and patches included), per request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bootstream::api::kube::{KubeApi, NoHooks};
use bootstream::http::Body;
use bootstream::store::sqlite::SqliteStore;
use bytes::Bytes;
use serde_json::{Value, json};

const EVENTS: &str = "/api/v1/namespaces/ns/events";

fn cpu_seconds() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

async fn call(api: &KubeApi, method: &str, uri: &str, content_type: &str, body: &Bytes) -> (u16, Body) {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::USER_AGENT, "bench/1")
        .body(body.clone())
        .expect("a request");
    let resp = api.handle(&req).await;
    let code = resp.status().as_u16();
    (code, resp.into_body())
}

fn event(name: &str, n: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name,
            "finalizers": (0..n).map(|i| format!("example.com/f{i}")).collect::<Vec<_>>(),
            "annotations": (0..n).map(|i| (format!("a{i}"), json!(format!("v{i}")))).collect::<serde_json::Map<_, _>>()},
        "involvedObject": {"name": "x", "namespace": "ns"}})
}

fn yaml_event(name: &str, n: usize) -> String {
    let mut s = format!(
        "apiVersion: v1\nkind: Event\ninvolvedObject: {{name: x, namespace: ns}}\nmetadata:\n  name: {name}\n  finalizers:\n"
    );
    for i in 0..n {
        s.push_str(&format!("  - example.com/f{i}\n"));
    }
    s.push_str("  annotations:\n");
    for i in 0..n {
        s.push_str(&format!("    a{i}: v{i}\n"));
    }
    s
}

/// One request family: sets up the world for input size `n`, then makes the request to measure.
struct Family {
    name: &'static str,
    /// What grows with n.
    input: &'static str,
    setup: fn(n: usize) -> Setup,
}

struct Setup {
    /// Objects created first (a POST each).
    objects: Vec<(String, Value)>,
    method: &'static str,
    uri: String,
    content_type: &'static str,
    body: Bytes,
    /// Watchers opened first (watch fan-out); the request is then a write all of them see.
    watchers: usize,
}

/// The query of an apply that takes over every field.
const APPLY: &str = "&fieldManager=bench&force=true";

/// A patch (or apply) of the Event `e` holding `n` finalizers and annotations, as a dry run.
fn patch_of_event(n: usize, query: &str, content_type: &'static str, body: String) -> Setup {
    Setup {
        objects: vec![(EVENTS.into(), event("e", n))],
        method: "PATCH",
        uri: format!("{EVENTS}/e?dryRun=All{query}"),
        content_type,
        body: Bytes::from(body),
        watchers: 0,
    }
}

fn families() -> Vec<Family> {
    vec![
        Family {
            name: "create (dry run)",
            input: "finalizers + annotations",
            setup: |n| Setup {
                objects: vec![],
                method: "POST",
                uri: format!("{EVENTS}?dryRun=All"),
                content_type: "application/json",
                body: Bytes::from(event("e", n).to_string()),
                watchers: 0,
            },
        },
        Family {
            name: "merge patch",
            input: "annotations changed",
            setup: |n| {
                let annotations: serde_json::Map<_, _> = (0..n).map(|i| (format!("a{i}"), Value::Null)).collect();
                let body = json!({"metadata": {"annotations": annotations}}).to_string();
                patch_of_event(n, "", "application/merge-patch+json", body)
            },
        },
        Family {
            name: "JSON patch",
            // A third of n operations: at ×16 that stays within the API server's 10,000.
            input: "operations (n/4 adds, n/12 removals)",
            setup: |n| {
                let (adds, removals) = (n / 4, n / 12);
                let ops: Vec<Value> =
                    std::iter::once(json!({"op": "add", "path": "/metadata/finalizers", "value": []}))
                        .chain((0..adds).map(
                            |i| json!({"op": "add", "path": "/metadata/finalizers/-", "value": format!("x/f{i}")}),
                        ))
                        .chain(
                            (0..removals).map(
                                |i| json!({"op": "remove", "path": format!("/metadata/finalizers/{}", adds - 1 - i)}),
                            ),
                        )
                        .collect();
                patch_of_event(0, "", "application/json-patch+json", Value::Array(ops).to_string())
            },
        },
        Family {
            name: "strategic merge patch",
            input: "finalizers reordered",
            setup: |n| {
                let mut order: Vec<String> = (0..n).map(|i| format!("example.com/f{i}")).collect();
                order.reverse();
                let body = json!({"metadata": {"finalizers": order, "$setElementOrder/finalizers": order}});
                patch_of_event(n, "", "application/strategic-merge-patch+json", body.to_string())
            },
        },
        Family {
            name: "apply (JSON)",
            input: "finalizers + annotations",
            setup: |n| patch_of_event(n, APPLY, "application/apply-patch+yaml", event("e", n).to_string()),
        },
        Family {
            name: "apply (YAML)",
            input: "finalizers + annotations",
            setup: |n| patch_of_event(n, APPLY, "application/apply-patch+yaml", yaml_event("e", n)),
        },
        Family {
            name: "list, label selector",
            input: "objects listed",
            setup: |n| Setup {
                objects: (0..n)
                    .map(|i| {
                        let mut e = event(&format!("e{i}"), 1);
                        e["metadata"]["labels"] = json!({"half": (i % 2).to_string()});
                        (EVENTS.to_string(), e)
                    })
                    .collect(),
                method: "GET",
                uri: format!("{EVENTS}?labelSelector=half%3D1"),
                content_type: "",
                body: Bytes::new(),
                watchers: 0,
            },
        },
        Family {
            name: "watch fan-out",
            input: "watchers",
            setup: |n| Setup {
                objects: vec![(EVENTS.into(), event("e", 10))],
                method: "PATCH",
                uri: format!("{EVENTS}/e"),
                content_type: "application/merge-patch+json",
                body: Bytes::new(),
                watchers: n,
            },
        },
    ]
}

/// CPU seconds per request of one family at input size n.
async fn measure(family: &Family, n: usize) -> f64 {
    // A larger object limit than the default 1.5 MiB: the ×16 objects (16,000 finalizers and
    // annotations, with their managed fields) are over it, and what is measured is the work.
    let limits = bootstream::api::kube::limits::Limits { max_object_bytes: 16 << 20 };
    let api = KubeApi::with_limits(SqliteStore::open_in_memory().expect("a store"), Arc::new(NoHooks), limits);
    let setup = (family.setup)(n);
    for (collection, doc) in &setup.objects {
        let (code, _) = call(&api, "POST", collection, "application/json", &Bytes::from(doc.to_string())).await;
        assert_eq!(code, 201, "{}: setting up", family.name);
    }
    // Watchers read everything they are sent, on tasks of their own.
    let mut readers = Vec::new();
    for _ in 0..setup.watchers {
        let (code, body) = call(&api, "GET", &format!("{EVENTS}?watch=1&resourceVersion=0"), "", &Bytes::new()).await;
        assert_eq!(code, 200);
        let Body::Stream(feed) = body else { panic!("a watch streams") };
        let mut rx = feed.take().expect("the watch's feed");
        readers.push(tokio::spawn(async move {
            let mut seen = 0usize;
            while let Some(Ok(piece)) = rx.recv().await {
                seen += piece.len();
            }
            seen
        }));
    }
    let mut requests = 0u32;
    let started = Instant::now();
    let cpu = cpu_seconds();
    while requests < 3 || (started.elapsed() < Duration::from_millis(400) && requests < 10_000) {
        let body = if setup.watchers > 0 {
            Bytes::from(json!({"note": format!("change {requests}")}).to_string())
        } else {
            setup.body.clone()
        };
        let (code, _) = call(&api, setup.method, &setup.uri, setup.content_type, &body).await;
        assert!((200..300).contains(&code), "{}: answered {code}", family.name);
        if setup.watchers > 0 {
            // Every watcher's event is written before the next change (the fan-out is measured).
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        requests += 1;
    }
    if setup.watchers > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let spent = cpu_seconds() - cpu;
    drop(api);
    for r in readers {
        r.abort();
    }
    spent / f64::from(requests)
}

fn main() {
    let base: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1000);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    println!("Kubernetes API cost per request, input ×1 = {base} (watchers: {})", base / 10);
    println!(
        "{:<24} {:<26} {:>12} {:>12} {:>12} {:>9}  verdict",
        "family", "grows with", "×1 µs", "×4 µs", "×16 µs", "×16/×1"
    );
    let mut bad = Vec::new();
    for family in families() {
        let unit = if family.name == "watch fan-out" { (base / 10).max(1) } else { base };
        let costs: Vec<f64> = [1, 4, 16].iter().map(|m| runtime.block_on(measure(&family, unit * m))).collect();
        let ratio = costs[2] / costs[0];
        // Linear is ×16; n log n over this range about ×20; a margin for noise: past ×28 it grows
        // faster than its input.
        let verdict = if ratio > 28.0 { "GROWS FASTER THAN ITS INPUT" } else { "linear" };
        if ratio > 28.0 {
            bad.push(family.name);
        }
        println!(
            "{:<24} {:<26} {:>12.1} {:>12.1} {:>12.1} {:>9.1}  {verdict}",
            family.name,
            family.input,
            costs[0] * 1e6,
            costs[1] * 1e6,
            costs[2] * 1e6,
            ratio
        );
    }
    if !bad.is_empty() {
        eprintln!("families whose cost grows faster than their input: {}", bad.join(", "));
        std::process::exit(1);
    }
}
