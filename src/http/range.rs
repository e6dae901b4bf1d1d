//! `Range` header parsing (RFC 9110 §14), for byte ranges only.

use std::ops::Range;

/// Most ranges we answer in one multipart response; more is a sign of abuse and is answered with the
/// whole representation instead (RFC 9110 allows ignoring Range).
pub const MAX_RANGES: usize = 64;

#[derive(Debug, PartialEq, Eq)]
pub enum RangeRequest {
    /// No usable Range: serve the whole representation with 200.
    Whole,
    /// Satisfiable ranges, in request order, each clamped to the representation.
    Ranges(Vec<Range<u64>>),
    /// Malformed or unsatisfiable: 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// Interprets a `Range` header value against a representation of `len` bytes.
pub fn parse(header: &str, len: u64) -> RangeRequest {
    let header = header.trim();
    let Some((unit, specs)) = header.split_once('=') else {
        return RangeRequest::Unsatisfiable;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        // Another unit: not ours to answer; the whole representation is a correct reply.
        return RangeRequest::Whole;
    }
    let mut ranges = Vec::new();
    let mut count = 0usize;
    for spec in specs.split(',') {
        let spec = spec.trim();
        if spec.is_empty() {
            continue;
        }
        count += 1;
        let Some((first, last)) = spec.split_once('-') else {
            return RangeRequest::Unsatisfiable;
        };
        let (first, last) = (first.trim(), last.trim());
        if first.is_empty() {
            // Suffix range: the last N bytes.
            let Some(n) = parse_u64(last) else { return RangeRequest::Unsatisfiable };
            if n == 0 || len == 0 {
                continue;
            }
            ranges.push(len.saturating_sub(n)..len);
        } else {
            let Some(start) = parse_u64(first) else { return RangeRequest::Unsatisfiable };
            let end = if last.is_empty() {
                len
            } else {
                let Some(last) = parse_u64(last) else { return RangeRequest::Unsatisfiable };
                if last < start {
                    return RangeRequest::Unsatisfiable;
                }
                last.saturating_add(1).min(len)
            };
            if start >= len {
                continue;
            }
            ranges.push(start..end);
        }
    }
    if count == 0 {
        return RangeRequest::Unsatisfiable;
    }
    if ranges.is_empty() {
        return RangeRequest::Unsatisfiable;
    }
    // Many or overlapping ranges that add up to more than the whole: answer with the whole, as Go's
    // ServeContent does, so a Range header cannot amplify a response.
    // Checked: each range is at most `len` bytes, so with `len` near `u64::MAX` a plain sum
    // overflows (a panic in debug builds, a wrapped small total in release builds); a total that
    // does not fit in a u64 is more than the whole.
    let total = ranges.iter().try_fold(0u64, |total, r| total.checked_add(r.end - r.start));
    if ranges.len() > MAX_RANGES || (ranges.len() > 1 && total.is_none_or(|total| total > len)) {
        return RangeRequest::Whole;
    }
    RangeRequest::Ranges(ranges)
}

fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use RangeRequest::*;

    #[test]
    fn single_ranges() {
        assert_eq!(parse("bytes=0-499", 1000), Ranges(vec![0..500]));
        assert_eq!(parse("bytes=500-", 1000), Ranges(vec![500..1000]));
        assert_eq!(parse("bytes=-200", 1000), Ranges(vec![800..1000]));
        assert_eq!(parse("bytes=-2000", 1000), Ranges(vec![0..1000]));
        assert_eq!(parse("bytes=900-5000", 1000), Ranges(vec![900..1000]));
        assert_eq!(parse("bytes= 1 - 2 ", 1000), Ranges(vec![1..3]));
    }

    #[test]
    fn multiple_ranges() {
        assert_eq!(parse("bytes=0-0, -1", 1000), Ranges(vec![0..1, 999..1000]));
        assert_eq!(parse("bytes=0-1,5000-6000,4-5", 1000), Ranges(vec![0..2, 4..6]));
        // Overlaps adding up to more than the whole: whole.
        assert_eq!(parse("bytes=0-999,0-999", 1000), Whole);
    }

    #[test]
    fn malformed_or_unsatisfiable() {
        for h in [
            "bytes=abc",
            "bytes=5-1",
            "bytes=",
            "bytes=1000-",
            "bytes=-0",
            "bytes=--1",
            "bytes=1-2-3",
            "garbage",
            "bytes=+1-2",
        ] {
            assert_eq!(parse(h, 1000), Unsatisfiable, "{h}");
        }
        assert_eq!(parse("bytes=0-", 0), Unsatisfiable);
    }

    #[test]
    fn other_units_are_ignored() {
        assert_eq!(parse("items=0-5", 1000), Whole);
    }

    /// Found by the range_header fuzz target: two whole-length ranges of a `u64::MAX`-byte
    /// representation overflowed the total (and, saturated, would have compared as "not more
    /// than the whole").
    #[test]
    fn huge_length_total_does_not_overflow() {
        assert_eq!(parse("bytes=0-,0-", u64::MAX), Whole);
        assert_eq!(parse("bytes=0-1,-2", u64::MAX), Ranges(vec![0..2, u64::MAX - 2..u64::MAX]));
    }

    #[test]
    fn too_many_ranges_give_the_whole() {
        let h = format!("bytes={}", (0..65).map(|i| format!("{i}-{i}")).collect::<Vec<_>>().join(","));
        assert_eq!(parse(&h, 1000), Whole);
    }
}
