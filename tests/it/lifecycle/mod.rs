//! Hosts through their whole lifecycle, run as users run it: late binding, bare metal, faults, Kubernetes.

mod bare_metal;
mod faults;
mod kubernetes;
mod kubernetes_real_hub;
mod late_binding;
mod lease;
