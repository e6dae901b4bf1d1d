//! Object names, as the API server validates them per kind: a Namespace's name is an RFC 1123
//! label, an Event's only a path segment, every other kind's an RFC 1123 subdomain. Namespaces
//! named on objects are labels. The messages are the API server's, field path first, so that
//! clients show them as they would a hub's.

/// A name the API server would refuse, in its words (`metadata.name: Invalid value: ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(pub String);

/// Which rule a kind's names follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 label: Namespaces.
    Label,
    /// RFC 1123 subdomain: most kinds, custom resources included.
    Subdomain,
    /// Anything that is a safe URL path segment: Events (their names are made from the names of
    /// the objects they are about).
    PathSegment,
}

impl NameRule {
    pub fn of_kind(kind: &str) -> NameRule {
        match kind {
            "Namespace" => NameRule::Label,
            "Event" => NameRule::PathSegment,
            _ => NameRule::Subdomain,
        }
    }
}

const LABEL_MAX: usize = 63;
const SUBDOMAIN_MAX: usize = 253;
const LABEL_FORMAT: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_FORMAT: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

fn is_subdomain(s: &str) -> bool {
    s.split('.').all(is_label)
}

/// What is wrong with `value` under `rule` (the API server's texts, several at once as it lists
/// them), or nothing.
fn problems(rule: NameRule, value: &str) -> Vec<String> {
    let mut out = Vec::new();
    match rule {
        NameRule::Label => {
            if value.len() > LABEL_MAX {
                out.push(format!("must be no more than {LABEL_MAX} characters"));
            }
            if !is_label(value) {
                out.push(LABEL_FORMAT.to_string());
            }
        }
        NameRule::Subdomain => {
            if value.len() > SUBDOMAIN_MAX {
                out.push(format!("must be no more than {SUBDOMAIN_MAX} characters"));
            }
            if !is_subdomain(value) {
                out.push(SUBDOMAIN_FORMAT.to_string());
            }
        }
        NameRule::PathSegment => {
            if value == "." || value == ".." {
                out.push(format!("may not be '{value}'"));
            }
            for bad in ['/', '%'] {
                if value.contains(bad) {
                    out.push(format!("may not contain '{bad}'"));
                }
            }
        }
    }
    out
}

/// Checks a name (`generate` false) or a `generateName` prefix (true: it may end in `-`, as the
/// generated suffix follows it). The error is `FIELD: Invalid value: "VALUE": PROBLEM`.
pub fn check(field: &str, rule: NameRule, value: &str, generate: bool) -> Result<(), NameError> {
    // A prefix is checked as the name it starts: its trailing dash is followed by the suffix.
    let checked = match value.strip_suffix('-') {
        Some(stem) if generate => format!("{stem}-a"),
        _ => value.to_string(),
    };
    let found = problems(rule, &checked);
    match found.first() {
        None => Ok(()),
        // Long values are shown whole, as upstream does: the request's own text, bounded by the body.
        Some(first) => Err(NameError(format!("{field}: Invalid value: {value:?}: {first}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_the_api_servers_rule() {
        for bad in ["x/y", "..", "UPPER", "a_b", "-a", "a-", ""] {
            assert!(check("metadata.name", NameRule::Label, bad, false).is_err(), "{bad}");
            assert!(check("metadata.name", NameRule::Subdomain, bad, false).is_err(), "{bad}");
        }
        let long = "a".repeat(64);
        let err = check("metadata.name", NameRule::Label, &long, false).unwrap_err();
        assert!(err.0.ends_with("must be no more than 63 characters"), "{err}");
        assert!(check("metadata.name", NameRule::Subdomain, &long, false).is_ok());
        assert!(check("metadata.name", NameRule::Subdomain, &"a".repeat(254), false).is_err());
        assert!(check("metadata.name", NameRule::Subdomain, "a..b", false).is_err());
        assert!(check("metadata.name", NameRule::Subdomain, "x.example-1.com", false).is_ok());
        assert!(check("metadata.name", NameRule::Label, "x.y", false).is_err());
        // Events: a path segment only.
        for bad in ["x/y", "..", ".", "a%b"] {
            assert!(check("metadata.name", NameRule::PathSegment, bad, false).is_err(), "{bad}");
        }
        assert!(check("metadata.name", NameRule::PathSegment, "pod.17a2b3c4d5e6", false).is_ok());
        // Prefixes may end in a dash.
        assert!(check("metadata.generateName", NameRule::Subdomain, "web-", true).is_ok());
        assert!(check("metadata.generateName", NameRule::Subdomain, "Web-", true).is_err());
        assert_eq!(
            check("metadata.name", NameRule::Label, "x/y", false).unwrap_err(),
            NameError(format!("metadata.name: Invalid value: \"x/y\": {LABEL_FORMAT}"))
        );
    }
}
