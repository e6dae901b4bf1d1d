//! What one request may cost the API: the size of an object it stores or answers, the nesting of
//! the YAML it sends, and where its CPU-bound work runs.
//!
//! kube-apiserver takes request bodies of up to 3 MiB and etcd stores objects of up to 1.5 MiB; a
//! patch or an apply can still build something far larger than its body (a JSON patch of 18
//! `copy` operations doubles a value 18 times). So every write is checked twice: while a patch
//! runs (see `patch::json_patch`'s budget) and once more on the object it would store, against
//! [`Limits::max_object_bytes`]. Parsing and patching run on a bounded pool of blocking threads
//! ([`cpu_bound`]), never on the async workers that answer `/ready`, the agent API and downloads.

use std::io::Write;
use std::sync::OnceLock;

use serde_json::Value;

/// Why a YAML body is refused before it is parsed (too deep, or an alias).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct YamlShapeError(pub String);

/// The largest object stored by default: etcd's request limit, which bounds objects on a hub.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 1536 << 10;

/// Deepest nesting accepted in a YAML body (flow collections and block levels together). The
/// deepest of the served kinds' schemas is about a dozen levels; JSON bodies stop at serde_json's
/// 128 and the API server's decoders at 10,000, but YAML parsing costs time quadratic in its
/// nesting, so YAML is held to far less.
pub const MAX_YAML_DEPTH: usize = 64;

/// The limits one API serves under.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest object a write may store (and a dry run answer), as its compact JSON.
    pub max_object_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_object_bytes: DEFAULT_MAX_OBJECT_BYTES }
    }
}

/// A writer that only counts, and fails once past its cap (so a count stops early).
struct Counter {
    count: usize,
    cap: usize,
}

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.count += buf.len();
        if self.count > self.cap {
            return Err(std::io::Error::other("over the cap"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The length of `v` as compact JSON, or None once it is over `cap` (counting stops there: the
/// cost is at most `cap`, whatever the value's size).
pub fn json_len_within(v: &Value, cap: usize) -> Option<usize> {
    let mut counter = Counter { count: 0, cap };
    serde_json::to_writer(&mut counter, v).ok().map(|()| counter.count)
}

/// The length of `v` as compact JSON.
pub fn json_len(v: &Value) -> usize {
    json_len_within(v, usize::MAX).unwrap_or(usize::MAX)
}

/// Checks a YAML text by a single scan, without parsing it: its nesting may not pass `max`, and
/// it may use no alias. Flow collections (`[`, `{` outside quotes and comments) and block levels
/// (a deeper indentation, and each compact `- ` or `? ` entry on a line) add up to the nesting. It
/// over-counts rather than under-counts (brackets inside a block scalar count), which only
/// matters for texts no served kind comes near.
pub fn check_yaml_depth(text: &str, max: usize) -> Result<(), YamlShapeError> {
    let too_deep = |line: usize| {
        Err(YamlShapeError(format!(
            "the YAML document nests deeper than {max} levels (line {line}); no resource is that deep"
        )))
    };
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if flow == 0 {
            while indents.last().is_some_and(|&i| i >= indent) {
                indents.pop();
            }
            indents.push(indent);
            // Compact nested entries on one line: `- - - x`, `? - x`.
            let mut rest = trimmed;
            while let Some(r) = rest.strip_prefix("- ").or_else(|| rest.strip_prefix("? ")) {
                indents.push(indent);
                rest = r.trim_start_matches(' ');
            }
        }
        let (mut single, mut double, mut escaped) = (false, false, false);
        let mut previous = ' ';
        let mut chars = trimmed.chars().peekable();
        while let Some(c) = chars.next() {
            let next = chars.peek().copied();
            if double {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => double = false,
                    _ => {}
                }
            } else if single {
                if c == '\'' {
                    single = false;
                }
            } else {
                // A quote opens a quoted scalar only where a scalar starts (inside a plain scalar
                // it is text, and must not hide the brackets after it).
                let starts_scalar = matches!(previous, ' ' | '[' | '{' | ',' | ':');
                match c {
                    '"' if starts_scalar => double = true,
                    '\'' if starts_scalar => single = true,
                    // An alias repeats what its anchor holds, and aliases of aliases multiply it
                    // (a "billion laughs" document): no applied configuration needs one.
                    '*' if starts_scalar && next.is_some_and(|n| n.is_alphanumeric() || n == '_' || n == '-') => {
                        return Err(YamlShapeError(format!(
                            "the YAML document uses an alias (line {}); aliases are not accepted, send the object expanded",
                            n + 1
                        )));
                    }
                    '#' if previous == ' ' => break,
                    '[' | '{' => flow += 1,
                    ']' | '}' => flow = flow.saturating_sub(1),
                    _ => {}
                }
            }
            if indents.len() + flow > max {
                return too_deep(n + 1);
            }
            previous = c;
        }
        if indents.len() + flow > max {
            return too_deep(n + 1);
        }
    }
    Ok(())
}

/// Threads CPU-bound request work (parsing bodies, applying patches) may use at once: all cores
/// but one, so that the async workers always have one.
fn cpu_permits() -> &'static std::sync::Arc<tokio::sync::Semaphore> {
    static PERMITS: OnceLock<std::sync::Arc<tokio::sync::Semaphore>> = OnceLock::new();
    PERMITS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        std::sync::Arc::new(tokio::sync::Semaphore::new(cores.saturating_sub(1).max(1)))
    })
}

/// Request bodies smaller than this are parsed and applied where the request is served: their
/// work is bounded (microseconds to a few milliseconds, the budgets above included), less than a
/// thread hand-off would add to every small write a controller or kubectl makes.
pub const INLINE_BODY_BYTES: usize = 16 << 10;

/// Runs `work`, for a request of `body_bytes`, on a blocking thread, at most [`cpu_permits`] at a
/// time (others wait their turn without holding a thread), so that no request body, however built,
/// keeps the async workers from answering others; a body under [`INLINE_BODY_BYTES`] is worked on
/// in place.
pub async fn cpu_bound<T: Send + 'static>(body_bytes: usize, work: impl FnOnce() -> T + Send + 'static) -> T {
    if body_bytes < INLINE_BODY_BYTES {
        return work();
    }
    // The semaphore is never closed, so acquiring it fails never. The permit goes with the work,
    // not with this future: a client that leaves drops the future, but the work runs on, and must
    // keep its place until it ends (else leaving and asking again would run any number at once).
    let permit = cpu_permits().clone().acquire_owned().await.expect("the CPU permits are never closed");
    let running = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work()
    });
    match running.await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_len_is_the_compact_length_and_stops_at_its_cap() {
        let v = json!({"a": [1, "x\"y\n", null, true, 1.5], "b": {"c": "é"}});
        assert_eq!(json_len(&v), serde_json::to_vec(&v).unwrap().len());
        assert_eq!(json_len_within(&v, 10), None);
        let big = Value::String("x".repeat(1 << 20));
        assert_eq!(json_len_within(&big, 1000), None);
    }

    #[test]
    fn yaml_depth_counts_flow_and_block_nesting() {
        assert!(check_yaml_depth("a:\n  b:\n    c: [1, {d: 2}]\n", 8).is_ok());
        let flow = format!("note: {}{}", "[".repeat(100), "]".repeat(100));
        let err = check_yaml_depth(&flow, 64).unwrap_err();
        assert!(err.0.contains("deeper than 64 levels (line 1)"), "{err}");
        let compact = format!("x:\n{}a\n", "- ".repeat(80));
        assert!(check_yaml_depth(&compact, 64).is_err());
        let block: String = (0..80).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
        assert!(check_yaml_depth(&block, 64).is_err());
        assert!(check_yaml_depth(&block, 100).is_ok());
        // Brackets inside quotes and comments are text.
        let quoted = format!("a: \"{}\" # {}\nb: '{}'\n", "[".repeat(100), "{".repeat(100), "[".repeat(100));
        assert!(check_yaml_depth(&quoted, 8).is_ok());
        // Aliases multiply what they name: refused; a `*` inside text is text.
        let laughs = "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b]\n";
        assert!(check_yaml_depth(laughs, 64).unwrap_err().0.contains("alias (line 2)"));
        assert!(check_yaml_depth("a: 2*3\nb: \"*x\"\nc: '*y'\nd: [a*b]\n", 64).is_ok());
        // A document of many shallow entries is fine, whatever its length.
        let wide: String = (0..10_000).map(|i| format!("k{i}: [1, 2, {{a: b}}]\n")).collect();
        assert!(check_yaml_depth(&wide, 8).is_ok());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cpu_bound_work_runs_off_the_async_workers() {
        let runtime_thread = std::thread::current().id();
        let worker = cpu_bound(INLINE_BODY_BYTES, move || std::thread::current().id()).await;
        assert_ne!(worker, runtime_thread);
        let inline = cpu_bound(100, move || std::thread::current().id()).await;
        assert_eq!(inline, runtime_thread, "a small body is worked on in place");
        // A caller that goes away (its client left) does not give the work's place back before the
        // work ends.
        let permits = cpu_permits().available_permits();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let caller = tokio::spawn(cpu_bound(INLINE_BODY_BYTES, move || {
            started_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        }));
        tokio::task::spawn_blocking(move || started_rx.recv().unwrap()).await.unwrap();
        caller.abort();
        let _ = caller.await;
        assert_eq!(cpu_permits().available_permits(), permits - 1, "the running work keeps its place");
        release_tx.send(()).unwrap();
        for _ in 0..500 {
            if cpu_permits().available_permits() == permits {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert_eq!(cpu_permits().available_permits(), permits);
    }
}
