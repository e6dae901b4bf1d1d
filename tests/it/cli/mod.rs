//! The command line as a user meets it first.

mod serve_embedded_default;
