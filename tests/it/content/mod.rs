//! What goes into an InfraEnv's image (`bootstream::content`): discovery Ignition, static networking.

mod ignition;
mod static_network;
