//! The command line as a user meets it first.

mod data_dir_permissions;
mod serve_embedded_default;
