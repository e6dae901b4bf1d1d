//! Images as served: real fixture ISOs, minimal ISOs, NMStateConfigs in images, variants, OS image downloads, real boots.

mod boot;
mod fixture_isos;
mod minimal_iso;
mod nmstateconfigs;
mod os_image_download;
mod variants;
