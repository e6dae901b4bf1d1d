//! Keep-alive connections waiting for their next request, oldest first, so that a server at its
//! connection limit can close the one idle longest to make room for a new connection.
//!
//! Without this, a full server leaves new connections in the kernel's accept queue until some
//! connection ends, which for an idle keep-alive connection is its idle timeout (75 s): a fleet whose
//! clients hold more connections than the limit (10,000 agents and their spare connections) sees
//! requests wait 30 s and more on a server that is mostly idle. nginx reuses its keep-alive
//! connections the same way when it runs out of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::keylocks::Locked as _;

/// Idle keep-alive connections closed to make room for new ones, in every server of the process.
static RECLAIMED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// How many idle keep-alive connections were closed so far to make room for new connections.
pub fn reclaimed_total() -> u64 {
    RECLAIMED_TOTAL.load(Ordering::Relaxed)
}

/// One server's idle keep-alive connections, by when they became idle.
#[derive(Default)]
pub(super) struct IdleConnections {
    next: AtomicU64,
    waiting: Mutex<BTreeMap<u64, Arc<Notify>>>,
}

impl IdleConnections {
    /// Asks the connection idle longest to close. False when no connection is idle.
    pub(super) fn close_oldest(&self) -> bool {
        let oldest = self.waiting.locked().pop_first();
        match oldest {
            Some((_, wake)) => {
                // A permit is stored if the connection is between registering and waiting.
                wake.notify_one();
                RECLAIMED_TOTAL.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.waiting.locked().len()
    }
}

/// One connection's place in [`IdleConnections`] (allocated once per connection).
pub(super) struct IdleSlot<'a> {
    list: &'a IdleConnections,
    wake: Arc<Notify>,
    /// The server chose this connection to close: it closes after the request it is serving.
    pub(super) reclaimed: bool,
}

impl<'a> IdleSlot<'a> {
    pub(super) fn new(list: &'a IdleConnections) -> IdleSlot<'a> {
        IdleSlot { list, wake: Arc::new(Notify::new()), reclaimed: false }
    }

    /// Waits for `ready` while listed as idle. None when the server asked this connection to close
    /// first; otherwise `ready`'s output. Should the server choose this connection just as its next
    /// request arrives, that request is served and [`Self::reclaimed`] says to close after it.
    pub(super) async fn wait<T>(&mut self, ready: impl Future<Output = T>) -> Option<T> {
        let seq = self.list.next.fetch_add(1, Ordering::Relaxed);
        self.list.waiting.locked().insert(seq, self.wake.clone());
        let listed = Listed { list: self.list, seq };
        let out = tokio::select! {
            biased;
            out = ready => Some(out),
            () = self.wake.notified() => None,
        };
        if out.is_some() && !listed.remove() {
            self.reclaimed = true;
        }
        out
    }
}

/// Takes the connection off the list however its wait ends (a cancelled wait too).
struct Listed<'a> {
    list: &'a IdleConnections,
    seq: u64,
}

impl Listed<'_> {
    /// False when the server had taken it off to close it.
    fn remove(&self) -> bool {
        self.list.waiting.locked().remove(&self.seq).is_some()
    }
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test]
    async fn the_connection_idle_longest_is_closed_first() {
        let list = IdleConnections::default();
        let (mut a, mut b) = (IdleSlot::new(&list), IdleSlot::new(&list));
        let a_wait = a.wait(std::future::pending::<()>());
        let b_wait = b.wait(std::future::pending::<()>());
        tokio::pin!(a_wait, b_wait);
        // Both listed, `a` first.
        assert!(poll_once(a_wait.as_mut()).is_pending());
        assert!(poll_once(b_wait.as_mut()).is_pending());
        assert_eq!(list.len(), 2);
        assert!(list.close_oldest());
        assert_eq!(a_wait.await, None, "the oldest idle connection is asked to close");
        assert!(poll_once(b_wait.as_mut()).is_pending(), "the other one goes on waiting");
        assert_eq!(list.len(), 1);
        assert!(list.close_oldest());
        assert_eq!(b_wait.await, None);
        assert!(!list.close_oldest(), "nothing is idle");
        assert_eq!(list.len(), 0);
        assert!(reclaimed_total() >= 2);
    }

    #[tokio::test]
    async fn a_request_arriving_as_it_is_chosen_is_served_then_the_connection_closes() {
        let list = IdleConnections::default();
        let mut slot = IdleSlot::new(&list);
        // Chosen between the request's arrival and the wait's end: the request wins the race
        // (`ready` is polled first) and the connection learns it must close after it.
        let ready = async {
            assert!(list.close_oldest());
        };
        assert_eq!(slot.wait(ready).await, Some(()));
        assert!(slot.reclaimed);
        assert_eq!(list.len(), 0);
    }

    #[tokio::test]
    async fn a_wait_that_ends_or_is_dropped_leaves_the_list() {
        let list = IdleConnections::default();
        let mut slot = IdleSlot::new(&list);
        assert_eq!(slot.wait(async { 7 }).await, Some(7));
        assert!(!slot.reclaimed);
        assert_eq!(list.len(), 0);
        {
            let wait = slot.wait(std::future::pending::<()>());
            tokio::pin!(wait);
            assert!(poll_once(wait.as_mut()).is_pending());
            assert_eq!(list.len(), 1);
        }
        assert_eq!(list.len(), 0, "a cancelled wait is taken off the list");
        assert!(!list.close_oldest());
    }
}
