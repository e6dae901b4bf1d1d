//! What a Kubernetes hub gets: the CRDs and the manifests.

mod crds;
mod manifests;
mod real_hub;
