//! Custom-resource intake: what `PUT`/`POST` on the API (a JSON body) and `bootstream apply`
//! (multi-document YAML) do with a document before storing it: `resources::validate_document`,
//! then `validate_status` and `validate_update` on the normalized result.
//!
//! `cli::parse_documents` is private, so its loop (yaml_serde's multi-document deserializer,
//! null documents skipped) is repeated here with the same crate version.
#![no_main]

use bootstream::resources::{validate_document, validate_status, validate_update};
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use serde_json::Value;

fn intake(doc: &Value) {
    let Ok((kind, normalized)) = validate_document(doc) else { return };
    // What is stored must itself be accepted again, unchanged.
    let (kind2, again) = validate_document(&normalized).expect("a normalized document validates");
    assert_eq!(kind, kind2);
    assert_eq!(again, normalized);
    let _ = validate_status(kind, &normalized);
    validate_update(kind, &normalized, &normalized).expect("an unchanged document is a valid update");
}

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = serde_json::from_slice::<Value>(data) {
        intake(&doc);
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    for de in yaml_serde::Deserializer::from_str(text).take(16) {
        let Ok(doc) = Value::deserialize(de) else { break };
        if !doc.is_null() {
            intake(&doc);
        }
    }
});
