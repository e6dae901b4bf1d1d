//! HTTP: the server (a zero-copy HTTP/1.1 fast path for simple GET/HEAD, hyper for everything else)
//! and the semantics of serving a representation (ranges, validators, conditional requests).
//!
//! Handlers are framework-free: they take an `http::Request<Bytes>` and return an
//! `http::Response<Body>`, so the same code answers on either path.
//!
//! Why two paths, and what every connection is bounded by: docs/design.md §3.

pub mod feed;
pub mod idle;
pub mod query;
pub mod range;
pub mod respond;
pub mod server;
pub mod tls;

use bytes::Bytes;

pub use feed::Feed;

use crate::plan::Plan;

/// A response body.
#[derive(Clone, Debug, Default)]
pub enum Body {
    #[default]
    Empty,
    Bytes(Bytes),
    /// Shared pieces written one after the other: a list of stored objects goes out without being
    /// copied into one buffer the size of the whole list.
    Chunks(std::sync::Arc<[Bytes]>),
    /// Streamed by walking the plan (zero-copy for file segments on the fast path).
    Plan(Plan),
    /// Pieces produced while the response is written (a watch): sent with chunked transfer encoding
    /// as they come, until the sender is dropped, under a budget of queued bytes (see [`feed`]).
    /// Its length is unknown (counted as 0).
    Stream(Feed),
}

impl Body {
    pub fn len(&self) -> u64 {
        match self {
            Body::Empty => 0,
            Body::Bytes(b) => b.len() as u64,
            Body::Chunks(c) => c.iter().map(|b| b.len() as u64).sum(),
            Body::Plan(p) => p.len(),
            Body::Stream(_) => 0,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Response extension naming the route that answered, for metrics labels (bounded cardinality);
/// a response with one is reported to [`Handler::completed`].
#[derive(Clone, Copy, Debug)]
pub struct RouteLabel(pub &'static str);

/// What the server reports once a response has been written (or abandoned).
#[derive(Debug)]
pub struct Completion {
    pub route: &'static str,
    pub method: http::Method,
    pub status: http::StatusCode,
    /// Body bytes actually written.
    pub body_bytes: u64,
    /// Whether the whole response was written.
    pub complete: bool,
    pub elapsed: std::time::Duration,
}

/// A request body taken as a stream: uploads too large to collect in memory.
pub type UploadBody = std::pin::Pin<Box<dyn futures_util::Stream<Item = std::io::Result<Bytes>> + Send>>;

/// What the server does with a request, decided from its head alone, before any body byte is read:
/// a request that will be refused (no token, another tenant's token, a method the route does not
/// take) costs the server its head and nothing more, whatever body it announces.
#[derive(Debug)]
pub enum Admission {
    /// Collect a body of at most this many bytes (and at most the server's `max_body_bytes`) for
    /// [`Handler::handle`]; a larger one is answered 413 unread.
    Body { max_bytes: usize },
    /// Stream the body to [`Handler::handle_upload`], which bounds its size; the server bounds the
    /// time between its pieces.
    Upload,
    /// Answer with this, without reading the body.
    Refuse(http::Response<Body>),
}

/// The application behind the server.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        self: std::sync::Arc<Self>,
        req: http::Request<Bytes>,
    ) -> impl Future<Output = http::Response<Body>> + Send;

    /// Called with every request's head before its body is read (see [`Admission`]).
    fn admit(&self, _head: &http::request::Parts) -> Admission {
        Admission::Body { max_bytes: usize::MAX }
    }

    fn handle_upload(
        self: std::sync::Arc<Self>,
        _head: http::request::Parts,
        _body: UploadBody,
    ) -> impl Future<Output = http::Response<Body>> + Send {
        async { text(http::StatusCode::NOT_FOUND, "no uploads here") }
    }

    /// Called once per response the handler made (one carrying a [`RouteLabel`]: from `handle`,
    /// `handle_upload` or a refusal of `admit`) after it was written or the connection failed.
    /// The server's own answers (a body too large or too slow, a head too large) are not reported.
    fn completed(&self, _completion: Completion) {}
}

/// Builds a plain-text response (errors and small answers).
pub fn text(status: http::StatusCode, body: impl Into<String>) -> http::Response<Body> {
    let mut body: String = body.into();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header(http::header::CONTENT_LENGTH, body.len())
        .body(Body::Bytes(Bytes::from(body)))
        .expect("valid response")
}

/// Builds a JSON response.
pub fn json(status: http::StatusCode, value: &impl serde::Serialize) -> http::Response<Body> {
    let mut body = serde_json::to_vec_pretty(value).expect("serializable");
    body.push(b'\n');
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CONTENT_LENGTH, body.len())
        .body(Body::Bytes(Bytes::from(body)))
        .expect("valid response")
}

/// The application as a listener with a narrower purpose sees it: requests `allow` admits (from
/// their method, URI and headers) go to `inner`, others get 404 with `refusal`, decided from the
/// head before anything else. The plain-HTTP listener beside HTTPS is one: it serves only what
/// iPXE, which usually cannot do TLS, fetches.
pub struct Restricted<H> {
    pub inner: std::sync::Arc<H>,
    pub allow: fn(&http::Method, &http::Uri, &http::HeaderMap) -> bool,
    pub refusal: std::borrow::Cow<'static, str>,
}

impl<H: Handler> Handler for Restricted<H> {
    async fn handle(self: std::sync::Arc<Self>, req: http::Request<Bytes>) -> http::Response<Body> {
        if (self.allow)(req.method(), req.uri(), req.headers()) {
            self.inner.clone().handle(req).await
        } else {
            // Not reported to `inner` (no RouteLabel): it never saw the request.
            text(http::StatusCode::NOT_FOUND, self.refusal.clone())
        }
    }

    fn admit(&self, head: &http::request::Parts) -> Admission {
        if (self.allow)(&head.method, &head.uri, &head.headers) {
            self.inner.admit(head)
        } else {
            Admission::Refuse(text(http::StatusCode::NOT_FOUND, self.refusal.clone()))
        }
    }

    async fn handle_upload(
        self: std::sync::Arc<Self>,
        head: http::request::Parts,
        body: UploadBody,
    ) -> http::Response<Body> {
        // Only what `admit` let through comes here.
        self.inner.clone().handle_upload(head, body).await
    }

    fn completed(&self, completion: Completion) {
        self.inner.completed(completion)
    }
}
