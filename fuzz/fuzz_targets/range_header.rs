//! `Range` header parsing (`http::range::parse`). Input: the representation length in decimal
//! on the first line (any u64), then the header value.
#![no_main]

use bootstream::http::range::{self, MAX_RANGES, RangeRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (len, header) = match text.split_once('\n') {
        Some((len, header)) => (len.trim().parse::<u64>().unwrap_or(1 << 20), header),
        None => (1 << 20, text),
    };
    if let RangeRequest::Ranges(ranges) = range::parse(header, len) {
        assert!(!ranges.is_empty() && ranges.len() <= MAX_RANGES, "{} ranges", ranges.len());
        for r in &ranges {
            assert!(r.start < r.end && r.end <= len, "{r:?} of {len}");
        }
        if ranges.len() > 1 {
            let total = ranges.iter().try_fold(0u64, |t, r| t.checked_add(r.end - r.start));
            assert!(total.is_some_and(|t| t <= len), "ranges add up to more than {len}");
        }
    }
});
