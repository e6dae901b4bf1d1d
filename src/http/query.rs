//! Query strings as the routes read them: `a=1&b=x+y` into a map, percent- and plus-decoded.
//!
//! The splitting and decoding are `url::form_urlencoded`'s (empty pairs skipped, a key without `=`
//! has the empty value, bytes that are not UTF-8 replaced). It enforces no bounds, and the
//! hand-written parser it replaced enforced none: the server's 16 KiB cap on a request's head bounds
//! a query before it gets here, and a route that takes more care of its query bounds it itself
//! (`api::events` checks its length, repeated keys and UTF-8 on its own).

use std::collections::HashMap;

/// The query of `uri` as a map; a repeated key keeps its last value.
pub fn query_map(uri: &http::Uri) -> HashMap<String, String> {
    uri.query().map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(uri: &str) -> HashMap<String, String> {
        query_map(&uri.parse().unwrap())
    }

    #[test]
    fn pairs_are_split_and_decoded_as_forms_are() {
        let q = map("/x?a=1&b=x+y%2B%20z&&flag&c=%ZZ&d=%FF&a=2");
        assert_eq!(q["a"], "2", "a repeated key keeps its last value");
        assert_eq!(q["b"], "x y+ z");
        assert_eq!(q["flag"], "");
        assert_eq!(q["c"], "%ZZ", "an escape that is not one stays as written");
        assert_eq!(q["d"], "\u{fffd}");
        assert_eq!(q.len(), 5);
        assert!(map("/x").is_empty());
    }
}
