//! Time as the backend sees it. Monitors compare it with host timestamps (3 minutes to disconnect,
//! 60 minutes to give up a reclaim), so tests inject a clock they can move instead of waiting.

use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};

use crate::keylocks::Locked as _;

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The system clock, truncated to whole seconds like Kubernetes timestamps.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        crate::resources::now_seconds()
    }
}

/// A clock that moves only when told to.
pub struct ManualClock(Mutex<Timestamp>);

impl ManualClock {
    pub fn new(start: Timestamp) -> ManualClock {
        ManualClock(Mutex::new(start))
    }
    pub fn advance(&self, by: SignedDuration) {
        let mut t = self.0.locked();
        *t = t.checked_add(by).expect("clock in range");
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.locked()
    }
}
