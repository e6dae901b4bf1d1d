//! Interleaving points for the seeded simulation of the controllers (tests only; see
//! `controllers::tests::interleavings` and docs/design.md §7.6).
//!
//! A task run as a *participant* (a simulated reconcile) stops at every [`enter`] — before each call
//! into the backend or the store — and waits there until the scheduler releases it; it then runs alone
//! until its next gate. A call made outside a participant (the scheduler itself, the simulated agents)
//! passes freely. Whatever real I/O a participant does between two gates (the SQLite writer thread, an
//! HTTP request to a spoke API server), the scheduler waits for it: it chooses the next step only once
//! every participant is parked at a gate or finished ([`Gates::quiet`]), so the order of all the calls
//! that matter is the scheduler's, and the scheduler's choices come from a seed.
//!
//! A call nested in another gated call (a backend method calling another) does not stop again: a
//! participant never parks while it holds a lock of the backend.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use crate::keylocks::Locked as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Parked,
    Done,
}

struct Participant {
    state: State,
    /// Where it is parked (for the message of a simulation that does not settle).
    at: &'static str,
    go: Option<oneshot::Sender<()>>,
}

/// The participants of one simulation, and where each is.
#[derive(Default)]
pub struct Gates {
    participants: Mutex<BTreeMap<u64, Participant>>,
    next_id: Mutex<u64>,
    changed: Notify,
}

struct Current {
    gates: Arc<Gates>,
    id: u64,
    /// Gated calls this participant is inside of: it parks only at the outermost.
    depth: Cell<u32>,
}

tokio::task_local! {
    static CURRENT: Current;
}

/// Leaves the gated call: the next outermost call parks again.
pub struct Turn(bool);

impl Drop for Turn {
    fn drop(&mut self) {
        if self.0 {
            let _ = CURRENT.try_with(|c| c.depth.set(c.depth.get().saturating_sub(1)));
        }
    }
}

/// An interleaving point named `at`: a participant parks here until the scheduler releases it (unless
/// it is inside another gated call); anyone else passes. Hold the [`Turn`] for the whole call.
pub async fn enter(at: &'static str) -> Turn {
    let outer = CURRENT.try_with(|c| {
        let depth = c.depth.get();
        c.depth.set(depth + 1);
        (depth == 0).then(|| (c.gates.clone(), c.id))
    });
    match outer {
        Err(_) => Turn(false),
        Ok(None) => Turn(true),
        Ok(Some((gates, id))) => {
            let released = gates.park(id, at);
            // The scheduler never drops a parked participant's sender but by aborting the task.
            let _ = released.await;
            Turn(true)
        }
    }
}

impl Gates {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Participant>> {
        self.participants.locked()
    }

    fn park(&self, id: u64, at: &'static str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        if let Some(p) = self.lock().get_mut(&id) {
            p.state = State::Parked;
            p.at = at;
            p.go = Some(tx);
        }
        self.changed.notify_one();
        rx
    }

    /// Runs `task` as a new participant (running until its first gate); returns its id, in the
    /// order participants were created, and the task.
    pub fn spawn<T: Send + 'static>(
        self: &Arc<Gates>,
        task: impl Future<Output = T> + Send + 'static,
    ) -> (u64, tokio::task::JoinHandle<T>) {
        let id = {
            let mut next = self.next_id.locked();
            *next += 1;
            *next
        };
        self.lock().insert(id, Participant { state: State::Running, at: "start", go: None });
        struct Finished(Arc<Gates>, u64);
        impl Drop for Finished {
            fn drop(&mut self) {
                if let Some(p) = self.0.lock().get_mut(&self.1) {
                    p.state = State::Done;
                }
                self.0.changed.notify_one();
            }
        }
        let current = Current { gates: self.clone(), id, depth: Cell::new(0) };
        let finished = Finished(self.clone(), id);
        let handle = tokio::spawn(CURRENT.scope(current, async move {
            let _finished = finished;
            task.await
        }));
        (id, handle)
    }

    /// Waits until no participant runs: each is parked at a gate or done. Panics after `limit` of
    /// real time (a participant that neither reaches a gate nor finishes: blocked on something the
    /// simulation does not gate).
    pub async fn quiet(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let running: Vec<(u64, &'static str)> =
                self.lock().iter().filter(|(_, p)| p.state == State::Running).map(|(id, p)| (*id, p.at)).collect();
            if running.is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, self.changed.notified()).await.is_err() {
                panic!("participants {running:?} neither reached a gate nor finished (last gate passed named)");
            }
        }
    }

    /// The participants parked at a gate, by id, with where.
    pub fn parked(&self) -> Vec<(u64, &'static str)> {
        self.lock().iter().filter(|(_, p)| p.state == State::Parked).map(|(id, p)| (*id, p.at)).collect()
    }

    /// The participants that are done (their task has its output), forgotten here.
    pub fn take_done(&self) -> Vec<u64> {
        let mut all = self.lock();
        let done: Vec<u64> = all.iter().filter(|(_, p)| p.state == State::Done).map(|(id, _)| *id).collect();
        for id in &done {
            all.remove(id);
        }
        done
    }

    /// Lets the parked participant `id` run to its next gate.
    pub fn release(&self, id: u64) {
        let go = {
            let mut all = self.lock();
            let p = all.get_mut(&id).expect("a parked participant");
            assert_eq!(p.state, State::Parked, "participant {id} is not parked");
            p.state = State::Running;
            p.go.take()
        };
        if let Some(go) = go {
            let _ = go.send(());
        }
    }

    /// Forgets every participant (their tasks were aborted: a restart).
    pub fn clear(&self) {
        self.lock().clear();
    }
}
