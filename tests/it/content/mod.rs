//! What goes into an InfraEnv's image (`bootstream::content`): discovery Ignition, static networking.

mod ignition;
mod ipa_conf;
mod static_network;
