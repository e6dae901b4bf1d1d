//! A response body as a plan: an ordered list of segments, each a byte range of an immutable base file or
//! a small immutable in-memory part.
//!
//! A plan is cheap to build, to clone and to slice (a Range request is a slice of the plan), and the
//! writers walk it without copying base-file bytes through per-request buffers: the zero-copy writer hands
//! file segments to `sendfile(2)`, in-memory parts are `Bytes` shared by every request that uses them.
//! Every plan has a digest over what its segments *are* (content hashes of files and parts, offsets and
//! lengths): equal digests mean equal bytes, which is what a strong ETag promises.

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::time::SystemTime;

/// An immutable file we serve byte ranges of, with the SHA-256 of its content.
#[derive(Debug)]
pub struct BaseFile {
    pub path: std::path::PathBuf,
    pub file: File,
    pub len: u64,
    pub sha256: [u8; 32],
}

/// A small immutable in-memory part (an Ignition archive, a kargs area...), shared by content hash.
#[derive(Debug)]
pub struct Part {
    pub bytes: Bytes,
    pub sha256: [u8; 32],
}

impl Part {
    pub fn new(bytes: impl Into<Bytes>) -> Part {
        let bytes = bytes.into();
        let sha256 = Sha256::digest(&bytes).into();
        Part { bytes, sha256 }
    }
}

#[derive(Clone, Debug)]
pub enum Segment {
    /// `len` bytes of `file` starting at `offset`.
    File { file: Arc<BaseFile>, offset: u64, len: u64 },
    /// A range of a shared part.
    Part { part: Arc<Part>, offset: usize, len: usize },
    /// Zero bytes (padding of an embed area), never materialized.
    Zeros(u64),
}

impl Segment {
    pub fn len(&self) -> u64 {
        match self {
            Segment::File { len, .. } => *len,
            Segment::Part { len, .. } => *len as u64,
            Segment::Zeros(n) => *n,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sub-range `[start, start+len)` of this segment (relative to the segment).
    fn sub(&self, start: u64, len: u64) -> Segment {
        match self {
            Segment::File { file, offset, .. } => Segment::File { file: file.clone(), offset: offset + start, len },
            Segment::Part { part, offset, .. } => {
                Segment::Part { part: part.clone(), offset: offset + start as usize, len: len as usize }
            }
            Segment::Zeros(_) => Segment::Zeros(len),
        }
    }

    /// In-memory bytes of a part segment.
    pub fn part_bytes(&self) -> Option<Bytes> {
        match self {
            Segment::Part { part, offset, len } => Some(part.bytes.slice(*offset..*offset + *len)),
            _ => None,
        }
    }
}

/// An ordered list of segments and their total length.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    segments: Arc<[Segment]>,
    len: u64,
}

impl Plan {
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// A plan of one in-memory part.
    pub fn from_part(part: Arc<Part>) -> Plan {
        let mut b = PlanBuilder::default();
        b.part(part);
        b.build()
    }

    /// The bytes `[start, end)` of this plan, as a plan. Panics if the range is outside the plan, which
    /// callers rule out by validating ranges against `len()` first.
    pub fn slice(&self, start: u64, end: u64) -> Plan {
        assert!(start <= end && end <= self.len, "slice {start}..{end} of a {}-byte plan", self.len);
        let mut out = Vec::new();
        let mut pos = 0u64;
        for seg in self.segments.iter() {
            let seg_start = pos;
            let seg_end = pos + seg.len();
            pos = seg_end;
            if seg_end <= start {
                continue;
            }
            if seg_start >= end {
                break;
            }
            let from = start.max(seg_start) - seg_start;
            let to = end.min(seg_end) - seg_start;
            out.push(seg.sub(from, to - from));
        }
        Plan { segments: out.into(), len: end - start }
    }

    /// Concatenation of plans (used for multipart/byteranges bodies).
    pub fn concat(plans: &[Plan]) -> Plan {
        let segments: Vec<Segment> = plans.iter().flat_map(|p| p.segments.iter().cloned()).collect();
        let len = plans.iter().map(|p| p.len).sum();
        Plan { segments: segments.into(), len }
    }

    /// A digest identifying the bytes of this plan: the content hashes of files and parts with the
    /// ranges taken from them. Two plans with equal digests yield equal bytes.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for seg in self.segments.iter() {
            match seg {
                Segment::File { file, offset, len } => {
                    h.update(b"F");
                    h.update(file.sha256);
                    h.update(offset.to_le_bytes());
                    h.update(len.to_le_bytes());
                }
                Segment::Part { part, offset, len } => {
                    h.update(b"P");
                    h.update(part.sha256);
                    h.update((*offset as u64).to_le_bytes());
                    h.update((*len as u64).to_le_bytes());
                }
                Segment::Zeros(n) => {
                    h.update(b"Z");
                    h.update(n.to_le_bytes());
                }
            }
        }
        h.finalize().into()
    }

    /// Reads the whole plan into memory. For tests and small plans only.
    pub fn read_all(&self) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len as usize);
        for seg in self.segments.iter() {
            read_segment(seg, &mut out)?;
        }
        Ok(out)
    }
}

/// A read of a plan's file failed: which file, and why. Functions that return [`std::io::Result`]
/// carry it in an `io::Error` of the same kind ([`FileReadError::io`]), whose text is then this one's
/// and whose source is the original error.
#[derive(Debug, thiserror::Error)]
#[error("reading {}", .path.display())]
pub struct FileReadError {
    pub path: std::path::PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl FileReadError {
    /// `source`, a failed read of `path`, as an `io::Error` of the same kind that names the file.
    pub fn io(path: &std::path::Path, source: std::io::Error) -> std::io::Error {
        std::io::Error::new(source.kind(), FileReadError { path: path.to_path_buf(), source })
    }
}

/// Appends a segment's bytes to `out` (positional reads for files). Errors if a file is shorter than
/// the plan says: the base image changed on disk.
pub fn read_segment(seg: &Segment, out: &mut Vec<u8>) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    match seg {
        Segment::File { file, offset, len } => {
            let start = out.len();
            out.resize(start + *len as usize, 0);
            file.file.read_exact_at(&mut out[start..], *offset).map_err(|e| FileReadError::io(&file.path, e))?;
        }
        Segment::Part { part, offset, len } => out.extend_from_slice(&part.bytes[*offset..*offset + *len]),
        Segment::Zeros(n) => out.resize(out.len() + *n as usize, 0),
    }
    Ok(())
}

/// Builds a plan; adjacent ranges of the same file are merged, empty segments dropped.
#[derive(Default)]
pub struct PlanBuilder {
    segments: Vec<Segment>,
    len: u64,
}

impl PlanBuilder {
    pub fn push(&mut self, seg: Segment) -> &mut Self {
        if seg.is_empty() {
            return self;
        }
        self.len += seg.len();
        if let (Some(Segment::File { file: f0, offset: o0, len: l0 }), Segment::File { file, offset, len }) =
            (self.segments.last_mut(), &seg)
            && Arc::ptr_eq(f0, file)
            && *o0 + *l0 == *offset
        {
            *l0 += len;
            return self;
        }
        if let (Some(Segment::Zeros(n0)), Segment::Zeros(n)) = (self.segments.last_mut(), &seg) {
            *n0 += n;
            return self;
        }
        self.segments.push(seg);
        self
    }
    pub fn file(&mut self, file: &Arc<BaseFile>, offset: u64, len: u64) -> &mut Self {
        self.push(Segment::File { file: file.clone(), offset, len })
    }
    pub fn part(&mut self, part: Arc<Part>) -> &mut Self {
        let len = part.bytes.len();
        self.push(Segment::Part { part, offset: 0, len })
    }
    pub fn zeros(&mut self, n: u64) -> &mut Self {
        self.push(Segment::Zeros(n))
    }
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn build(self) -> Plan {
        Plan { segments: self.segments.into(), len: self.len }
    }
}

impl Plan {
    /// The whole of `file`.
    pub fn from_file(file: &Arc<BaseFile>) -> Plan {
        let mut b = PlanBuilder::default();
        b.file(file, 0, file.len);
        b.build()
    }

    /// This plan with some byte ranges replaced: the shape of every customized ISO. `overlays` are
    /// `(offset, segments)` that must not overlap; each replaces exactly as many bytes as it holds, so
    /// the length never changes.
    pub fn overlay(&self, overlays: &mut [(u64, Vec<Segment>)]) -> Result<Plan, OverlayError> {
        overlays.sort_by_key(|(off, _)| *off);
        let mut b = PlanBuilder::default();
        let mut pos = 0u64;
        for (off, segs) in overlays.iter() {
            if *off < pos {
                return Err(OverlayError::Overlapping { offset: *off });
            }
            let len: u64 = segs.iter().map(Segment::len).sum();
            if off + len > self.len {
                return Err(OverlayError::PastTheEnd { offset: *off, len, image_len: self.len });
            }
            for seg in self.slice(pos, *off).segments.iter() {
                b.push(seg.clone());
            }
            for seg in segs {
                b.push(seg.clone());
            }
            pos = off + len;
        }
        for seg in self.slice(pos, self.len).segments.iter() {
            b.push(seg.clone());
        }
        Ok(b.build())
    }
}

/// Why overlays cannot be laid over a plan (a bug of the caller: the offsets come from the image).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverlayError {
    #[error("overlapping overlays at byte {offset}")]
    Overlapping { offset: u64 },
    #[error("overlay {offset}+{len} goes past the end of the {image_len}-byte image")]
    PastTheEnd { offset: u64, len: u64, image_len: u64 },
}

/// A file with some byte ranges replaced (see [`Plan::overlay`]).
pub fn overlay_plan(base: &Arc<BaseFile>, overlays: &mut [(u64, Vec<Segment>)]) -> Result<Plan, OverlayError> {
    Plan::from_file(base).overlay(overlays)
}

/// A static page of zeros for writing [`Segment::Zeros`] without allocating.
pub static ZEROS: [u8; 64 * 1024] = [0u8; 64 * 1024];

/// Something we serve: bytes (as a plan) and their metadata.
#[derive(Clone, Debug)]
pub struct Representation {
    pub plan: Plan,
    /// Strong entity tag, without quotes (hex of a content digest).
    pub etag: String,
    pub last_modified: SystemTime,
    pub content_type: &'static str,
    /// `filename` for Content-Disposition: attachment.
    pub filename: Option<String>,
}

impl Representation {
    pub fn quoted_etag(&self) -> String {
        format!("\"{}\"", self.etag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    fn base_file(content: &[u8]) -> Arc<BaseFile> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(content).unwrap();
        Arc::new(BaseFile {
            path: "test".into(),
            file: f,
            len: content.len() as u64,
            sha256: Sha256::digest(content).into(),
        })
    }

    fn sample_plan() -> (Plan, Vec<u8>) {
        let content: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let base = base_file(&content);
        let part = Arc::new(Part::new(b"hello, overlay".to_vec()));
        let mut overlays = vec![
            (5000u64, vec![Segment::Part { part: part.clone(), offset: 0, len: 14 }, Segment::Zeros(100)]),
            (100u64, vec![Segment::Zeros(3)]),
            (9990u64, vec![Segment::Part { part, offset: 4, len: 10 }]),
        ];
        let plan = overlay_plan(&base, &mut overlays).unwrap();
        let mut expect = content.clone();
        expect[100..103].fill(0);
        expect[5000..5014].copy_from_slice(b"hello, overlay");
        expect[5014..5114].fill(0);
        expect[9990..10000].copy_from_slice(b"o, overlay");
        (plan, expect)
    }

    #[test]
    fn overlay_plan_reads_as_expected() {
        let (plan, expect) = sample_plan();
        assert_eq!(plan.len(), 10_000);
        assert_eq!(plan.read_all().unwrap(), expect);
    }

    #[test]
    fn overlays_past_the_end_or_overlapping_are_refused() {
        let base = base_file(&[1u8; 100]);
        assert!(overlay_plan(&base, &mut [(90, vec![Segment::Zeros(11)])]).is_err());
        assert!(overlay_plan(&base, &mut [(10, vec![Segment::Zeros(5)]), (12, vec![Segment::Zeros(1)])]).is_err());
    }

    #[test]
    fn digest_depends_on_content_not_on_segmentation() {
        let (plan, _) = sample_plan();
        let (again, _) = sample_plan();
        assert_eq!(plan.digest(), again.digest());
        assert_ne!(plan.digest(), plan.slice(0, 9999).digest());
    }

    proptest! {
        #[test]
        fn any_slice_equals_the_same_slice_of_the_whole(a in 0u64..=10_000, b in 0u64..=10_000) {
            let (plan, expect) = sample_plan();
            let (start, end) = (a.min(b), a.max(b));
            let sliced = plan.slice(start, end);
            prop_assert_eq!(sliced.len(), end - start);
            prop_assert_eq!(sliced.read_all().unwrap(), &expect[start as usize..end as usize]);
        }

        #[test]
        fn slices_of_slices_compose(a in 0u64..=10_000, b in 0u64..=10_000, c in 0u64..=10_000, d in 0u64..=10_000) {
            let (plan, expect) = sample_plan();
            let (s1, e1) = (a.min(b), a.max(b));
            let outer = plan.slice(s1, e1);
            let n = e1 - s1;
            let (s2, e2) = (c.min(d) % (n + 1), c.max(d) % (n + 1));
            let (s2, e2) = (s2.min(e2), s2.max(e2));
            let inner = outer.slice(s2, e2);
            prop_assert_eq!(inner.read_all().unwrap(), &expect[(s1 + s2) as usize..(s1 + e2) as usize]);
        }
    }
}
