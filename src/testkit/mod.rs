//! Test-only Kubernetes API servers: [`hub`] holds a hub cluster's objects for the Kubernetes-mode
//! tests, [`spoke`] plays an installed cluster for reclaim and node cleanup. Built only for tests
//! (the `testkit` feature), never into the release binary.

pub mod hub;
pub mod spoke;
