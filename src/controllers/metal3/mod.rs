//! The Metal3 side: the Bare Metal Agent Controller ([`bmac`]), which joins a BareMetalHost to its
//! InfraEnv's image and its Agent, and the PreprovisioningImage controller ([`ppi`]), which publishes
//! an InfraEnv's image for a host the image-based way. Both wait for an InfraEnv's image to be old
//! enough ([`cooldown_left`]), and the BMAC reads the PreprovisioningImage's `Ready` condition.
//!
//! docs/design.md §6 describes both.

use std::time::Duration;

use jiff::Timestamp;

use crate::resources::InfraEnv;

pub mod bmac;
pub mod ppi;

pub const PPI_READY_CONDITION: &str = "Ready";

/// Whether the converged flow is on when nothing says otherwise: assisted-service's
/// `ALLOW_CONVERGED_FLOW` default, and what the design assumes (metal3 4.12+ boots hosts through
/// PreprovisioningImages). `serve --converged-flow=false` turns it off.
pub const CONVERGED_FLOW_DEFAULT: bool = true;

/// How long until an InfraEnv's image is old enough to be used (spec-controllers.md §5.3, spec-controllers.md §6.1 step
/// 8); None once it is.
pub fn cooldown_left(infraenv: &InfraEnv, now: Timestamp, cooldown: Duration) -> Option<Duration> {
    let created = infraenv.status.as_ref()?.created_time.as_ref()?.0;
    let ready_at = created.checked_add(jiff::SignedDuration::try_from(cooldown).ok()?).ok()?;
    let left = now.duration_until(ready_at);
    (left.is_positive()).then(|| Duration::try_from(left).unwrap_or(cooldown))
}
