//! `GET /api/assisted-install/v2/events`: the events the pool recorded (`pool/events.rs`), as
//! assisted-service's `v2ListEvents` lists them, for whoever holds an eventsURL (an Agent's, an
//! InfraEnv's, an AgentClusterInstall's) or the API token.
//!
//! A signed `api_key` decides what can be read, whatever the query asks: a token naming InfraEnv A
//! reads the events of A and of A's hosts, a token naming cluster C those of C (its own and its
//! hosts'). The query's filters only narrow that. A query naming another InfraEnv or cluster, or a
//! host that is not A's, is answered as assisted-service answers it, 404 "Object Not Found",
//! the same whether that other thing exists or not. Every parameter is checked: an unknown,
//! repeated or malformed one is a 400 naming it, and a page holds at most [`MAX_LIMIT`] events.

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};

use super::agent::{error, infra_error};
use super::{App, controller_only};
use crate::http::Body;
use crate::pool::events::EventView;
use crate::store::Store;
use crate::store::sqlite::EventQuery;

/// Most events a page holds (assisted's default page is 5,000; a host keeps 256).
pub const MAX_LIMIT: u32 = 1000;
/// Longest query string taken: every parameter at its longest fits well within it.
pub const MAX_QUERY_BYTES: usize = 8192;
/// Most host ids one query names.
pub const MAX_HOST_IDS: usize = 100;
/// Longest message pattern.
pub const MAX_MESSAGE_BYTES: usize = 256;

const SEVERITIES: [&str; 4] = ["info", "warning", "error", "critical"];
const CATEGORIES: [&str; 2] = ["user", "metrics"];

/// The parameters of a request, checked.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EventParams {
    pub api_key: Option<String>,
    pub query: EventQuery,
}

/// Why a request's parameters are not taken: the 400 body, each value quoted as far as
/// [`truncated`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("the query string is {0} bytes, over the {MAX_QUERY_BYTES} taken")]
    QueryTooLong(usize),
    #[error("query parameter {0:?} is not UTF-8")]
    NotUtf8(String),
    #[error("query parameter {0:?} is given twice")]
    GivenTwice(String),
    #[error("unknown query parameter {0:?}")]
    Unknown(String),
    #[error("{name} must be a UUID, not {value:?}")]
    NotUuid { name: &'static str, value: String },
    #[error("{name} must be true or false, not {value:?}")]
    NotBoolean { name: &'static str, value: String },
    #[error("{name} must be an integer, not {value:?}")]
    NotInteger { name: &'static str, value: String },
    #[error("offset {0} is too large")]
    OffsetTooLarge(i64),
    #[error("order must be ascending or descending, not {0:?}")]
    Order(String),
    #[error("{name}: {value:?} is not one of {}", .allowed.join(", "))]
    NotOneOf { name: &'static str, value: String, allowed: &'static [&'static str] },
    #[error("message is {0} bytes, over the {MAX_MESSAGE_BYTES} taken")]
    MessageTooLong(usize),
    #[error("{0} host ids, over the {MAX_HOST_IDS} one query takes")]
    TooManyHostIds(usize),
}

fn uuid(name: &'static str, value: &str) -> Result<String, ParamError> {
    uuid::Uuid::parse_str(value)
        .map(|u| u.to_string())
        .map_err(|_| ParamError::NotUuid { name, value: truncated(value) })
}

fn truncated(value: &str) -> String {
    value.chars().take(64).collect()
}

fn boolean(name: &'static str, value: &str) -> Result<bool, ParamError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(ParamError::NotBoolean { name, value: truncated(other) }),
    }
}

fn one_of(name: &'static str, value: &str, allowed: &'static [&'static str]) -> Result<Vec<String>, ParamError> {
    value
        .split(',')
        .map(|v| match allowed.contains(&v) {
            true => Ok(v.to_string()),
            false => Err(ParamError::NotOneOf { name, value: truncated(v), allowed }),
        })
        .collect()
}

impl EventParams {
    /// The parameters of `uri`'s query, as `v2ListEvents` takes them (arrays comma-separated, as
    /// its clients send them), or why they are not taken.
    pub fn parse(uri: &http::Uri) -> Result<EventParams, ParamError> {
        let raw = uri.query().unwrap_or("");
        if raw.len() > MAX_QUERY_BYTES {
            return Err(ParamError::QueryTooLong(raw.len()));
        }
        let mut seen = std::collections::HashSet::new();
        let mut p = EventParams { query: EventQuery { limit: MAX_LIMIT, ..Default::default() }, ..Default::default() };
        let mut host_ids: Vec<String> = Vec::new();
        for pair in raw.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8()
                    .map(|c| c.into_owned())
                    .map_err(|_| ParamError::NotUtf8(truncated(k)))
            };
            let (key, value) = (decode(k)?, decode(v)?);
            if !seen.insert(key.clone()) {
                return Err(ParamError::GivenTwice(truncated(&key)));
            }
            let q = &mut p.query;
            match key.as_str() {
                "api_key" => p.api_key = Some(value).filter(|t| !t.is_empty()),
                "cluster_id" => q.cluster_id = Some(uuid("cluster_id", &value)?),
                "infra_env_id" => q.infra_env_id = Some(uuid("infra_env_id", &value)?),
                "host_id" => host_ids.push(uuid("host_id", &value)?),
                "host_ids" => {
                    for id in value.split(',') {
                        host_ids.push(uuid("host_ids", id)?);
                    }
                }
                "limit" => {
                    let limit: i64 = value
                        .parse()
                        .map_err(|_| ParamError::NotInteger { name: "limit", value: truncated(&value) })?;
                    // Negative is "no limit" to assisted-service: here, the most a page holds.
                    q.limit = u32::try_from(limit).map_or(MAX_LIMIT, |l| l.min(MAX_LIMIT));
                }
                "offset" => {
                    let offset: i64 = value
                        .parse()
                        .map_err(|_| ParamError::NotInteger { name: "offset", value: truncated(&value) })?;
                    q.offset = u32::try_from(offset.max(0)).map_err(|_| ParamError::OffsetTooLarge(offset))?;
                }
                "order" => {
                    q.descending = match value.as_str() {
                        "ascending" => false,
                        "descending" => true,
                        other => {
                            return Err(ParamError::Order(truncated(other)));
                        }
                    }
                }
                "severities" => q.severities = Some(one_of("severities", &value, &SEVERITIES)?),
                "categories" => q.categories = Some(one_of("categories", &value, &CATEGORIES)?),
                "message" => {
                    if value.len() > MAX_MESSAGE_BYTES {
                        return Err(ParamError::MessageTooLong(value.len()));
                    }
                    q.message = Some(value);
                }
                "cluster_level" => q.cluster_level = boolean("cluster_level", &value)?,
                // A deleted host's events went with it: the flag adds none.
                "deleted_hosts" => {
                    boolean("deleted_hosts", &value)?;
                }
                other => return Err(ParamError::Unknown(truncated(other))),
            }
        }
        if host_ids.len() > MAX_HOST_IDS {
            return Err(ParamError::TooManyHostIds(host_ids.len()));
        }
        host_ids.sort();
        host_ids.dedup();
        if !host_ids.is_empty() {
            p.query.host_ids = Some(host_ids);
        }
        Ok(p)
    }
}

/// assisted-service's answer to a query outside a token's scope, the same whether what it names
/// exists or not.
fn out_of_scope() -> Response<Body> {
    error(404, "Object Not Found")
}

impl<S: Store> App<S> {
    /// `GET /api/assisted-install/v2/events`.
    pub(super) async fn list_events(&self, req: &Request<Bytes>) -> Response<Body> {
        let mut params = match EventParams::parse(req.uri()) {
            Ok(p) => p,
            Err(reason) => return error(400, &reason.to_string()),
        };
        let Some(backend) = &self.backend else { return controller_only() };
        let signer = self.images.config.url_signer.as_ref();
        match (signer, params.api_key.as_deref()) {
            (Some(signer), Some(token)) => {
                let claims = match signer.verify_events(token, std::time::SystemTime::now()) {
                    Ok(c) => c,
                    Err(e) => return infra_error(e.http_status(), &e.to_string()),
                };
                let q = &mut params.query;
                if !claims.infra_env_id.is_empty() {
                    let own = claims.infra_env_id;
                    if q.infra_env_id.as_ref().is_some_and(|id| *id != own) {
                        return out_of_scope();
                    }
                    // Each host named must be one of the InfraEnv's: records are keyed by both.
                    for host_id in q.host_ids.iter().flatten() {
                        if !backend.has_host(&crate::hosts::HostKey::new(&own, host_id)).await {
                            return out_of_scope();
                        }
                    }
                    q.infra_env_id = Some(own);
                } else {
                    let own = claims.cluster_id;
                    if q.cluster_id.as_ref().is_some_and(|id| *id != own) {
                        return out_of_scope();
                    }
                    q.cluster_id = Some(own);
                }
            }
            // The API token reads every event (embedded); where there is none but URLs are
            // signed (on Kubernetes), only an eventsURL does.
            _ if self.api_token.is_some() => {
                if let Some(refused) = self.api_refusal(req.headers()) {
                    return refused;
                }
            }
            (Some(_), None) => {
                return infra_error(
                    StatusCode::UNAUTHORIZED,
                    "events need the signed URL of an Agent's, InfraEnv's or AgentClusterInstall's status.debugInfo.eventsURL",
                );
            }
            // Unsigned URLs without an API token (on Kubernetes): as assisted-service's AUTH_TYPE=none.
            (None, _) => {}
        }
        let page = match backend.events(params.query).await {
            Ok(page) => page,
            Err(e) => return error(e.status, &e.message),
        };
        let views: Vec<EventView<'_>> = page.events.iter().map(EventView::from).collect();
        let mut resp = crate::http::json(StatusCode::OK, &views);
        let headers = resp.headers_mut();
        for (severity, header) in [
            ("info", "severity-count-info"),
            ("warning", "severity-count-warning"),
            ("error", "severity-count-error"),
            ("critical", "severity-count-critical"),
        ] {
            let n = page.by_severity.iter().find(|(s, _)| s == severity).map_or(0, |(_, n)| *n);
            headers.insert(header, HeaderValue::from(n));
        }
        headers.insert("event-count", HeaderValue::from(page.count));
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "2b4f5fd6-1111-4c5e-9a4e-000000000001";
    const H: &str = "6f1b1b7e-0f4e-4b6a-9d57-0b8a3c1f2e11";

    fn parse(q: &str) -> Result<EventParams, ParamError> {
        EventParams::parse(&format!("/api/assisted-install/v2/events?{q}").parse().unwrap())
    }

    #[test]
    fn parameters_are_taken_as_v2_list_events_takes_them() {
        let p = parse(&format!(
            "infra_env_id={A}&host_id={H}&limit=5&offset=2&order=descending&severities=info,error&message=disk&cluster_level=true&deleted_hosts=false&categories=user&api_key=t"
        ))
        .unwrap();
        assert_eq!(p.api_key.as_deref(), Some("t"));
        let q = p.query;
        assert_eq!(q.infra_env_id.as_deref(), Some(A));
        assert_eq!(q.host_ids, Some(vec![H.to_string()]));
        assert_eq!((q.limit, q.offset, q.descending, q.cluster_level), (5, 2, true, true));
        assert_eq!(q.severities, Some(vec!["info".to_string(), "error".to_string()]));
        assert_eq!(q.message.as_deref(), Some("disk"));
        // Ids are compared as the records keep them: lower case.
        let upper = parse(&format!("host_ids={}", H.to_uppercase())).unwrap();
        assert_eq!(upper.query.host_ids, Some(vec![H.to_string()]));
        // No limit, or "no limit": a page of the most allowed.
        assert_eq!(parse("").unwrap().query.limit, MAX_LIMIT);
        assert_eq!(parse("limit=-1").unwrap().query.limit, MAX_LIMIT);
        assert_eq!(parse("limit=100000000").unwrap().query.limit, MAX_LIMIT);
        assert_eq!(parse("offset=-4").unwrap().query.offset, 0);
    }

    #[test]
    fn unknown_repeated_and_malformed_parameters_are_refused_by_name() {
        let long = "x".repeat(MAX_QUERY_BYTES + 1);
        let many = vec![H; MAX_HOST_IDS + 1].join(",");
        let cases: Vec<(String, &str)> = vec![
            ("cluster_id=abc".into(), "cluster_id must be a UUID"),
            (format!("host_id={H}&host_id={H}"), "given twice"),
            ("hostid=1".into(), "unknown query parameter \"hostid\""),
            ("limit=ten".into(), "limit must be an integer"),
            ("offset=99999999999".into(), "too large"),
            ("order=random".into(), "order must be"),
            ("severities=info,fatal".into(), "\"fatal\" is not one of"),
            ("categories=secret".into(), "is not one of"),
            ("cluster_level=yes".into(), "true or false"),
            (format!("message={}", "m".repeat(MAX_MESSAGE_BYTES + 1)), "message is"),
            (format!("host_ids={many}"), "host ids, over the"),
            (format!("message={long}"), "query string is"),
            ("infra_env_id=%ff".into(), "not UTF-8"),
        ];
        for (q, want) in cases {
            let e = parse(&q).unwrap_err().to_string();
            assert!(e.contains(want), "{q}: {e}");
            assert!(e.len() < 200, "{e}");
        }
    }
}
