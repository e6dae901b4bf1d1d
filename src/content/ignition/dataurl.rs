//! `data:` URLs (RFC 2397) for Ignition file contents.
//!
//! bootstream writes every embedded file as `data:,<percent-encoded bytes>`: the configs are
//! mostly text (units, scripts, PEM bundles, JSON), where percent-encoding costs a few percent
//! against base64's 33 %, and the config must fit a 256 KiB compressed archive.
//!
//! Overrides may use any form Ignition accepts, so [`decode_data_url`] follows the grammar of
//! the parser Ignition uses (vincent-petithory/dataurl) rather than RFC 2397's looser one: a
//! URL it refuses would make Ignition fail on the host, so it is better refused here.

use base64::Engine as _;
use percent_encoding::{AsciiSet, CONTROLS, percent_encode};

/// Bytes percent-encoded by [`data_url`]: everything but ASCII letters, digits and
/// `-._~/:=,@!$&'()*;`. Those are all characters Ignition's parser takes literally; `+` and
/// `?` are encoded too, since other decoders read `+` as a space and `?` as a query.
const ENCODE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'+')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// Why a `data:` URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid data URL: {0}")]
pub struct DataUrlError(&'static str);

/// Encodes `bytes` as a `data:,` URL with percent-encoding.
pub fn data_url(bytes: &[u8]) -> String {
    let mut url = String::with_capacity(6 + bytes.len() + bytes.len() / 4);
    url.push_str("data:,");
    url.extend(percent_encode(bytes, ENCODE));
    url
}

/// Decodes a `data:` URL as Ignition does.
///
/// Accepted: `data:[<type>/<subtype>][;<attr>=<value>]*[;base64],<data>`, where the data is
/// percent-encoded printable ASCII without `space <>#"{}|\^[]` and backtick, or, with
/// `;base64`, standard padded base64 (newlines allowed).
pub fn decode_data_url(url: &str) -> Result<Vec<u8>, DataUrlError> {
    let rest = url.strip_prefix("data:").ok_or(DataUrlError("it does not start with \"data:\""))?;
    let (meta, data) = rest.split_once(',').ok_or(DataUrlError("there is no ',' before the data"))?;
    let base64 = parse_meta(meta)?;
    if base64 {
        if !data.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'\n')) {
            return Err(DataUrlError("base64 data contains characters outside the base64 alphabet"));
        }
        let compact: Vec<u8> = data.bytes().filter(|&b| b != b'\n').collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map_err(|_| DataUrlError("the base64 data is malformed or not padded"))
    } else {
        if !data.bytes().all(is_url_char) {
            return Err(DataUrlError(
                "the data contains characters that must be percent-encoded (space, quotes, <>#{}|\\^[] or non-ASCII)",
            ));
        }
        unescape(data)
    }
}

/// Checks the media type and parameters; returns whether the data is base64.
fn parse_meta(meta: &str) -> Result<bool, DataUrlError> {
    let mut parts = meta.split(';');
    let media_type = parts.next().unwrap_or_default();
    if !media_type.is_empty() {
        let (kind, subtype) = media_type.split_once('/').ok_or(DataUrlError("the media type has no '/'"))?;
        let known = ["text", "image", "audio", "video", "application", "message", "multipart"]
            .iter()
            .any(|t| kind.starts_with(t));
        let extension = kind.len() > 2 && kind.get(..2).is_some_and(|p| p.eq_ignore_ascii_case("x-"));
        if !(known || extension) || !kind.chars().all(is_token_char) {
            return Err(DataUrlError("the media type is not a known type"));
        }
        if subtype.is_empty() || !subtype.chars().all(is_token_char) {
            return Err(DataUrlError("the media subtype is empty or malformed"));
        }
    }
    let params: Vec<&str> = parts.collect();
    for (i, param) in params.iter().enumerate() {
        match param.split_once('=') {
            Some((attr, value)) => {
                if attr.is_empty() || !attr.chars().all(is_token_char) {
                    return Err(DataUrlError("a parameter name is empty or malformed"));
                }
                let quoted = value.len() >= 2 && value.starts_with('"') && value.ends_with('"');
                if !quoted && (value.is_empty() || !value.chars().all(is_token_char)) {
                    return Err(DataUrlError("a parameter value is empty or malformed"));
                }
            }
            None if *param == "base64" && i + 1 == params.len() => return Ok(true),
            None => {
                return Err(DataUrlError("a parameter has no '=' (only a final \"base64\" may)"));
            }
        }
    }
    Ok(false)
}

/// RFC 2045 token characters.
fn is_token_char(c: char) -> bool {
    c.is_ascii_graphic() && !"()<>@,;:\\\"/[]?=".contains(c)
}

/// Characters Ignition's parser accepts in (non-base64) data.
fn is_url_char(b: u8) -> bool {
    b.is_ascii_graphic()
        && !matches!(b, b'<' | b'>' | b'#' | b'"' | b'{' | b'}' | b'|' | b'\\' | b'^' | b'[' | b']' | b'`')
}

/// Percent-decoding that refuses malformed escapes, like Ignition's parser.
fn unescape(data: &str) -> Result<Vec<u8>, DataUrlError> {
    let bytes = data.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(DataUrlError("a '%' is not followed by two hex digits"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let all: Vec<u8> = (0..=255).collect();
        for sample in [&b""[..], b"hello world\n", b"100% #1 ?a=b+c", b"{\"a\": [1]}", &all] {
            let url = data_url(sample);
            assert!(url.starts_with("data:,"));
            assert!(url[6..].bytes().all(is_url_char), "{url}");
            assert!(!url[6..].contains(['+', '?']), "{url}");
            assert_eq!(decode_data_url(&url).as_deref(), Ok(sample));
        }
    }

    #[test]
    fn decodes_what_ignition_decodes() {
        let ok = |url: &str, want: &[u8]| assert_eq!(decode_data_url(url).as_deref(), Ok(want), "{url}");
        ok("data:text/plain;base64,aGVscGltdHJhcHBlZGluYXN3YWdnZXJzcGVj", b"helpimtrappedinaswaggerspec");
        ok("data:;base64,YQ==", b"a");
        ok("data:;base64,YW\nJj", b"abc");
        ok("data:text/plain;charset=utf-8;base64,YQ==", b"a");
        ok("data:text/plain;charset=utf-8,a%20b", b"a b");
        ok("data:,a+b", b"a+b");
        ok("data:,", b"");
        ok("data:application/x-foo,x", b"x");
    }

    #[test]
    fn refuses_what_ignition_refuses() {
        for bad in [
            "DATA:,x",
            "data:no-comma",
            "data:;base64,YQ",
            "data:;base64,!!!!",
            "data:,a b",
            "data:,{}",
            "data:,%zz",
            "data:,%4",
            "data:bogus/type,x",
            "data:text,x",
            "data:aé/b,x",
            "data:,é",
            "data:;charset,x",
            "data:;base64;charset=x,YQ==",
            "https://example.com/",
        ] {
            assert!(decode_data_url(bad).is_err(), "{bad}");
        }
    }
}
