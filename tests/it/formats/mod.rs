//! Byte formats (`bootstream::formats`) against coreos-installer and xorriso.

mod iso9660;
mod miniso;
mod remaster;
mod sample_iso;
