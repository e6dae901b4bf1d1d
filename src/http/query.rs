//! Query strings as the routes read them: `a=1&b=x+y` into a map, percent- and plus-decoded.

use std::collections::HashMap;

/// The query of `uri` as a map; a repeated key keeps its last value.
pub fn query_map(uri: &http::Uri) -> HashMap<String, String> {
    uri.query()
        .map(|q| {
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned()
}
