//! The Kubernetes API's write path, as a hostile client drives it: create, update, delete, every
//! patch type, server-side apply (JSON and YAML), protobuf bodies, the status subresource, with
//! dry runs, field validation and force, against objects of bootstream's kinds and core kinds.
//!
//! The property: every request ends in a 2xx whose object is within the object limit, or in a
//! 4xx; never a panic, never a 5xx, never an object over the limit.
//!
//! An input is up to four requests separated by `\0--\0`; each is a selector byte (what and how),
//! a flags byte (dryRun, fieldValidation, force, fieldManager) and the body. Each input starts
//! from the same small world (one InfraEnv, one Secret, one Event, one Namespace): the API is made
//! once (making one costs more than a hundred requests), and emptied and seeded again before each
//! input.
#![no_main]

use std::sync::{Arc, OnceLock};

use bootstream::api::kube::limits::Limits;
use bootstream::api::kube::{KubeApi, NoHooks};
use bootstream::http::Body;
use bootstream::store::sqlite::SqliteStore;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// Small, so that inputs reach it.
const MAX_OBJECT_BYTES: usize = 64 << 10;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"))
}

const IE: &str = "/apis/agent-install.openshift.io/v1beta1/namespaces/ns/infraenvs";
const SECRETS: &str = "/api/v1/namespaces/ns/secrets";
const EVENTS: &str = "/api/v1/namespaces/ns/events";
const NAMESPACES: &str = "/api/v1/namespaces";

/// Collection, item name, whether the item has a status subresource.
const TARGETS: [(&str, &str, bool); 4] = [(IE, "ie", true), (SECRETS, "s", false), (EVENTS, "e", false), (NAMESPACES, "n", true)];

const CONTENT_TYPES: [&str; 6] = [
    "application/json",
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/vnd.kubernetes.protobuf",
];

async fn call(api: &KubeApi, method: &str, uri: &str, content_type: &str, body: Bytes) -> (u16, Option<Bytes>) {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::USER_AGENT, "fuzz/1")
        .body(body)
        .expect("a request");
    let resp = api.handle(&req).await;
    let status = resp.status().as_u16();
    let body = match resp.body() {
        Body::Bytes(b) => Some(b.clone()),
        Body::Chunks(c) => Some(Bytes::from(c.concat())),
        _ => None,
    };
    (status, body)
}

/// Whether the world changed since it was seeded (it starts unseeded).
static DIRTY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// The API, emptied and seeded again.
async fn world() -> Arc<KubeApi> {
    static API: OnceLock<Arc<KubeApi>> = OnceLock::new();
    let api = API
        .get_or_init(|| {
            KubeApi::with_limits(
                SqliteStore::open_in_memory().expect("a store"),
                Arc::new(NoHooks),
                Limits { max_object_bytes: MAX_OBJECT_BYTES },
            )
        })
        .clone();
    // Everything the last input left goes: finalizers cleared, then deleted (only after an input
    // that changed something: the store's writes are what an input costs most).
    if !DIRTY.swap(false, std::sync::atomic::Ordering::Relaxed) {
        return api;
    }
    for (collection, _, _) in TARGETS {
        let (code, list) = call(&api, "GET", collection, "", Bytes::new()).await;
        assert_eq!(code, 200, "listing {collection}");
        let list: Value = serde_json::from_slice(&list.expect("a list")).expect("a JSON list");
        for item in list["items"].as_array().into_iter().flatten() {
            let name = item["metadata"]["name"].as_str().expect("a name");
            let at = format!("{collection}/{name}");
            let clear = Bytes::from_static(br#"{"metadata":{"finalizers":null}}"#);
            call(&api, "PATCH", &at, "application/merge-patch+json", clear).await;
            let (code, _) = call(&api, "DELETE", &at, "", Bytes::new()).await;
            assert!(code == 200 || code == 404, "deleting {at}: {code}");
        }
    }
    let seeds = [
        (NAMESPACES, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}})),
        (IE, json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
            "metadata": {"name": "ie", "labels": {"a": "b"}, "finalizers": ["x/y"]},
            "spec": {"pullSecretRef": {"name": "s"}, "sshAuthorizedKey": "ssh-ed25519 AAAA"}})),
        (SECRETS, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "stringData": {".dockerconfigjson": "{}"}, "type": "kubernetes.io/dockerconfigjson"})),
        (EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"name": "x", "namespace": "ns"}, "note": "n"})),
    ];
    for (collection, doc) in seeds {
        let (code, _) = call(&api, "POST", collection, "application/json", Bytes::from(doc.to_string())).await;
        assert_eq!(code, 201, "seeding {collection}");
    }
    api
}

async fn one(api: &KubeApi, input: &[u8]) {
    let [selector, flags, body @ ..] = input else { return };
    let (collection, name, has_status) = TARGETS[usize::from(selector & 3)];
    let content_type = CONTENT_TYPES[usize::from(selector >> 2) % CONTENT_TYPES.len()];
    let status = has_status && selector & 0x80 != 0;
    let item = if status { format!("{collection}/{name}/status") } else { format!("{collection}/{name}") };
    let mut query = Vec::new();
    if flags & 1 != 0 {
        query.push("dryRun=All".to_string());
    }
    query.push(format!("fieldValidation={}", ["Warn", "Strict", "Ignore", ""][usize::from(flags >> 1 & 3)]));
    if flags & 8 != 0 {
        query.push("force=true".to_string());
    }
    if flags & 16 != 0 {
        query.push("fieldManager=fuzz".to_string());
    }
    let query = query.join("&");
    let (method, uri) = match (flags >> 5) & 7 {
        0 => ("POST", format!("{collection}?{query}")),
        1 => ("PUT", format!("{item}?{query}")),
        2 => ("DELETE", format!("{item}?{query}")),
        _ => ("PATCH", format!("{item}?{query}")),
    };
    let (code, answer) = call(api, method, &uri, content_type, Bytes::copy_from_slice(body)).await;
    assert!(
        (200..300).contains(&code) || (400..500).contains(&code),
        "{method} {uri} ({content_type}) answered {code}: {:?}",
        answer.as_deref().map(String::from_utf8_lossy)
    );
    if (200..300).contains(&code) {
        if flags & 1 == 0 {
            DIRTY.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let answer = answer.expect("a 2xx carries its object");
        assert!(
            answer.len() <= MAX_OBJECT_BYTES,
            "{method} {uri} answered an object of {} bytes, over the limit",
            answer.len()
        );
        let object: Value = serde_json::from_slice(&answer).expect("a 2xx answer is JSON");
        assert!(object.is_object(), "{method} {uri} answered a non-object");
    }
}

fuzz_target!(|data: &[u8]| {
    runtime().block_on(async {
        let api = world().await;
        let mut rest = data;
        for _ in 0..4 {
            let (input, tail) = match rest.windows(4).position(|w| w == b"\0--\0") {
                Some(at) => (&rest[..at], &rest[at + 4..]),
                None => (rest, &[][..]),
            };
            one(&api, input).await;
            if tail.is_empty() {
                break;
            }
            rest = tail;
        }
    });
});
