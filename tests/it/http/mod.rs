//! The HTTP server on the wire: semantics, hostile clients, limits, load, TLS.

mod hostile;
mod limits;
mod load;
mod semantics;
mod tls;
