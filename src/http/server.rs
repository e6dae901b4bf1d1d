//! The HTTP/1.1 server.
//!
//! Downloads are the hot path: thousands of BMCs and PXE clients pulling 1 GiB images. Plain requests
//! (no body or a small one with a Content-Length, no upgrade, no `Expect`) are answered by our own
//! small HTTP/1.1 reader and writer, which hands the base-image spans of a plan to `sendfile(2)` so
//! that image bytes never pass through user space (see `../shared/docs/perf-notes.md` for why hyper's
//! body model cannot do this). The agent API is the other hot path: thousands of agents polling over
//! keep-alive connections, which hold no buffer between requests on this path. Any other request —
//! a chunked or large body, an upload the handler streams, `Expect`, `Upgrade` or anything our parser
//! does not take — hands the connection, with the bytes already read, to hyper for the rest of its
//! life. Both paths call the same [`Handler`].
//!
//! The same code serves HTTPS (`ServerConfig::tls`): there the image spans are read from the page
//! cache into one buffer per download and encrypted, as nginx does without kTLS, since `sendfile(2)`
//! cannot encrypt.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Response, StatusCode, Version, header};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::idle::{IdleConnections, IdleSlot};
use super::{Admission, Body, Completion, Handler, RouteLabel};
use crate::errors::chain;
use crate::plan::{BaseFile, Segment, ZEROS};

/// Limits every connection gets, on either path (ours and hyper's).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Time allowed to receive a complete request head once it started (slowloris guard). On
    /// connections hyper serves, the wait for a keep-alive connection's next request counts too.
    pub header_timeout: Duration,
    /// Time allowed to receive a whole collected request body after its head; for a streamed
    /// upload, the longest wait for its next piece.
    pub body_timeout: Duration,
    /// Time an idle keep-alive connection is kept open.
    pub idle_timeout: Duration,
    /// Time allowed for a single write to make progress.
    pub write_timeout: Duration,
    /// Open connections at most (one more is held while it waits for a slot); past it, the
    /// connection idle longest is closed to make room, or accepting waits when none is idle.
    pub max_connections: usize,
    /// Largest request body accepted (API documents).
    pub max_body_bytes: usize,
    /// Serve HTTPS with this configuration; None serves plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
            write_timeout: Duration::from_secs(60),
            max_connections: 16_384,
            max_body_bytes: 8 << 20,
            tls: None,
        }
    }
}

const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Request bodies up to this size are read on the fast path (agent API calls, API documents); larger
/// ones go to hyper, which streams or limits them.
const MAX_FAST_BODY_BYTES: usize = 256 * 1024;
const MAX_HEADERS: usize = 64;
/// A request body is read into room for at most this much more at a time.
const BODY_READ_CHUNK: usize = 16 * 1024;
/// One sendfile call at most (as nginx's sendfile_max_chunk): keeps one fast client from starving others.
const SENDFILE_CHUNK: usize = 2 << 20;
/// In-memory parts are written in pieces of at most this size, each under the write timeout.
const WRITE_CHUNK: usize = 256 * 1024;
/// Over TLS, base-image spans are read and encrypted in pieces of this size: the buffer each TLS
/// download holds while it runs.
const TLS_FILE_CHUNK: usize = 128 * 1024;

/// A connection the server speaks HTTP/1.1 over: plain TCP, whose image spans go out with
/// `sendfile(2)`, or TLS, which must read them to encrypt them.
pub trait Connection: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The socket itself, when file bytes can go from the page cache to it directly.
    fn sendfile_socket(&self) -> Option<&TcpStream>;
    /// Waits until the peer sent something, holding no buffer meanwhile (an idle keep-alive
    /// connection costs nothing but its socket). Returns at once where bytes may already be waiting
    /// in a layer above the socket (TLS).
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send;
}

impl Connection for TcpStream {
    fn sendfile_socket(&self) -> Option<&TcpStream> {
        Some(self)
    }
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
        TcpStream::readable(self)
    }
}

impl Connection for tokio_rustls::server::TlsStream<TcpStream> {
    fn sendfile_socket(&self) -> Option<&TcpStream> {
        None
    }
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
        std::future::ready(Ok(()))
    }
}

/// Connections waiting in the kernel for `accept` at most (the kernel caps it at
/// `net.core.somaxconn`, 4096 by default). Thousands of BMCs and agents connect in bursts, while the
/// accept loop shares the runtime with every download: with tokio's default of 1,024, a burst of
/// 1,200 connects overflowed the queue and the clients caught in it waited 1–3 s for TCP to retry.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listening socket on `addr` with a [`LISTEN_BACKLOG`] queue.
pub fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    // As std and tokio's own bind: a restarted server can listen again at once.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Accepts connections until `shutdown` resolves.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    let limit = Arc::new(Semaphore::new(config.max_connections));
    let idle = Arc::new(IdleConnections::default());
    let config = Arc::new(config);
    tokio::pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
            _ = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("accept failed: {}", chain(&e));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let permit = match limit.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // Every slot is taken: the connection idle longest makes room (when one is idle),
                // rather than this one waiting for an idle one's timeout. Accepting stops meanwhile;
                // further connections wait in the kernel's queue.
                idle.close_oldest();
                tokio::select! {
                    _ = &mut shutdown => return,
                    p = limit.clone().acquire_owned() => p.expect("semaphore never closed"),
                }
            }
        };
        let handler = handler.clone();
        let config = config.clone();
        let idle = idle.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let result = match &config.tls {
                None => serve_connection(stream, handler, &config, &idle).await,
                Some(tls) => {
                    // The handshake gets the header timeout too: a client that opens a connection
                    // and never finishes it must not hold it.
                    let acceptor = tokio_rustls::TlsAcceptor::from(tls.clone());
                    match tokio::time::timeout(config.header_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(tls_stream)) => serve_connection(tls_stream, handler, &config, &idle).await,
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake did not finish in time")),
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!("connection ended: {}", chain(&e));
            }
        });
    }
}

/// Serves one connection on the fast path until it closes or needs hyper.
async fn serve_connection<S: Connection, H: Handler>(
    mut stream: S,
    handler: Arc<H>,
    config: &ServerConfig,
    idle: &IdleConnections,
) -> io::Result<()> {
    if let Some(sock) = stream.sendfile_socket() {
        let _ = sock.set_nodelay(true);
    }
    let mut buf = BytesMut::new();
    let mut first = true;
    let mut idle = IdleSlot::new(idle);
    loop {
        if buf.is_empty() {
            // Between requests a keep-alive connection holds no buffer: with thousands of idle agents
            // that is most of what the server would otherwise keep per connection.
            buf = BytesMut::new();
        }
        let head = match read_head(&mut stream, &mut buf, config, first, &mut idle).await? {
            HeadRead::Closed => return Ok(()),
            HeadRead::TooLarge => {
                let resp = super::text(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large");
                let _ = write_response(&mut stream, resp, false, false, config).await;
                linger_close(&mut stream).await;
                return Ok(());
            }
            HeadRead::Invalid => {
                // Not something our parser takes (HTTP/2 preface, odd syntax): let hyper answer it.
                return hand_to_hyper(stream, buf.freeze(), handler, config).await;
            }
            HeadRead::Head(head) => head,
        };
        first = false;
        if !head.fast_path {
            return hand_to_hyper(stream, buf.freeze(), handler, config).await;
        }
        let Head { request, len: head_len, keep_alive, body_len, .. } = *head;
        // Chosen to make room just as this request came: served, then closed.
        let keep_alive = keep_alive && !idle.reclaimed;
        let (parts, _) = request.into_parts();
        let head_only = parts.method == Method::HEAD;
        let method = parts.method.clone();
        let started = Instant::now();
        // The handler decides from the head whether a body is read at all, and how much of one.
        let mut body_unread = false;
        let (resp, keep_alive) = match handler.admit(&parts) {
            Admission::Upload => return hand_to_hyper(stream, buf.freeze(), handler, config).await,
            Admission::Refuse(resp) => {
                // Refused unread: the connection goes on only if the whole body came with the head.
                let whole = buf.len() >= head_len + body_len;
                if whole {
                    let _ = buf.split_to(head_len + body_len);
                }
                body_unread = !whole;
                (resp, keep_alive && whole)
            }
            Admission::Body { max_bytes } if body_len > max_bytes.min(config.max_body_bytes) => {
                body_unread = true;
                (body_too_large(max_bytes.min(config.max_body_bytes)), false)
            }
            Admission::Body { .. } => {
                match read_body(&mut stream, &mut buf, head_len + body_len, config).await? {
                    BodyRead::Complete => {}
                    BodyRead::Closed => return Ok(()),
                    BodyRead::Stalled => {
                        let _ = write_response(&mut stream, body_timed_out(), false, false, config).await;
                        linger_close(&mut stream).await;
                        return Ok(());
                    }
                }
                let _ = buf.split_to(head_len);
                let body = buf.split_to(body_len).freeze();
                // Boxed: the handler's future is as large as its largest route's state, and inline it
                // would be part of every connection's task, idle ones included, for their whole life.
                (Box::pin(handler.clone().handle(Request::from_parts(parts, body))).await, keep_alive)
            }
        };
        // Only what the handler answered is reported to it (see `Handler::completed`).
        let route = resp.extensions().get::<RouteLabel>().map(|r| r.0);
        let status = resp.status();
        let result = write_response(&mut stream, resp, head_only, keep_alive, config).await;
        let (body_bytes, complete) = match &result {
            Ok(n) => (*n, true),
            Err(e) => (e.written, false),
        };
        if let Some(route) = route {
            handler.completed(Completion { route, method, status, body_bytes, complete, elapsed: started.elapsed() });
        }
        if let Err(e) = result {
            return Err(e.error);
        }
        if !keep_alive {
            if body_unread {
                linger_close(&mut stream).await;
            } else {
                let _ = stream.shutdown().await;
            }
            return Ok(());
        }
    }
}

/// Most a refused client's unread bytes are drained on the way out, and for how long.
const LINGER_BYTES: usize = 1 << 20;
const LINGER_TIME: Duration = Duration::from_secs(1);

/// Ends a connection whose client may still be sending what the server will not read (a refused
/// body, a head too large): the answer is followed by a FIN, then what arrives is read and dropped
/// for a moment. Closing with unread bytes would make the kernel reset the connection, and a reset
/// can destroy the answer before the client has read it.
async fn linger_close<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    use tokio::io::AsyncReadExt;
    if stream.shutdown().await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LINGER_TIME;
    // On the heap: an array here would be part of every connection's task, lingering or not.
    let mut sink = vec![0u8; 16 * 1024];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => return,
        }
    }
}

/// 413 for a body larger than its route takes, sent without reading it.
fn body_too_large(max: usize) -> Response<Body> {
    super::text(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than the {max} bytes this route takes"),
    )
}

/// 408 for a body that did not arrive within the body timeout.
fn body_timed_out() -> Response<Body> {
    super::text(StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time")
}

struct Head {
    request: Request<Bytes>,
    /// Bytes of the head in the buffer.
    len: usize,
    keep_alive: bool,
    /// Content-Length of the body (0 without one).
    body_len: usize,
    /// Whether this path serves it: a body of at most [`MAX_FAST_BODY_BYTES`] given by Content-Length,
    /// no upgrade, no `Expect`, no Transfer-Encoding.
    fast_path: bool,
}

enum HeadRead {
    Head(Box<Head>),
    Closed,
    TooLarge,
    Invalid,
}

async fn read_head<S: Connection>(
    stream: &mut S,
    buf: &mut BytesMut,
    config: &ServerConfig,
    first: bool,
    idle: &mut IdleSlot<'_>,
) -> io::Result<HeadRead> {
    use tokio::io::AsyncReadExt;
    let mut deadline = None;
    loop {
        if !buf.is_empty() {
            match parse_head(buf) {
                Ok(Some(head)) => return Ok(HeadRead::Head(Box::new(head))),
                Ok(None) if buf.len() >= MAX_HEAD_BYTES => return Ok(HeadRead::TooLarge),
                Ok(None) => {}
                // The same limit hyper is given: more headers than that is 431 on either path.
                Err(Unparsed::TooManyHeaders) => return Ok(HeadRead::TooLarge),
                Err(Unparsed::Other) => return Ok(HeadRead::Invalid),
            }
        }
        // Waiting for a new request on an idle connection gets the idle timeout; once a request has
        // started (or for the very first one) the head must arrive within the header timeout.
        let wait = if buf.is_empty() && !first { config.idle_timeout } else { config.header_timeout };
        let deadline = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + wait);
        if buf.is_empty() && !first {
            // An idle keep-alive connection: listed, so that a full server can close it to make
            // room for a new one. Allocate only once the request arrives.
            match idle.wait(tokio::time::timeout_at(deadline, stream.readable())).await {
                None | Some(Err(_)) => return Ok(HeadRead::Closed),
                Some(Ok(r)) => r?,
            }
        } else if buf.is_empty() {
            match tokio::time::timeout_at(deadline, stream.readable()).await {
                Err(_) => return Ok(HeadRead::Closed),
                Ok(r) => r?,
            }
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        match tokio::time::timeout_at(deadline, stream.read_buf(buf)).await {
            Err(_) => return Ok(HeadRead::Closed),
            Ok(Ok(0)) => return Ok(HeadRead::Closed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
        }
    }
}

enum BodyRead {
    Complete,
    /// The client closed the connection first.
    Closed,
    /// The body did not arrive within the header timeout.
    Stalled,
}

/// Reads until `buf` holds `total` bytes (the head and its body), within the body timeout.
async fn read_body<S: Connection>(
    stream: &mut S,
    buf: &mut BytesMut,
    total: usize,
    config: &ServerConfig,
) -> io::Result<BodyRead> {
    use tokio::io::AsyncReadExt;
    if buf.len() >= total {
        return Ok(BodyRead::Complete);
    }
    let deadline = tokio::time::Instant::now() + config.body_timeout;
    while buf.len() < total {
        // Room for what may come next, not for all the head announced: a body that trickles in
        // holds what arrived, not its announced length, while it does.
        buf.reserve((total - buf.len()).min(BODY_READ_CHUNK));
        match tokio::time::timeout_at(deadline, stream.read_buf(buf)).await {
            Err(_) => return Ok(BodyRead::Stalled),
            Ok(Ok(0)) => return Ok(BodyRead::Closed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
        }
    }
    Ok(BodyRead::Complete)
}

/// Why a head is not one this path serves.
#[derive(Debug, PartialEq, Eq)]
enum Unparsed {
    /// More than [`MAX_HEADERS`] headers: refused (431), as hyper refuses them.
    TooManyHeaders,
    /// Anything else (odd syntax, a preface of another protocol): hyper's to answer.
    Other,
}

/// Parses a request head from the start of `buf`. `Ok(None)` = incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, Unparsed> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Unparsed::TooManyHeaders),
        Err(_) => return Err(Unparsed::Other),
    };
    let version = if req.version == Some(1) { Version::HTTP_11 } else { Version::HTTP_10 };
    let method = Method::from_bytes(req.method.unwrap_or("").as_bytes()).map_err(|_| Unparsed::Other)?;
    let mut builder = Request::builder().method(method.clone()).uri(req.path.unwrap_or("/")).version(version);
    let mut connection_close = version == Version::HTTP_10;
    let mut content_length: Option<u64> = None;
    let mut special = false;
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("connection") {
            let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            if v.split(',').any(|t| t.trim() == "close") {
                connection_close = true;
            }
            if v.split(',').any(|t| t.trim() == "keep-alive") && version == Version::HTTP_10 {
                connection_close = false;
            }
            if v.contains("upgrade") {
                special = true;
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            // Repeated Content-Length headers must agree (RFC 9112 §6.3); anything else is hyper's to refuse.
            let n: u64 =
                std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse().ok()).ok_or(Unparsed::Other)?;
            if content_length.is_some_and(|c| c != n) {
                return Err(Unparsed::Other);
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("upgrade")
        {
            special = true;
        }
        builder = builder.header(name, HeaderValue::from_bytes(h.value).map_err(|_| Unparsed::Other)?);
    }
    let request = builder.body(Bytes::new()).map_err(|_| Unparsed::Other)?;
    let body_len = content_length.unwrap_or(0);
    let fast_path = !special && body_len <= MAX_FAST_BODY_BYTES as u64;
    let body_len = if fast_path { body_len as usize } else { 0 };
    Ok(Some(Head { request, len, keep_alive: !connection_close, body_len, fast_path }))
}

struct WriteError {
    error: io::Error,
    written: u64,
}

/// Writes a response; returns the body bytes written.
async fn write_response<S: Connection>(
    stream: &mut S,
    resp: Response<Body>,
    head_only: bool,
    keep_alive: bool,
    config: &ServerConfig,
) -> Result<u64, WriteError> {
    let written = write_response_unflushed(stream, resp, head_only, keep_alive, config).await?;
    // TLS keeps the last records of a response until flushed; plain TCP has nothing to flush.
    match tokio::time::timeout(config.write_timeout, stream.flush()).await {
        Ok(Ok(())) => Ok(written),
        Ok(Err(error)) => Err(WriteError { error, written }),
        Err(_) => Err(WriteError { error: io::Error::new(io::ErrorKind::TimedOut, "client stopped reading"), written }),
    }
}

async fn write_response_unflushed<S: Connection>(
    stream: &mut S,
    resp: Response<Body>,
    head_only: bool,
    keep_alive: bool,
    config: &ServerConfig,
) -> Result<u64, WriteError> {
    let (parts, body) = resp.into_parts();
    let body_len = body.len();
    let no_body = head_only
        || parts.status == StatusCode::NOT_MODIFIED
        || parts.status == StatusCode::NO_CONTENT
        || parts.status.is_informational();
    let mut head = Vec::with_capacity(512);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(parts.status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in parts.headers.iter() {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    let streamed = matches!(body, Body::Stream(_)) && !no_body;
    if streamed {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    } else if !parts.headers.contains_key(header::CONTENT_LENGTH)
        && parts.status != StatusCode::NOT_MODIFIED
        && parts.status != StatusCode::NO_CONTENT
    {
        head.extend_from_slice(format!("content-length: {body_len}\r\n").as_bytes());
    }
    if !parts.headers.contains_key(header::DATE) {
        head.extend_from_slice(b"date: ");
        head.extend_from_slice(httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if !keep_alive {
        head.extend_from_slice(b"connection: close\r\n");
    }
    head.extend_from_slice(b"\r\n");

    let mut written = 0u64;
    let fail = |error: io::Error, written: u64| WriteError { error, written };
    if !no_body && body_len <= WRITE_CHUNK as u64 {
        // Small bodies go out with the head in one write.
        let small: Option<&[Bytes]> = match &body {
            Body::Bytes(b) => Some(std::slice::from_ref(b)),
            Body::Chunks(c) => Some(c),
            _ => None,
        };
        if let Some(pieces) = small {
            for piece in pieces {
                head.extend_from_slice(piece);
            }
            write_all_timed(stream, &head, config).await.map_err(|e| fail(e, 0))?;
            return Ok(body_len);
        }
    }
    // A plan's body goes out corked, head included, and is uncorked when the response ends (or
    // fails): see `Corked`.
    let _corked = match (&body, no_body) {
        (Body::Plan(_), false) => stream.sendfile_socket().and_then(|sock| Corked::new(sock.as_raw_fd())),
        _ => None,
    };
    write_all_timed(stream, &head, config).await.map_err(|e| fail(e, 0))?;
    if no_body {
        return Ok(0);
    }
    match body {
        Body::Empty => {}
        Body::Stream(feed) => {
            // Each piece is a chunk, flushed at once: a watcher waits for every event. The piece is
            // written from where it is (no copy) and leaves the feed's budget once written; a feed
            // cut for a client that does not read fails the response at once, even mid-write.
            if let Some(mut rx) = feed.take() {
                while let Some(piece) = rx.recv().await {
                    let piece = piece.map_err(|cut| fail(io::Error::new(io::ErrorKind::TimedOut, cut), written))?;
                    if piece.is_empty() {
                        continue;
                    }
                    let size = format!("{:x}\r\n", piece.len());
                    let chunk = async {
                        write_all_timed(stream, size.as_bytes(), config).await?;
                        write_all_timed(stream, &piece, config).await?;
                        write_all_timed(stream, b"\r\n", config).await?;
                        flush_timed(stream, config).await
                    };
                    tokio::select! {
                        r = chunk => r.map_err(|e| fail(e, written))?,
                        _ = rx.cut() => {
                            return Err(fail(io::Error::new(io::ErrorKind::TimedOut, super::feed::Cut), written));
                        }
                    }
                    written += piece.len() as u64;
                }
            }
            write_all_timed(stream, b"0\r\n\r\n", config).await.map_err(|e| fail(e, written))?;
        }
        Body::Bytes(b) => {
            for chunk in b.chunks(WRITE_CHUNK) {
                write_all_timed(stream, chunk, config).await.map_err(|e| fail(e, written))?;
                written += chunk.len() as u64;
            }
        }
        Body::Chunks(chunks) => {
            // Gathered into writes of up to WRITE_CHUNK: one buffer of that size per response at most.
            let mut out = Vec::with_capacity(WRITE_CHUNK.min(body_len as usize));
            for piece in chunks.iter() {
                for part in piece.chunks(WRITE_CHUNK) {
                    if out.len() + part.len() > WRITE_CHUNK {
                        write_all_timed(stream, &out, config).await.map_err(|e| fail(e, written))?;
                        written += out.len() as u64;
                        out.clear();
                    }
                    out.extend_from_slice(part);
                }
            }
            if !out.is_empty() {
                write_all_timed(stream, &out, config).await.map_err(|e| fail(e, written))?;
                written += out.len() as u64;
            }
        }
        Body::Plan(plan) => {
            let mut file_buf = Vec::new();
            for seg in plan.segments() {
                match seg {
                    Segment::File { file, offset, len } => {
                        let sent = match stream.sendfile_socket() {
                            Some(sock) => send_file(sock, file, *offset, *len, config, &mut written).await,
                            None => copy_file(stream, file, *offset, *len, config, &mut file_buf, &mut written).await,
                        };
                        sent.map_err(|e| fail(e, written))?;
                    }
                    Segment::Part { .. } => {
                        let bytes = seg.part_bytes().expect("part segment");
                        for chunk in bytes.chunks(WRITE_CHUNK) {
                            write_all_timed(stream, chunk, config).await.map_err(|e| fail(e, written))?;
                            written += chunk.len() as u64;
                        }
                    }
                    Segment::Zeros(n) => {
                        let mut left = *n;
                        while left > 0 {
                            let k = left.min(ZEROS.len() as u64) as usize;
                            write_all_timed(stream, &ZEROS[..k], config).await.map_err(|e| fail(e, written))?;
                            written += k as u64;
                            left -= k as u64;
                        }
                    }
                }
            }
        }
    }
    Ok(written)
}

/// `TCP_CORK` on a socket until dropped (nginx's `tcp_nopush`). Each `sendfile` call ends with the
/// part of a segment its bytes did not fill, and with `TCP_NODELAY` that part went out at once, as
/// a segment of its own that the client acknowledged on its own. A fast reader drains the socket
/// between calls, so that was thousands of extra segments per GB. Corked, only full segments leave
/// until the response ends; uncorking then sends what is left.
struct Corked(std::os::fd::RawFd);

impl Corked {
    fn new(sock: std::os::fd::RawFd) -> Option<Corked> {
        set_cork(sock, true).then_some(Corked(sock))
    }
}

impl Drop for Corked {
    fn drop(&mut self) {
        set_cork(self.0, false);
    }
}

fn set_cork(sock: std::os::fd::RawFd, on: bool) -> bool {
    let value = libc::c_int::from(on);
    // SAFETY: `sock` is an open socket for the guard's lifetime; the option value is a valid c_int.
    unsafe {
        libc::setsockopt(
            sock,
            libc::IPPROTO_TCP,
            libc::TCP_CORK,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

async fn write_all_timed<S: Connection>(stream: &mut S, data: &[u8], config: &ServerConfig) -> io::Result<()> {
    match tokio::time::timeout(config.write_timeout, stream.write_all(data)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "client stopped reading")),
    }
}

async fn flush_timed<S: Connection>(stream: &mut S, config: &ServerConfig) -> io::Result<()> {
    match tokio::time::timeout(config.write_timeout, stream.flush()).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "client stopped reading")),
    }
}

/// Copies `len` bytes of `file` at `offset` to the socket with `sendfile(2)`: page cache to socket,
/// no user-space copy. A short file (truncated on disk under us) aborts the response rather than
/// sending fewer bytes than Content-Length promised.
async fn send_file(
    stream: &TcpStream,
    file: &BaseFile,
    mut offset: u64,
    len: u64,
    config: &ServerConfig,
    written: &mut u64,
) -> io::Result<()> {
    let sock = stream.as_raw_fd();
    let fd = file.file.as_raw_fd();
    let end = offset + len;
    let mut since_yield = 0usize;
    while offset < end {
        let want = ((end - offset) as usize).min(SENDFILE_CHUNK);
        match tokio::time::timeout(config.write_timeout, stream.writable()).await {
            Ok(r) => r?,
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "client stopped reading")),
        }
        let mut sent = 0;
        let res = stream.try_io(Interest::WRITABLE, || {
            let mut off = offset as libc::off_t;
            // SAFETY: both descriptors are open for the duration of the call; `off` is a valid pointer.
            let n = unsafe { libc::sendfile(sock, fd, &mut off, want) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            sent = n as usize;
            // A short write means the socket's buffer is full, unless the file ended (truncated
            // under us: the next call returns 0 and aborts). Said as WouldBlock, it makes tokio
            // clear the socket's readiness, so the next call waits until the kernel reports room
            // (half the buffer free), as tokio's own writes and nginx do. Otherwise the next call
            // went out as soon as one segment's room came back: one segment per sendfile, with
            // its syscall and page-cache lookup, while a slow reader drains the socket.
            if sent > 0 && sent < want && !file_ends_by(file, offset + sent as u64) {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(sent)
            }
        });
        match res {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{} ended at byte {offset}: base image changed on disk", file.path.display()),
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && sent > 0 => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        offset += sent as u64;
        *written += sent as u64;
        since_yield += sent;
        if since_yield >= 4 * SENDFILE_CHUNK {
            since_yield = 0;
            tokio::task::yield_now().await;
        }
    }
    Ok(())
}

/// Whether `file` is no longer than `offset` bytes now (a base image truncated under a download).
fn file_ends_by(file: &BaseFile, offset: u64) -> bool {
    file.file.metadata().map(|m| m.len() <= offset).unwrap_or(true)
}

/// Copies `len` bytes of `file` at `offset` to a stream that must see them (TLS encrypts them): read
/// on the blocking pool, where a page-cache miss may wait for the disk, in [`TLS_FILE_CHUNK`] pieces
/// through one buffer. As with `sendfile`, a short file aborts the response.
async fn copy_file<S: Connection>(
    stream: &mut S,
    file: &Arc<BaseFile>,
    mut offset: u64,
    len: u64,
    config: &ServerConfig,
    buf: &mut Vec<u8>,
    written: &mut u64,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let end = offset + len;
    while offset < end {
        let want = ((end - offset) as usize).min(TLS_FILE_CHUNK);
        let mut chunk = std::mem::take(buf);
        chunk.resize(want, 0);
        let f = file.clone();
        let (chunk, read) = tokio::task::spawn_blocking(move || {
            let r = f.file.read_exact_at(&mut chunk, offset);
            (chunk, r)
        })
        .await
        .map_err(io::Error::other)?;
        if let Err(e) = read {
            return Err(io::Error::new(
                e.kind(),
                format!("{} at byte {offset}: {e} (base image changed on disk?)", file.path.display()),
            ));
        }
        write_all_timed(stream, &chunk, config).await?;
        offset += want as u64;
        *written += want as u64;
        *buf = chunk;
    }
    Ok(())
}

/// Serves the rest of a connection with hyper, replaying the bytes already read. hyper is given the
/// same head limits as the fast path; the body, idle and write deadlines it does not keep itself
/// are kept by [`hyper_request`] and [`Deadlines`].
async fn hand_to_hyper<S: Connection, H: Handler>(
    stream: S,
    prefix: Bytes,
    handler: Arc<H>,
    config: &ServerConfig,
) -> io::Result<()> {
    let io = hyper_util::rt::TokioIo::new(Deadlines::new(Rewind { prefix, inner: stream }, config));
    let limits = Arc::new(config.clone());
    // The streamed body being written, if any: when its feed is cut (a client that does not read),
    // the connection ends at once, with what hyper buffered of it, rather than at the write timeout.
    let (streaming, mut streamed) = tokio::sync::watch::channel::<Option<super::feed::CutSignal>>(None);
    let streaming = Arc::new(streaming);
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let (handler, limits, streaming) = (handler.clone(), limits.clone(), streaming.clone());
        async move { Ok::<_, std::convert::Infallible>(hyper_request(handler, req, &limits, &streaming).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .max_headers(MAX_HEADERS)
        .max_header_size(MAX_HEAD_BYTES);
    // Not shut down by hyper: a connection hyper ends (a response that closes it, as a 408 for a
    // body that did not arrive in time) is lingered on like the fast path's, so that what the
    // client is still sending does not make the kernel reset the connection under the answer.
    let connection = builder.serve_connection(io, service).without_shutdown();
    let cut = async move {
        loop {
            let signal = streamed.borrow_and_update().clone();
            match signal {
                Some(signal) => tokio::select! {
                    _ = signal.cut() => return,
                    changed = streamed.changed() => if changed.is_err() { std::future::pending::<()>().await },
                },
                None => {
                    if streamed.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    };
    tokio::select! {
        r = connection => {
            let mut io = r.map_err(io::Error::other)?.io.into_inner();
            linger_close(&mut io).await;
            Ok(())
        }
        _ = cut => Err(io::Error::new(io::ErrorKind::TimedOut, super::feed::Cut)),
    }
}

type HyperBody = http_body_util::combinators::BoxBody<Bytes, io::Error>;

/// Makes hyper close the connection after this response: its request body was not read (whole).
fn closing(mut resp: Response<Body>) -> Response<Body> {
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// The body a request announces with Content-Length, if it does.
fn declared_length(head: &http::request::Parts) -> Option<u64> {
    head.headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// An upload's pieces, each of which must arrive within `timeout` of the one before.
fn upload_stream(body: hyper::body::Incoming, timeout: Duration) -> super::UploadBody {
    use futures_util::StreamExt;
    let pieces = http_body_util::BodyStream::new(body).filter_map(|frame| async move {
        match frame {
            Ok(frame) => frame.into_data().ok().map(Ok),
            Err(e) => Some(Err(io::Error::other(e))),
        }
    });
    let timed = futures_util::stream::unfold(Some(Box::pin(pieces)), move |state| async move {
        let mut pieces = state?;
        match tokio::time::timeout(timeout, pieces.next()).await {
            Ok(Some(piece)) => Some((piece, Some(pieces))),
            Ok(None) => None,
            Err(_) => Some((
                Err(io::Error::new(io::ErrorKind::TimedOut, "the upload stalled: no data for the body timeout")),
                None,
            )),
        }
    });
    Box::pin(timed)
}

async fn hyper_request<H: Handler>(
    handler: Arc<H>,
    req: Request<hyper::body::Incoming>,
    config: &ServerConfig,
    streaming: &tokio::sync::watch::Sender<Option<super::feed::CutSignal>>,
) -> Response<HyperBody> {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    let resp = match handler.admit(&parts) {
        Admission::Refuse(resp) => closing(resp),
        Admission::Upload => {
            let resp = handler.clone().handle_upload(parts, upload_stream(body, config.body_timeout)).await;
            // A refused or failed upload may have left part of its body unread.
            if resp.status().is_success() { resp } else { closing(resp) }
        }
        Admission::Body { max_bytes } => {
            let max = max_bytes.min(config.max_body_bytes);
            if declared_length(&parts).is_some_and(|n| n > max as u64) {
                closing(body_too_large(max))
            } else {
                let collect = http_body_util::Limited::new(body, max).collect();
                match tokio::time::timeout(config.body_timeout, collect).await {
                    Ok(Ok(c)) => handler.clone().handle(Request::from_parts(parts, c.to_bytes())).await,
                    Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
                        closing(body_too_large(max))
                    }
                    Ok(Err(e)) => closing(super::text(StatusCode::BAD_REQUEST, format!("request body: {e}"))),
                    Err(_) => closing(body_timed_out()),
                }
            }
        }
    };
    if let Some(&RouteLabel(route)) = resp.extensions().get::<RouteLabel>() {
        handler.completed(Completion {
            route,
            method: method.clone(),
            status: resp.status(),
            body_bytes: if method == Method::HEAD { 0 } else { resp.body().len() },
            complete: true,
            elapsed: started.elapsed(),
        });
    }
    let (mut parts, body) = resp.into_parts();
    // hyper drops the response head once it is written; what the handler attached to the response
    // (a download's place in the limit) must live until the body is written, so it goes with the body.
    let held = std::mem::take(&mut parts.extensions);
    let body: HyperBody = match body {
        Body::Empty => http_body_util::Empty::new().map_err(|never| match never {}).boxed(),
        Body::Bytes(b) => http_body_util::Full::new(b).map_err(|never| match never {}).boxed(),
        Body::Chunks(chunks) if method != Method::HEAD => {
            let frames: Vec<_> = chunks.iter().map(|b| Ok(hyper::body::Frame::data(b.clone()))).collect();
            http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed()
        }
        Body::Chunks(_) => http_body_util::Empty::new().map_err(|never| match never {}).boxed(),
        Body::Plan(plan) if method != Method::HEAD => plan_body(plan),
        Body::Plan(_) => http_body_util::Empty::new().map_err(|never| match never {}).boxed(),
        Body::Stream(feed) if method != Method::HEAD => match feed.take() {
            Some(mut rx) => {
                // Each piece stays in its feed's budget until hyper drops it, once sent; a cut feed
                // ends the connection (see `hand_to_hyper`).
                streaming.send_replace(Some(rx.cut_signal()));
                let pieces = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
                http_body_util::StreamBody::new(futures_util::StreamExt::map(pieces, |piece| match piece {
                    Ok(piece) => Ok(hyper::body::Frame::data(piece.into_bytes())),
                    Err(cut) => Err(io::Error::new(io::ErrorKind::TimedOut, cut)),
                }))
                .boxed()
            }
            None => http_body_util::Empty::new().map_err(|never| match never {}).boxed(),
        },
        Body::Stream(_) => http_body_util::Empty::new().map_err(|never| match never {}).boxed(),
    };
    Response::from_parts(parts, HoldingBody { inner: body, _held: held }.boxed())
}

/// A body that keeps response extensions alive until hyper drops it, after its last byte or when the
/// client leaves.
struct HoldingBody {
    inner: HyperBody,
    _held: http::Extensions,
}

impl http_body::Body for HoldingBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, io::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A plan as a hyper body for connections hyper serves: file spans are read in 256 KiB pieces on the
/// blocking pool. (The fast path, which serves downloads, never comes here.)
fn plan_body(plan: crate::plan::Plan) -> HyperBody {
    let segments: Vec<Segment> = plan.segments().to_vec();
    let stream = futures_util::stream::unfold((segments, 0usize, 0u64), |(segments, i, done)| async move {
        let seg = segments.get(i)?.clone();
        let seg_len = seg.len();
        let take = match &seg {
            Segment::File { .. } => (seg_len - done).min(WRITE_CHUNK as u64),
            _ => seg_len - done,
        };
        let piece = match &seg {
            Segment::File { file, offset, .. } => {
                let file = file.clone();
                let at = offset + done;
                tokio::task::spawn_blocking(move || {
                    let mut out = Vec::with_capacity(take as usize);
                    crate::plan::read_segment(&Segment::File { file, offset: at, len: take }, &mut out)
                        .map(|_| Bytes::from(out))
                })
                .await
                .unwrap_or_else(|e| Err(io::Error::other(e)))
            }
            Segment::Part { .. } => Ok(seg.part_bytes().expect("part").slice(done as usize..(done + take) as usize)),
            Segment::Zeros(_) => Ok(Bytes::from(vec![0u8; take as usize])),
        };
        let next = if done + take >= seg_len { (segments, i + 1, 0) } else { (segments, i, done + take) };
        Some((piece.map(hyper::body::Frame::data), next))
    });
    http_body_util::StreamBody::new(stream).boxed()
}

/// A connection served by hyper, with the deadlines hyper does not keep: a write that makes no
/// progress for `write_timeout` fails, as on the fast path (a reader that stops reading an image
/// must not hold its download's place), and a read fails after waiting `idle_timeout` with no
/// byte moving either way. Written bytes count as the connection moving: hyper also polls reads
/// while it writes a response, to see the client leave, and a long download is not idle.
struct Deadlines<S> {
    inner: S,
    idle_timeout: Duration,
    write_timeout: Duration,
    /// Since when a read has been waiting (none while bytes move).
    read_waiting: Option<tokio::time::Instant>,
    /// Since when a write (or flush, or shutdown) has been waiting.
    write_waiting: Option<tokio::time::Instant>,
    read_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    write_timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Deadlines<S> {
    fn new(inner: S, config: &ServerConfig) -> Deadlines<S> {
        Deadlines {
            inner,
            idle_timeout: config.idle_timeout,
            write_timeout: config.write_timeout,
            read_waiting: None,
            write_waiting: None,
            read_timer: None,
            write_timer: None,
        }
    }
}

/// A side of the connection still waits (its poll was Pending): Pending while the wait, which
/// started at `waiting` (now, if it just did), has lasted less than `limit`, with `timer` set to
/// wake the task when it will have; then a `TimedOut` error saying `why`.
fn still_waiting<T>(
    waiting: &mut Option<tokio::time::Instant>,
    timer: &mut Option<Pin<Box<tokio::time::Sleep>>>,
    limit: Duration,
    cx: &mut Context<'_>,
    why: &'static str,
) -> Poll<io::Result<T>> {
    let deadline = *waiting.get_or_insert_with(tokio::time::Instant::now) + limit;
    let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
    if timer.deadline() != deadline {
        timer.as_mut().reset(deadline);
    }
    match timer.as_mut().poll(cx) {
        Poll::Ready(()) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why))),
        Poll::Pending => Poll::Pending,
    }
}

impl<S: AsyncWrite + Unpin> Deadlines<S> {
    /// Runs one write-side poll under the write deadline.
    fn write_side<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut S>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll(Pin::new(&mut self.inner), cx) {
            Poll::Ready(r) => {
                self.write_waiting = None;
                // The connection is moving: a read waiting meanwhile starts over.
                if self.read_waiting.is_some() {
                    self.read_waiting = Some(tokio::time::Instant::now());
                }
                Poll::Ready(r)
            }
            Poll::Pending => still_waiting(
                &mut self.write_waiting,
                &mut self.write_timer,
                self.write_timeout,
                cx,
                "client stopped reading",
            ),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Deadlines<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.read_waiting = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                still_waiting(&mut this.read_waiting, &mut this.read_timer, this.idle_timeout, cx, "connection idle")
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Deadlines<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.write_side(cx, |s, cx| s.poll_write(cx, buf))
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.write_side(cx, |s, cx| s.poll_flush(cx))
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.write_side(cx, |s, cx| s.poll_shutdown(cx))
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write_side(cx, |s, cx| s.poll_write_vectored(cx, bufs))
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A stream that first yields bytes already read from it.
struct Rewind<S> {
    prefix: Bytes,
    inner: S,
}

impl<S: Connection> AsyncRead for Rewind<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: Connection> AsyncWrite for Rewind<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers with the length of the request body.
    struct BodyLength;

    impl Handler for BodyLength {
        async fn handle(self: Arc<Self>, req: Request<Bytes>) -> Response<Body> {
            super::super::text(StatusCode::OK, req.body().len().to_string())
        }
    }

    #[tokio::test]
    async fn a_body_that_stalls_gets_408_and_a_whole_one_its_answer() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = ServerConfig { body_timeout: Duration::from_millis(300), ..Default::default() };
        tokio::spawn(serve(listener, Arc::new(BodyLength), config, std::future::pending()));

        let mut whole = TcpStream::connect(addr).await.unwrap();
        whole.write_all(b"POST / HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nabcde").await.unwrap();
        let mut answer = String::new();
        whole.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("\r\n\r\n5\n"), "{answer}");

        let mut stalled = TcpStream::connect(addr).await.unwrap();
        stalled.write_all(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab").await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), stalled.read_to_string(&mut answer)).await.unwrap().unwrap();
        assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer}");
        assert!(answer.contains("connection: close\r\n"), "{answer}");
    }

    /// Reads one `Content-Length` answer off a keep-alive connection.
    async fn read_answer(stream: &mut TcpStream) -> String {
        use tokio::io::AsyncReadExt;
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "closed before an answer");
            got.push(byte[0]);
        }
        let head = String::from_utf8(got).unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(|n| n.trim().parse().unwrap()))
            .unwrap();
        let mut body = vec![0u8; len];
        stream.read_exact(&mut body).await.unwrap();
        head + &String::from_utf8(body).unwrap()
    }

    /// A server at its connection limit closes the connection idle longest for a new one, instead
    /// of leaving the new one in the accept queue until an idle connection times out (here a
    /// minute; 75 s by default): with 10,000 agents and their spare connections, requests waited
    /// 30 s and more on a server that was mostly idle.
    #[tokio::test]
    async fn a_full_server_closes_its_oldest_idle_connection_for_a_new_one() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = ServerConfig { max_connections: 2, idle_timeout: Duration::from_secs(60), ..Default::default() };
        tokio::spawn(serve(listener, Arc::new(BodyLength), config, std::future::pending()));
        let request = b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nab";

        // Two keep-alive connections, each idle after a request; `older` went idle first.
        let mut older = TcpStream::connect(addr).await.unwrap();
        older.write_all(request).await.unwrap();
        assert!(read_answer(&mut older).await.ends_with("\r\n\r\n2\n"));
        let mut newer = TcpStream::connect(addr).await.unwrap();
        newer.write_all(request).await.unwrap();
        assert!(read_answer(&mut newer).await.ends_with("\r\n\r\n2\n"));

        // A third connection is answered at once.
        let mut third = TcpStream::connect(addr).await.unwrap();
        third.write_all(request).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut third)).await;
        assert!(answer.expect("the new connection waited for an idle one's timeout").ends_with("\r\n\r\n2\n"));

        // The one idle longest was closed for it; the other still serves.
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), older.read_to_end(&mut rest)).await;
        assert!(closed.is_ok() && rest.is_empty(), "the oldest idle connection was not closed: {rest:?}");
        newer.write_all(request).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut newer)).await;
        assert!(answer.expect("the newer idle connection was closed too").ends_with("\r\n\r\n2\n"));
    }

    /// What the tests below serve: `/big` answers 64 MiB (more than the sockets buffer); `/locked`
    /// refuses without a `Key` header and takes bodies of at most 1 KiB; anything else answers with
    /// the length of its body.
    struct Guarded;

    impl Handler for Guarded {
        async fn handle(self: Arc<Self>, req: Request<Bytes>) -> Response<Body> {
            let mut resp = if req.uri().path() == "/big" {
                Response::new(Body::Bytes(Bytes::from(vec![b'x'; 64 << 20])))
            } else {
                super::super::text(StatusCode::OK, req.body().len().to_string())
            };
            resp.extensions_mut().insert(RouteLabel("test"));
            resp
        }

        fn admit(&self, head: &http::request::Parts) -> Admission {
            if head.uri.path() != "/locked" {
                return Admission::Body { max_bytes: usize::MAX };
            }
            match head.headers.get("key") {
                None => Admission::Refuse(super::super::text(StatusCode::UNAUTHORIZED, "no key")),
                Some(_) => Admission::Body { max_bytes: 1024 },
            }
        }
    }

    /// A server with short timeouts (header 400 ms, body 300 ms, idle 1 s, write 500 ms).
    async fn guarded_server() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = ServerConfig {
            header_timeout: Duration::from_millis(400),
            body_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_millis(500),
            ..Default::default()
        };
        tokio::spawn(serve(listener, Arc::new(Guarded), config, std::future::pending()));
        addr
    }

    /// How a test request reaches a path: as the fast path takes it, or with a chunked body, which
    /// hands the connection to hyper.
    #[derive(Clone, Copy, Debug)]
    enum Path {
        Fast,
        Hyper,
    }

    /// A request head for `path` announcing a body of `len` bytes, on the server path `via`.
    fn head(via: Path, method: &str, path: &str, extra: &str, len: usize) -> String {
        match via {
            Path::Fast => format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len}\r\n\r\n"),
            Path::Hyper => format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}Transfer-Encoding: chunked\r\n\r\n"),
        }
    }

    /// A whole request for `path` with an empty body, on the server path `via`.
    fn bodiless(via: Path, method: &str, path: &str) -> String {
        match via {
            Path::Fast => head(via, method, path, "", 0),
            Path::Hyper => format!("{}0\r\n\r\n", head(via, method, path, "", 0)),
        }
    }

    /// Reads what the server sends until it closes the connection (or `limit` passes: a panic).
    async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> String {
        use tokio::io::AsyncReadExt;
        let mut out = Vec::new();
        tokio::time::timeout(limit, s.read_to_end(&mut out)).await.expect("the server kept the connection open").ok();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn a_refused_request_is_answered_before_its_body_on_both_paths() {
        let addr = guarded_server().await;
        for via in [Path::Fast, Path::Hyper] {
            // A large body is announced and never sent: the answer must not wait for it.
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(head(via, "POST", "/locked", "", 200_000).as_bytes()).await.unwrap();
            let started = Instant::now();
            let answer = read_until_closed(&mut s, Duration::from_secs(5)).await;
            assert!(answer.starts_with("HTTP/1.1 401"), "{via:?}: {answer}");
            assert!(started.elapsed() < Duration::from_millis(250), "{via:?}: answered after {:?}", started.elapsed());
        }
    }

    #[tokio::test]
    async fn a_body_over_the_routes_limit_is_413_unread_on_both_paths() {
        let addr = guarded_server().await;
        for via in [Path::Fast, Path::Hyper] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let mut req = head(via, "POST", "/locked", "Key: k\r\n", 5000).into_bytes();
            match via {
                Path::Fast => req.extend_from_slice(&[b'a'; 2000]),
                Path::Hyper => req.extend_from_slice(format!("7d0\r\n{}\r\n", "a".repeat(2000)).as_bytes()),
            }
            s.write_all(&req).await.unwrap();
            let answer = read_until_closed(&mut s, Duration::from_secs(5)).await;
            assert!(answer.starts_with("HTTP/1.1 413"), "{via:?}: {answer}");
        }
    }

    #[tokio::test]
    async fn a_body_that_trickles_gets_408_at_the_body_timeout_on_both_paths() {
        let addr = guarded_server().await;
        for via in [Path::Fast, Path::Hyper] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(head(via, "POST", "/", "", 1_000_000).as_bytes()).await.unwrap();
            let started = Instant::now();
            // A byte every 50 ms: always moving, never done.
            let trickle = async {
                loop {
                    let piece: &[u8] = match via {
                        Path::Fast => b"a",
                        Path::Hyper => b"1\r\na\r\n",
                    };
                    if s.write_all(piece).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(3), trickle).await;
            let waited = started.elapsed();
            let answer = read_until_closed(&mut s, Duration::from_secs(2)).await;
            assert!(answer.starts_with("HTTP/1.1 408"), "{via:?}: {answer}");
            assert!(waited < Duration::from_millis(1500), "{via:?}: the trickle went on for {waited:?}");
        }
    }

    #[tokio::test]
    async fn a_connection_ended_with_a_408_lingers_instead_of_resetting_on_both_paths() {
        use tokio::io::AsyncReadExt;
        let addr = guarded_server().await;
        for via in [Path::Fast, Path::Hyper] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            // A body the fast path reads (under 256 KiB), or a chunked one, which hyper reads.
            s.write_all(head(via, "POST", "/", "", 100_000).as_bytes()).await.unwrap();
            // Past the body timeout the server has answered 408 and ended its side.
            tokio::time::sleep(Duration::from_millis(700)).await;
            // A client that has not read the answer yet is still sending: the server drains it for
            // a moment rather than resetting the connection under its answer.
            let piece: &[u8] = match via {
                Path::Fast => b"aaaa",
                Path::Hyper => b"4\r\naaaa\r\n",
            };
            let mut sent = Ok(());
            for _ in 0..5 {
                sent = s.write_all(piece).await;
                if sent.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            let mut answer = Vec::new();
            let mut buf = [0u8; 4096];
            let end = loop {
                match tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await {
                    Ok(Ok(0)) => break Ok(()),
                    Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
                    Ok(Err(e)) => break Err(e),
                    Err(_) => panic!("{via:?}: the connection was never ended"),
                }
            };
            assert!(answer.starts_with(b"HTTP/1.1 408"), "{via:?}: {}", String::from_utf8_lossy(&answer));
            assert!(sent.is_ok(), "{via:?}: the server reset the connection while the client sent: {sent:?}");
            assert!(end.is_ok(), "{via:?}: the connection ended with {end:?}, not a FIN");
        }
    }

    #[tokio::test]
    async fn a_head_that_trickles_is_cut_off_at_the_header_timeout_on_both_paths() {
        let addr = guarded_server().await;
        for via in [Path::Fast, Path::Hyper] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            if let Path::Hyper = via {
                // A chunked request first: the next head is hyper's to read.
                s.write_all(bodiless(Path::Hyper, "POST", "/").as_bytes()).await.unwrap();
            }
            let started = Instant::now();
            // A byte every 50 ms: the head always moving, never done.
            let trickle = async {
                for b in b"GET / HTTP/1.1\r\nHost: x\r\nX-Padding: ".iter().chain(std::iter::repeat(&b'a')) {
                    if s.write_all(&[*b]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(3), trickle).await;
            let held = started.elapsed();
            let got = read_until_closed(&mut s, Duration::from_secs(2)).await;
            assert!(held < Duration::from_millis(1500), "{via:?}: a trickling head was held for {held:?}");
            if let Path::Hyper = via {
                assert!(got.starts_with("HTTP/1.1 200"), "{via:?}: {got}");
            }
        }
    }

    #[tokio::test]
    async fn heads_over_the_limits_get_431_on_both_paths() {
        let addr = guarded_server().await;
        let many: String = (0..70).map(|i| format!("X-H{i}: v\r\n")).collect();
        let long = format!("X-Long: {}\r\n", "v".repeat(20_000));
        for extra in [many, long] {
            // Fast path: the first request on a connection.
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET / HTTP/1.1\r\nHost: x\r\n{extra}\r\n").as_bytes()).await.unwrap();
            let answer = read_until_closed(&mut s, Duration::from_secs(2)).await;
            assert!(answer.starts_with("HTTP/1.1 431"), "fast path: {answer:.200}");
            // Hyper: a chunked request moves the connection there; the next head is hyper's to read.
            let mut s = TcpStream::connect(addr).await.unwrap();
            let first = bodiless(Path::Hyper, "POST", "/");
            s.write_all(format!("{first}GET / HTTP/1.1\r\nHost: x\r\n{extra}\r\n").as_bytes()).await.unwrap();
            let answer = read_until_closed(&mut s, Duration::from_secs(2)).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer:.200}");
            assert!(answer.contains("HTTP/1.1 431"), "hyper: {answer:.300}");
        }
    }

    #[tokio::test]
    async fn a_reader_that_stops_is_cut_off_at_the_write_timeout_on_both_paths() {
        let addr = guarded_server().await;
        for via in [Path::Fast, Path::Hyper] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(bodiless(via, "GET", "/big").as_bytes()).await.unwrap();
            // Nothing is read for a while: the server's writes stop making progress.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let got = read_until_closed(&mut s, Duration::from_secs(5)).await;
            assert!(got.starts_with("HTTP/1.1 200"), "{via:?}");
            assert!(got.len() < 64 << 20, "{via:?}: the whole body came, the writer never gave up");
        }
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_on_both_paths() {
        let addr = guarded_server().await;
        for via in [Path::Fast, Path::Hyper] {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(bodiless(via, "POST", "/").as_bytes()).await.unwrap();
            let started = Instant::now();
            let got = read_until_closed(&mut s, Duration::from_secs(5)).await;
            assert!(got.starts_with("HTTP/1.1 200"), "{via:?}: {got}");
            // The fast path keeps an idle connection for the idle timeout; hyper for its header
            // timeout (its wait for a next head).
            let (least, most) = match via {
                Path::Fast => (Duration::from_millis(900), Duration::from_millis(2000)),
                Path::Hyper => (Duration::from_millis(300), Duration::from_millis(1500)),
            };
            let held = started.elapsed();
            assert!(held >= least && held < most, "{via:?}: closed after {held:?}");
        }
    }

    /// `TCP_INFO`'s count of data segments the socket has sent, and whether it is corked.
    fn data_segments_and_cork(sock: &TcpStream) -> (u32, bool) {
        let fd = sock.as_raw_fd();
        // SAFETY: `fd` is an open TCP socket; each buffer is as large as the length passed with it.
        unsafe {
            let mut info: libc::tcp_info = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
            assert_eq!(libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&raw mut info).cast(), &mut len), 0);
            let mut cork: libc::c_int = 0;
            let mut cork_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            assert_eq!(
                libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CORK, (&raw mut cork).cast(), &mut cork_len),
                0
            );
            (info.tcpi_data_segs_out, cork != 0)
        }
    }

    #[tokio::test]
    async fn a_plan_leaves_in_full_segments_and_the_socket_uncorked() {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base");
        std::fs::write(&path, vec![7u8; 4000]).unwrap();
        let file = Arc::new(crate::plan::BaseFile {
            file: std::fs::File::open(&path).unwrap(),
            path,
            len: 4000,
            sha256: [0; 32],
        });
        // File, part, file: with TCP_NODELAY alone each piece would leave as a segment of its own.
        let mut plan = crate::plan::PlanBuilder::default();
        plan.file(&file, 0, 1000).part(Arc::new(crate::plan::Part::new(vec![1u8; 1000]))).file(&file, 2000, 1000);
        let plan = plan.build();

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        server.set_nodelay(true).unwrap();
        for round in 0..2 {
            let (segments_before, _) = data_segments_and_cork(&server);
            let response = Response::new(Body::Plan(plan.clone()));
            let written = write_response(&mut server, response, false, true, &ServerConfig::default()).await;
            assert_eq!(written.ok(), Some(3000));
            let (segments_after, corked) = data_segments_and_cork(&server);
            assert!(!corked, "round {round}: the socket is still corked after the response");
            assert_eq!(segments_after - segments_before, 1, "round {round}: head and body in one segment");
            let mut got = vec![0u8; 0];
            while !got.ends_with(&[7u8; 1000]) || got.len() < 3000 {
                let mut buf = [0u8; 8192];
                let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf)).await.unwrap().unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            let body = &got[got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
            assert_eq!(body.len(), 3000);
            assert!(body[..1000].iter().all(|&b| b == 7) && body[1000..2000].iter().all(|&b| b == 1));
        }
    }

    /// Every connection's task holds its serving future for the connection's whole life, idle
    /// keep-alive time included: that future must not hold the handler's state (boxed while a
    /// request runs) or buffers (on the heap, only while used). Ten thousand idle agents cost ten
    /// thousand of these.
    #[tokio::test]
    async fn a_connections_task_is_small() {
        /// A handler with 16 KiB of state across an await, as a deep route's future has.
        struct Deep;
        impl Handler for Deep {
            async fn handle(self: Arc<Self>, _req: Request<Bytes>) -> Response<Body> {
                let state = [7u8; 16 * 1024];
                tokio::task::yield_now().await;
                Response::new(Body::Bytes(Bytes::copy_from_slice(&state[..std::hint::black_box(1)])))
            }
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let config = ServerConfig::default();
        let idle = IdleConnections::default();
        let serving = serve_connection(stream, Arc::new(Deep), &config, &idle);
        let size = std::mem::size_of_val(&serving);
        assert!(size <= 4096, "a connection's future is {size} bytes");
    }

    #[test]
    fn parses_heads() {
        let h = parse_head(b"GET /x?y=1 HTTP/1.1\r\nHost: a\r\n\r\nrest").unwrap().unwrap();
        assert_eq!(h.request.uri(), "/x?y=1");
        assert!(h.keep_alive && h.fast_path);
        assert_eq!(h.len, 32);
        assert!(parse_head(b"GET /x HTTP/1.1\r\nHost: a\r\n").unwrap().is_none());
        let h = parse_head(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!h.keep_alive);
        let h = parse_head(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap().unwrap();
        assert!(!h.keep_alive);
        let h = parse_head(b"PUT / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc").unwrap().unwrap();
        assert!(h.fast_path);
        assert_eq!(h.body_len, 3);
        let big = format!("PUT / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", MAX_FAST_BODY_BYTES + 1);
        assert!(!parse_head(big.as_bytes()).unwrap().unwrap().fast_path);
        let h = parse_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap().unwrap();
        assert!(!h.fast_path);
        assert!(parse_head(b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n").is_err());
        assert!(parse_head(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n").is_err());
        let h = parse_head(b"GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n").unwrap().unwrap();
        assert!(!h.fast_path);
        assert!(parse_head(b"\x16\x03\x01 garbage\r\n\r\n").is_err());
    }
}
