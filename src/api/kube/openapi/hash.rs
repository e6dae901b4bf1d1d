//! The content hash of the v3 documents.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Uppercase hex SHA-256 of the compact JSON serialization: the `hash` of
/// the v3 index URLs, also usable as an ETag.
pub fn content_hash(v: &Value) -> String {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    hex::encode_upper(&Sha256::digest(&bytes)[..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn uppercase_sha256_of_the_compact_json() {
        assert_eq!(content_hash(&json!({})), "44136FA355B3678A1146AD16F7E8649E94FB4FC21FE77E8310C060F61CAAFF8A");
        assert_eq!(
            content_hash(&json!({"a": [1, "x"]})),
            "5E49F471D8B615A8AE0ECF0A53DBE2F5F617ABB2DFE6246974AA6E4BDEB89725"
        );
    }
}
