//! Byte formats of CoreOS live images, knowing nothing of InfraEnvs, hosts or HTTP: ISO 9660 and
//! El Torito ([`iso9660`]), the live ISO's embed areas ([`liveiso`], [`kargs`]), newc initrds
//! ([`initrd`]), the minimal ISO's rootfs-less layout ([`miniso`]), rewriting an ISO ([`remaster`])
//! and the small offline sample live ISO ([`sample`]).

pub mod initrd;
pub mod iso9660;
pub mod kargs;
pub mod liveiso;
pub mod miniso;
pub mod remaster;
pub mod sample;
