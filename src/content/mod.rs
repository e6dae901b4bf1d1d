//! What bootstream puts into a live image for one InfraEnv: the discovery Ignition ([`ignition`]),
//! the static-network ramdisk from NMStateConfigs ([`staticnet`]) and the ironic agent's config
//! ([`ironic`]). Built from resources; knows nothing of how the bytes are served.

pub mod ignition;
pub mod ironic;
pub mod staticnet;
