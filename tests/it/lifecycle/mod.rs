//! Hosts through their whole lifecycle, run as users run it: late binding, bare metal, faults, Kubernetes.

mod bare_metal;
mod faults;
mod kubernetes;
mod late_binding;
mod lease;
