//! Serving a representation the way a BMC, iPXE, curl or a browser expects: exact Content-Length,
//! single and multiple byte ranges, strong ETag, Last-Modified, conditional requests (RFC 9110 §13),
//! If-Range, and HEAD equal to GET without the body.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use sha2::{Digest, Sha256};

use super::Body;
use super::range::{self, RangeRequest};
use crate::plan::{Part, Plan, Representation};

/// Answers a GET or HEAD for `rep`, honoring `Range` and the conditional headers.
pub fn respond(method: &Method, req_headers: &HeaderMap, rep: &Representation) -> Response<Body> {
    let len = rep.plan.len();
    let etag = rep.quoted_etag();
    // HTTP dates have one-second resolution; compare at that resolution. Never later than now
    // (RFC 9110 §8.8.2.1: a Last-Modified after the Date header is not to be sent).
    let last_modified = truncate_to_seconds(rep.last_modified.min(SystemTime::now()));

    let mut headers = HeaderMap::new();
    headers.insert(header::ETAG, hv(&etag));
    headers.insert(header::LAST_MODIFIED, hv(&httpdate::fmt_http_date(last_modified)));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some(name) = &rep.filename {
        headers.insert(header::CONTENT_DISPOSITION, hv(&format!("attachment; filename={name}")));
    }

    match evaluate_preconditions(method, req_headers, &etag, last_modified) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            return finish(StatusCode::NOT_MODIFIED, headers, None, Body::Empty);
        }
        Precondition::Failed => {
            return finish(StatusCode::PRECONDITION_FAILED, headers, Some(0), Body::Empty);
        }
    }

    let range_header = req_headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let ranges = match range_header {
        Some(h) if if_range_allows(req_headers, &etag, last_modified) => range::parse(h, len),
        Some(h) if h.trim().is_empty() => RangeRequest::Whole,
        _ => RangeRequest::Whole,
    };

    let head_only = method == Method::HEAD;
    match ranges {
        RangeRequest::Whole => {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(rep.content_type));
            let body = if head_only { Body::Empty } else { Body::Plan(rep.plan.clone()) };
            finish(StatusCode::OK, headers, Some(len), body)
        }
        RangeRequest::Unsatisfiable => {
            headers.insert(header::CONTENT_RANGE, hv(&format!("bytes */{len}")));
            let msg = Bytes::from(format!("requested range not satisfiable (representation is {len} bytes)\n"));
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            let n = msg.len() as u64;
            finish(
                StatusCode::RANGE_NOT_SATISFIABLE,
                headers,
                Some(n),
                if head_only { Body::Empty } else { Body::Bytes(msg) },
            )
        }
        RangeRequest::Ranges(ranges) if ranges.len() == 1 => {
            let r = &ranges[0];
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(rep.content_type));
            headers.insert(header::CONTENT_RANGE, hv(&format!("bytes {}-{}/{len}", r.start, r.end - 1)));
            let body = if head_only { Body::Empty } else { Body::Plan(rep.plan.slice(r.start, r.end)) };
            finish(StatusCode::PARTIAL_CONTENT, headers, Some(r.end - r.start), body)
        }
        RangeRequest::Ranges(ranges) => {
            let plan = multipart(rep, &ranges);
            headers.insert(
                header::CONTENT_TYPE,
                hv(&format!("multipart/byteranges; boundary={}", boundary(rep, &ranges))),
            );
            let n = plan.len();
            finish(
                StatusCode::PARTIAL_CONTENT,
                headers,
                Some(n),
                if head_only { Body::Empty } else { Body::Plan(plan) },
            )
        }
    }
}

fn finish(status: StatusCode, mut headers: HeaderMap, len: Option<u64>, body: Body) -> Response<Body> {
    if let Some(len) = len {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).expect("header values we build are visible ASCII")
}

fn truncate_to_seconds(t: SystemTime) -> SystemTime {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

enum Precondition {
    Proceed,
    NotModified,
    Failed,
}

/// RFC 9110 §13.2.2, in its order: If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since.
fn evaluate_preconditions(method: &Method, headers: &HeaderMap, etag: &str, last_modified: SystemTime) -> Precondition {
    let get_or_head = method == Method::GET || method == Method::HEAD;
    if let Some(v) = header_str(headers, header::IF_MATCH) {
        if !etag_list_matches(v, etag, false) {
            return Precondition::Failed;
        }
    } else if let Some(since) = header_date(headers, header::IF_UNMODIFIED_SINCE)
        && last_modified > since
    {
        return Precondition::Failed;
    }
    if let Some(v) = header_str(headers, header::IF_NONE_MATCH) {
        if etag_list_matches(v, etag, true) {
            return if get_or_head { Precondition::NotModified } else { Precondition::Failed };
        }
    } else if get_or_head
        && let Some(since) = header_date(headers, header::IF_MODIFIED_SINCE)
        && last_modified <= since
    {
        return Precondition::NotModified;
    }
    Precondition::Proceed
}

/// If-Range (RFC 9110 §13.1.5): the Range applies only if the validator still matches. An entity tag
/// must match strongly; a date only if it equals Last-Modified exactly.
fn if_range_allows(headers: &HeaderMap, etag: &str, last_modified: SystemTime) -> bool {
    let Some(v) = header_str(headers, header::IF_RANGE) else { return true };
    let v = v.trim();
    if v.starts_with('"') || v.starts_with("W/") {
        return v == etag;
    }
    match httpdate::parse_http_date(v) {
        Ok(date) => date == last_modified,
        Err(_) => false,
    }
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn header_date(headers: &HeaderMap, name: header::HeaderName) -> Option<SystemTime> {
    header_str(headers, name).and_then(|v| httpdate::parse_http_date(v.trim()).ok())
}

/// Matches an If-Match / If-None-Match list. Weak comparison ignores the `W/` prefix on both sides.
fn etag_list_matches(list: &str, etag: &str, weak: bool) -> bool {
    let list = list.trim();
    if list == "*" {
        return true;
    }
    list.split(',')
        .map(str::trim)
        .any(|candidate| if weak { candidate.trim_start_matches("W/") == etag } else { candidate == etag })
}

/// Multipart boundaries are derived from the ETag and the ranges, so HEAD and GET agree on the length.
fn boundary(rep: &Representation, ranges: &[std::ops::Range<u64>]) -> String {
    let mut h = Sha256::new();
    h.update(rep.etag.as_bytes());
    for r in ranges {
        h.update(r.start.to_le_bytes());
        h.update(r.end.to_le_bytes());
    }
    format!("bootstream-{}", &hex::encode(h.finalize())[..24])
}

/// A `multipart/byteranges` body (RFC 9110 §14.6) as a plan: small in-memory part headers between
/// slices of the representation's plan.
fn multipart(rep: &Representation, ranges: &[std::ops::Range<u64>]) -> Plan {
    let b = boundary(rep, ranges);
    let len = rep.plan.len();
    let mut plans = Vec::with_capacity(ranges.len() * 2 + 1);
    for (i, r) in ranges.iter().enumerate() {
        let sep = if i == 0 { "" } else { "\r\n" };
        let head = format!(
            "{sep}--{b}\r\nContent-Type: {}\r\nContent-Range: bytes {}-{}/{len}\r\n\r\n",
            rep.content_type,
            r.start,
            r.end - 1
        );
        plans.push(Plan::from_part(std::sync::Arc::new(Part::new(head.into_bytes()))));
        plans.push(rep.plan.slice(r.start, r.end));
    }
    plans.push(Plan::from_part(std::sync::Arc::new(Part::new(format!("\r\n--{b}--\r\n").into_bytes()))));
    Plan::concat(&plans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlanBuilder;
    use std::sync::Arc;

    fn rep() -> Representation {
        let mut b = PlanBuilder::default();
        b.part(Arc::new(Part::new((0u8..100).collect::<Vec<u8>>())));
        Representation {
            plan: b.build(),
            etag: "abc".into(),
            last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            content_type: "application/octet-stream",
            filename: Some("x.iso".into()),
        }
    }

    fn get(headers: &[(&str, &str)]) -> Response<Body> {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(header::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        respond(&Method::GET, &h, &rep())
    }

    fn body(r: &Response<Body>) -> Vec<u8> {
        match r.body() {
            Body::Plan(p) => p.read_all().unwrap(),
            Body::Bytes(b) => b.to_vec(),
            Body::Chunks(c) => c.concat(),
            Body::Empty | Body::Stream(_) => vec![],
        }
    }

    #[test]
    fn whole_representation() {
        let r = get(&[]);
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()[header::CONTENT_LENGTH], "100");
        assert_eq!(r.headers()[header::ETAG], "\"abc\"");
        assert_eq!(r.headers()[header::CONTENT_DISPOSITION], "attachment; filename=x.iso");
        assert_eq!(body(&r), (0u8..100).collect::<Vec<_>>());
    }

    #[test]
    fn head_has_the_same_headers_and_no_body() {
        for range in [None, Some("bytes=1-2"), Some("bytes=1-2,5-6"), Some("bytes=500-")] {
            let mut h = HeaderMap::new();
            if let Some(r) = range {
                h.insert(header::RANGE, HeaderValue::from_str(r).unwrap());
            }
            let g = respond(&Method::GET, &h, &rep());
            let hd = respond(&Method::HEAD, &h, &rep());
            assert_eq!(g.status(), hd.status());
            assert_eq!(g.headers(), hd.headers());
            assert!(matches!(hd.body(), Body::Empty));
            assert_eq!(g.headers()[header::CONTENT_LENGTH], g.body().len().to_string().as_str());
        }
    }

    #[test]
    fn single_range() {
        let r = get(&[("range", "bytes=10-19")]);
        assert_eq!(r.status(), 206);
        assert_eq!(r.headers()[header::CONTENT_RANGE], "bytes 10-19/100");
        assert_eq!(body(&r), (10u8..20).collect::<Vec<_>>());
    }

    #[test]
    fn multiple_ranges_are_multipart() {
        let r = get(&[("range", "bytes=0-1,98-")]);
        assert_eq!(r.status(), 206);
        let ct = r.headers()[header::CONTENT_TYPE].to_str().unwrap().to_string();
        let b = ct.split("boundary=").nth(1).unwrap();
        let text = body(&r);
        let expected = [
            format!("--{b}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 0-1/100\r\n\r\n")
                .into_bytes(),
            vec![0, 1],
            format!("\r\n--{b}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 98-99/100\r\n\r\n")
                .into_bytes(),
            vec![98, 99],
            format!("\r\n--{b}--\r\n").into_bytes(),
        ]
        .concat();
        assert_eq!(text, expected);
        assert_eq!(r.headers()[header::CONTENT_LENGTH], expected.len().to_string().as_str());
    }

    #[test]
    fn unsatisfiable_and_malformed_ranges() {
        for h in ["bytes=100-", "bytes=x-y", "bytes=5-1"] {
            let r = get(&[("range", h)]);
            assert_eq!(r.status(), 416, "{h}");
            assert_eq!(r.headers()[header::CONTENT_RANGE], "bytes */100");
        }
    }

    #[test]
    fn if_range() {
        let lm = httpdate::fmt_http_date(rep().last_modified);
        assert_eq!(get(&[("range", "bytes=0-0"), ("if-range", "\"abc\"")]).status(), 206);
        assert_eq!(get(&[("range", "bytes=0-0"), ("if-range", "\"old\"")]).status(), 200);
        assert_eq!(get(&[("range", "bytes=0-0"), ("if-range", "W/\"abc\"")]).status(), 200);
        assert_eq!(get(&[("range", "bytes=0-0"), ("if-range", &lm)]).status(), 206);
        assert_eq!(get(&[("range", "bytes=0-0"), ("if-range", "Mon, 01 Jan 2001 00:00:00 GMT")]).status(), 200);
    }

    #[test]
    fn conditional_requests() {
        let lm = httpdate::fmt_http_date(rep().last_modified);
        assert_eq!(get(&[("if-none-match", "\"abc\"")]).status(), 304);
        assert_eq!(get(&[("if-none-match", "W/\"abc\", \"x\"")]).status(), 304);
        assert_eq!(get(&[("if-none-match", "\"x\"")]).status(), 200);
        assert_eq!(get(&[("if-modified-since", &lm)]).status(), 304);
        assert_eq!(get(&[("if-modified-since", "Mon, 01 Jan 2001 00:00:00 GMT")]).status(), 200);
        assert_eq!(get(&[("if-match", "\"x\"")]).status(), 412);
        assert_eq!(get(&[("if-match", "\"abc\"")]).status(), 200);
        assert_eq!(get(&[("if-unmodified-since", "Mon, 01 Jan 2001 00:00:00 GMT")]).status(), 412);
        // If-None-Match takes precedence over If-Modified-Since.
        assert_eq!(get(&[("if-none-match", "\"x\""), ("if-modified-since", &lm)]).status(), 200);
    }
}
