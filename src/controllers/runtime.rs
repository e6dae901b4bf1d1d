//! The controller runtime, in the manner of kube-runtime's: a [`Reconciler`] is run by workers over a
//! [`WorkQueue`] of keys (namespace, name).
//!
//! - The queue de-duplicates: a key is queued at most once, and never reconciled by two workers at
//!   once; a key pushed while it is being reconciled runs again after.
//! - Delayed requeues (those a reconcile asks for, and retries of failed ones) wait in one timer
//!   structure per queue, at most one per key: the earliest wins, and a key queued to run now has
//!   none (the reconcile that follows decides anew).
//! - A failed reconcile is retried after what [`Reconciler::error_policy`] says: by default an
//!   exponential [`Backoff`] per key, which a successful reconcile resets.
//! - [`WorkQueue::enqueue_and_wait`] queues a key and answers with the outcome of the first reconcile
//!   of it that starts afterwards (for a caller that must see its change reconciled).
//! - [`finalizer`] is the finalizer protocol over the [`Store`]: added before any work, and on
//!   deletion the cleanup runs, then the finalizer goes.
//! - Counters per controller go to a [`ControllerMetrics`] that whoever starts the controllers creates
//!   and hands to `/metrics` too.
//!
//! The queue's state changes are synchronous and take the time as an argument, so that a test can
//! drive them without the async runtime (`sim`): which queued key runs next is chosen by a seeded
//! RNG there, reconciles interleave in an order the RNG chooses, and time is virtual. `sim::Controllers`
//! does the same for reconciles that do real I/O, parked at the gates of `pool::gate` (docs/design.md
//! §7.6).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::keylocks::Locked as _;
use crate::store::{Object, Store, StoreError};

/// What a controller reconciles: (namespace, name).
pub type Key = (String, String);

/// What the runtime should do next with a key, once its reconcile succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing until something changes.
    Done,
    /// Reconcile again after this long (at once for zero).
    RequeueAfter(Duration),
}

/// What a waiter of [`WorkQueue::enqueue_and_wait`] learns: the action of the reconcile, or its error.
pub type Outcome = Result<Action, ReconcileError>;

/// Why a reconcile did not succeed, as every waiter of it learns: the reconciler's error (shared
/// among the waiters), or a panic.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Failed(Arc<dyn std::error::Error + Send + Sync>),
    #[error("the reconcile panicked")]
    Panicked,
}

/// Outcomes are compared by what they say (the tests' traces of runs compare them).
impl PartialEq for ReconcileError {
    fn eq(&self, other: &ReconcileError) -> bool {
        crate::errors::chain(self).to_string() == crate::errors::chain(other).to_string()
    }
}

/// Exponential backoff: `first` after the first failure in a row, doubling at each further one, at
/// most `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// What [`Reconciler::error_policy`] uses unless a controller says otherwise: 1 s, 2 s, 4 s, ...
    /// up to 5 minutes.
    pub const DEFAULT: Backoff = Backoff { first: Duration::from_secs(1), cap: Duration::from_secs(300) };

    /// The wait after the `attempts`-th failure in a row (1 for the first).
    pub fn delay(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(31);
        self.first.saturating_mul(1 << doublings).min(self.cap)
    }
}

/// A controller's reconcile, and what to do when it fails.
pub trait Reconciler: Send + Sync + 'static {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Brings the object `key` names (and the world it stands for) to what it asks for.
    fn reconcile(&self, key: &Key) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// When to retry after `error`, the `attempts`-th failure of `key` in a row: by default
    /// [`Backoff::DEFAULT`]. A successful reconcile resets the count.
    fn error_policy(&self, key: &Key, error: &Self::Error, attempts: u32) -> Action {
        let _ = (key, error);
        Action::RequeueAfter(Backoff::DEFAULT.delay(attempts))
    }
}

/// Keys waiting to be reconciled and keys waiting for their time, for one controller.
#[derive(Default)]
pub struct WorkQueue {
    state: Mutex<State>,
    /// A key was queued: a worker may take it.
    ready: Notify,
    /// A requeue earlier than all others was set: the timer loop sleeps less.
    timers_changed: Notify,
}

impl std::fmt::Debug for WorkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue").field("pending", &self.pending()).finish_non_exhaustive()
    }
}

type Waiters = Vec<oneshot::Sender<Outcome>>;

#[derive(Default)]
struct State {
    /// Keys to reconcile now, in order; each once (`queued`).
    queue: VecDeque<Key>,
    queued: BTreeSet<Key>,
    /// Keys being reconciled.
    active: BTreeSet<Key>,
    /// Active keys pushed again meanwhile: queued when their reconcile ends.
    dirty: BTreeSet<Key>,
    /// Delayed requeues by time (then by the order they were set), at most one per key (`due`).
    timers: BTreeMap<(Instant, u64), Key>,
    due: HashMap<Key, (Instant, u64)>,
    timers_set: u64,
    /// Failed reconciles in a row, per key.
    failures: HashMap<Key, u32>,
    /// Waiters for the next reconcile of a key that has not started yet.
    waiting: HashMap<Key, Waiters>,
    /// Waiters for the reconcile of a key that is running.
    running: HashMap<Key, Waiters>,
    /// No runtime runs this queue (any more): nobody would answer a waiter.
    stopped: bool,
}

impl State {
    /// Queues `key` to run now (or again after its running reconcile); a key someone waits for goes
    /// first. Its delayed requeue, if any, is no longer needed. Returns whether a key was added to the
    /// queue (a worker should be woken).
    fn enqueue(&mut self, key: Key) -> bool {
        self.cancel_timer(&key);
        let urgent = self.waiting.contains_key(&key);
        if self.active.contains(&key) {
            self.dirty.insert(key);
            return false;
        }
        if !self.queued.insert(key.clone()) {
            if urgent && self.queue.front() != Some(&key) {
                self.queue.retain(|k| *k != key);
                self.queue.push_front(key);
            }
            return false;
        }
        if urgent {
            self.queue.push_front(key);
        } else {
            self.queue.push_back(key);
        }
        true
    }

    fn cancel_timer(&mut self, key: &Key) {
        if let Some(at) = self.due.remove(key) {
            self.timers.remove(&at);
        }
    }

    /// Sets `key` to be queued at `at`, unless it is queued already or has an earlier requeue. Returns
    /// whether this is now the earliest of all requeues.
    fn schedule(&mut self, key: Key, at: Instant) -> bool {
        if self.queued.contains(&key) {
            return false;
        }
        if let Some(&(set, _)) = self.due.get(&key) {
            if set <= at {
                return false;
            }
            self.cancel_timer(&key);
        }
        let entry = (at, self.timers_set);
        self.timers_set += 1;
        self.timers.insert(entry, key.clone());
        self.due.insert(key, entry);
        self.timers.first_key_value().is_some_and(|(first, _)| *first == entry)
    }
}

impl WorkQueue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.locked()
    }

    /// Queues `key` to be reconciled: once however often it is pushed before a worker takes it, and
    /// again after the running reconcile if one is running.
    pub fn push(&self, key: Key) {
        if self.lock().enqueue(key) {
            self.ready.notify_one();
        }
    }

    /// Queues `key` (ahead of keys nobody waits for) and answers with the outcome of the first
    /// reconcile of it that starts after this call; None if the runtime stopped before that.
    pub fn enqueue_and_wait(&self, key: Key) -> impl Future<Output = Option<Outcome>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let wake = {
            let mut s = self.lock();
            if s.stopped {
                false
            } else {
                s.waiting.entry(key.clone()).or_default().push(tx);
                s.enqueue(key)
            }
        };
        if wake {
            self.ready.notify_one();
        }
        async move { rx.await.ok() }
    }

    /// Keys queued or being reconciled (for tests and metrics).
    pub fn pending(&self) -> usize {
        let s = self.lock();
        s.queue.len() + s.active.len()
    }

    /// Takes every queued key out, in order (for tests of what a change queues).
    #[cfg(test)]
    pub fn drain(&self) -> Vec<Key> {
        let mut s = self.lock();
        s.queued.clear();
        s.queue.drain(..).collect()
    }

    /// When `key`'s delayed requeue is due, if it has one.
    pub fn requeue_at(&self, key: &Key) -> Option<Instant> {
        self.lock().due.get(key).map(|(at, _)| *at)
    }

    /// Takes a queued key to reconcile, the one at the index `pick` chooses among the `n` queued (the
    /// runtime takes the first): it is active until [`WorkQueue::finish`].
    fn try_next(&self, pick: impl FnOnce(usize) -> usize) -> Option<Key> {
        let mut s = self.lock();
        let n = s.queue.len();
        if n == 0 {
            return None;
        }
        let key = s.queue.remove(pick(n).min(n - 1))?;
        s.queued.remove(&key);
        s.active.insert(key.clone());
        if let Some(waiters) = s.waiting.remove(&key) {
            s.running.entry(key.clone()).or_default().extend(waiters);
        }
        let more = !s.queue.is_empty();
        drop(s);
        if more {
            // Another worker may take the next.
            self.ready.notify_one();
        }
        Some(key)
    }

    async fn next(&self) -> Key {
        loop {
            let notified = self.ready.notified();
            if let Some(key) = self.try_next(|_| 0) {
                return key;
            }
            notified.await;
        }
    }

    /// Counts a failed reconcile of `key`; returns how many failed in a row.
    fn failed(&self, key: &Key) -> u32 {
        let mut s = self.lock();
        let n = s.failures.entry(key.clone()).or_default();
        *n += 1;
        *n
    }

    /// The end of a reconcile of `key`: its waiters learn `outcome`, and the key runs again as `next`
    /// says (at once if it was pushed meanwhile).
    fn finish(&self, key: &Key, outcome: Outcome, next: Action, now: Instant) {
        let (wake, earliest, waiters) = {
            let mut s = self.lock();
            s.active.remove(key);
            if outcome.is_ok() {
                s.failures.remove(key);
            }
            let waiters = s.running.remove(key).unwrap_or_default();
            let (mut wake, mut earliest) = (false, false);
            if s.dirty.remove(key) {
                wake = s.enqueue(key.clone());
            } else {
                match next {
                    Action::Done => {}
                    Action::RequeueAfter(d) if d.is_zero() => wake = s.enqueue(key.clone()),
                    Action::RequeueAfter(d) => {
                        // Too far to represent is never.
                        if let Some(at) = now.checked_add(d) {
                            earliest = s.schedule(key.clone(), at);
                        }
                    }
                }
            }
            (wake, earliest, waiters)
        };
        for w in waiters {
            let _ = w.send(outcome.clone());
        }
        if wake {
            self.ready.notify_one();
        }
        if earliest {
            self.timers_changed.notify_one();
        }
    }

    /// Queues the keys whose requeue is due at `now`; returns when the next one is.
    fn fire_due(&self, now: Instant) -> Option<Instant> {
        let (woken, next) = {
            let mut s = self.lock();
            let mut woken = 0;
            while let Some(entry) = s.timers.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let key = entry.remove();
                s.due.remove(&key);
                woken += usize::from(s.enqueue(key));
            }
            (woken, s.timers.first_key_value().map(|((at, _), _)| *at))
        };
        for _ in 0..woken {
            self.ready.notify_one();
        }
        next
    }

    /// Queues keys as their requeues come due, forever.
    async fn run_timers(&self) {
        loop {
            let changed = self.timers_changed.notified();
            match self.fire_due(Instant::now()) {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    fn started(&self) {
        self.lock().stopped = false;
    }

    /// The runtime stopped: nobody answers waiters, and keys it was reconciling are queued again (for a
    /// runtime that may start over this queue).
    fn stopped(&self) {
        let mut s = self.lock();
        s.stopped = true;
        s.waiting.clear();
        s.running.clear();
        for key in std::mem::take(&mut s.active) {
            s.dirty.remove(&key);
            s.enqueue(key);
        }
    }
}

/// The end of a reconcile of `key` that gave `result`: failures counted, the error policy asked, the
/// waiters told, the next run set. Returns what the waiters were told.
fn settle<R: Reconciler>(
    name: &str,
    queue: &WorkQueue,
    reconciler: &R,
    key: &Key,
    result: Result<Action, R::Error>,
    now: Instant,
) -> Outcome {
    let (outcome, next) = match result {
        Ok(action) => (Ok(action), action),
        Err(e) => {
            let attempts = queue.failed(key);
            let next = reconciler.error_policy(key, &e, attempts);
            tracing::warn!(
                controller = name,
                namespace = %key.0,
                name = %key.1,
                attempts,
                retry = ?next,
                "reconcile failed: {}",
                crate::errors::chain(&e)
            );
            (Err(ReconcileError::Failed(Arc::new(e))), next)
        }
    };
    queue.finish(key, outcome.clone(), next, now);
    outcome
}

/// Runs `workers` workers reconciling the keys of `queue` with `reconciler`, and the queue's timers,
/// until the future is dropped. Its counters are registered in `metrics` as `name` meanwhile.
pub async fn run<R: Reconciler>(
    name: &'static str,
    queue: Arc<WorkQueue>,
    reconciler: Arc<R>,
    workers: usize,
    metrics: &ControllerMetrics,
) {
    let stats = metrics.register(name, &queue);
    queue.started();
    struct Stop(Arc<WorkQueue>, Arc<ControllerStats>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.1.running.store(false, Relaxed);
            self.0.stopped();
        }
    }
    let _stop = Stop(queue.clone(), stats.clone());
    // Dropped (and aborted) before `_stop` marks the queue stopped.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        let (queue, reconciler, stats) = (queue.clone(), reconciler.clone(), stats.clone());
        tasks.spawn(async move {
            loop {
                let key = queue.next().await;
                let started = std::time::Instant::now();
                // A reconcile that panics is a failed one: its key must not stay active for ever.
                let result = AssertUnwindSafe(reconciler.reconcile(&key)).catch_unwind().await;
                stats.record(started.elapsed(), matches!(result, Ok(Ok(_))));
                match result {
                    Ok(result) => {
                        let _ = settle(name, &queue, &*reconciler, &key, result, Instant::now());
                    }
                    Err(_) => {
                        let attempts = queue.failed(&key);
                        let next = Action::RequeueAfter(Backoff::DEFAULT.delay(attempts));
                        tracing::error!(controller = name, namespace = %key.0, name = %key.1, "reconcile panicked");
                        queue.finish(&key, Err(ReconcileError::Panicked), next, Instant::now());
                    }
                }
            }
        });
    }
    let workers = async { while tasks.join_next().await.is_some() {} };
    tokio::select! {
        _ = queue.run_timers() => {}
        _ = workers => {}
    }
}

/// The controllers' counters, for `/metrics`: created by whoever starts the controllers, handed to each
/// and to the metrics endpoint.
#[derive(Debug, Default)]
pub struct ControllerMetrics {
    controllers: Mutex<Vec<Arc<ControllerStats>>>,
    feed_resyncs: AtomicU64,
}

impl ControllerMetrics {
    /// Counters for a controller `name` that runs over `queue`, listed while it runs.
    fn register(&self, name: &'static str, queue: &Arc<WorkQueue>) -> Arc<ControllerStats> {
        let stats = Arc::new(ControllerStats {
            name,
            queue: queue.clone(),
            running: true.into(),
            reconciles: Default::default(),
            errors: Default::default(),
            reconcile_micros: Default::default(),
        });
        let mut all = self.controllers.locked();
        // Controllers that stopped are forgotten.
        all.retain(|c| c.running.load(Relaxed));
        all.push(stats.clone());
        stats
    }

    /// The controllers running.
    pub fn controllers(&self) -> Vec<Arc<ControllerStats>> {
        let all = self.controllers.locked();
        all.iter().filter(|c| c.running.load(Relaxed)).cloned().collect()
    }

    /// Times a controller's change feed fell behind and the controller re-listed everything.
    pub fn feed_resyncs(&self) -> u64 {
        self.feed_resyncs.load(Relaxed)
    }

    /// A change feed dropped `missed` events: the controller re-lists its objects, which at fleet
    /// scale is a burst of work worth knowing about.
    pub fn fell_behind(&self, feed: &str, missed: u64) {
        self.feed_resyncs.fetch_add(1, Relaxed);
        tracing::warn!(feed, missed, "change feed fell behind; re-listing every object");
    }
}

/// A running controller's counters (controller-runtime publishes the same): its queue depth, how many
/// reconciles it ran, and how long they took.
#[derive(Debug)]
pub struct ControllerStats {
    pub name: &'static str,
    queue: Arc<WorkQueue>,
    running: std::sync::atomic::AtomicBool,
    pub reconciles: AtomicU64,
    pub errors: AtomicU64,
    pub reconcile_micros: AtomicU64,
}

impl ControllerStats {
    /// Keys queued or being reconciled.
    pub fn depth(&self) -> usize {
        self.queue.pending()
    }

    fn record(&self, took: Duration, ok: bool) {
        self.reconciles.fetch_add(1, Relaxed);
        self.reconcile_micros.fetch_add(took.as_micros() as u64, Relaxed);
        if !ok {
            self.errors.fetch_add(1, Relaxed);
        }
    }
}

/// Whether `meta` lists the finalizer `name`.
pub fn has_finalizer(meta: &crate::resources::ObjectMeta, name: &str) -> bool {
    meta.finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == name))
}

/// Adds the finalizer `name` to `meta`; returns whether it was missing.
pub fn add_finalizer(meta: &mut crate::resources::ObjectMeta, name: &str) -> bool {
    let finalizers = meta.finalizers.get_or_insert_default();
    if finalizers.iter().any(|x| x == name) {
        return false;
    }
    finalizers.push(name.to_string());
    true
}

/// Removes the finalizer `name` from `meta`; returns whether it was there.
pub fn remove_finalizer(meta: &mut crate::resources::ObjectMeta, name: &str) -> bool {
    let Some(finalizers) = meta.finalizers.as_mut() else { return false };
    let before = finalizers.len();
    finalizers.retain(|x| x != name);
    finalizers.len() != before
}

/// What [`finalizer`] asks of a reconcile.
#[derive(Debug)]
pub enum FinalizerEvent<K> {
    /// The object is live and holds the finalizer: do the work.
    Apply(K),
    /// The object is being deleted and still holds the finalizer: clean up. [`Action::Done`] says
    /// the cleanup is complete (the finalizer goes, and the object with it if it was the last);
    /// [`Action::RequeueAfter`] that it is not yet, and the finalizer stays.
    Cleanup(K),
}

/// What [`finalizer`] does after adding the finalizer to a live object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAdded {
    /// Goes on with [`FinalizerEvent::Apply`] in the same reconcile, with the object as written.
    Apply,
    /// Ends the reconcile, asking to run again at once.
    Requeue,
}

/// The finalizer protocol, as kube-runtime's `finalizer`: a live object gets the finalizer `name`
/// (written to the store) before `reconcile` does any work on it; an object being deleted that holds
/// it is cleaned up by `reconcile`, then the finalizer is removed. An object being deleted without
/// it is none of this controller's business any more ([`Action::Done`]). Losing a write to someone
/// else's (a conflict) asks to run again at once.
pub async fn finalizer<S, K, E, F, Fut>(
    store: &S,
    name: &str,
    on_added: OnAdded,
    mut obj: K,
    reconcile: F,
) -> Result<Action, E>
where
    S: Store,
    K: Object,
    E: From<StoreError>,
    F: FnOnce(FinalizerEvent<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
{
    if obj.meta().deletion_timestamp.is_some() {
        if !has_finalizer(obj.meta(), name) {
            return Ok(Action::Done);
        }
        match reconcile(FinalizerEvent::Cleanup(obj.clone())).await? {
            Action::Done => {}
            not_yet => return Ok(not_yet),
        }
        remove_finalizer(obj.meta_mut(), name);
        return match store.update(&obj).await {
            Ok(_) => Ok(Action::Done),
            // Gone already (the last finalizer went).
            Err(e) if e.is_not_found() => Ok(Action::Done),
            Err(e) if e.is_conflict() => Ok(Action::RequeueAfter(Duration::ZERO)),
            Err(e) => Err(e.into()),
        };
    }
    if add_finalizer(obj.meta_mut(), name) {
        match store.update(&obj).await {
            // The spec and status are those read (the write checked the resourceVersion).
            Ok(written) => *obj.meta_mut() = written.meta().clone(),
            Err(e) if e.is_conflict() => return Ok(Action::RequeueAfter(Duration::ZERO)),
            Err(e) => return Err(e.into()),
        }
        if on_added == OnAdded::Requeue {
            return Ok(Action::RequeueAfter(Duration::ZERO));
        }
    }
    reconcile(FinalizerEvent::Apply(obj)).await
}

/// A deterministic executor for the runtime, for tests: reconciles are polled by hand (they must not
/// wait for the async runtime: no I/O, no timers), up to `workers` at once; which queued key starts
/// next and which running reconcile is polled next are chosen by an RNG of the given seed; time is
/// virtual and moves only to the next due requeue. With the same seed, the same run.
#[cfg(test)]
pub(crate) mod sim {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::*;

    type Running<E> = Pin<Box<dyn Future<Output = Result<Action, E>> + Send>>;

    pub(crate) struct Sim<R: Reconciler> {
        pub queue: Arc<WorkQueue>,
        reconciler: Arc<R>,
        rng: fastrand::Rng,
        workers: usize,
        start: Instant,
        now: Instant,
        running: Vec<(Key, Running<R::Error>)>,
        /// Every reconcile started: when, and which key.
        pub starts: Vec<(Duration, Key)>,
        /// Every reconcile finished: when, which key, and its outcome.
        pub finishes: Vec<(Duration, Key, Outcome)>,
    }

    impl<R: Reconciler> Sim<R> {
        pub(crate) fn new(queue: Arc<WorkQueue>, reconciler: Arc<R>, workers: usize, seed: u64) -> Sim<R> {
            let now = Instant::now();
            queue.started();
            Sim {
                queue,
                reconciler,
                rng: fastrand::Rng::with_seed(seed),
                workers: workers.max(1),
                start: now,
                now,
                running: Vec::new(),
                starts: Vec::new(),
                finishes: Vec::new(),
            }
        }

        /// Virtual time since the start.
        pub(crate) fn elapsed(&self) -> Duration {
            self.now - self.start
        }

        /// Runs everything due up to `at` (virtual time since the start), and leaves the clock there.
        pub(crate) fn run_until(&mut self, at: Duration) {
            let until = self.start + at;
            for _ in 0..1_000_000 {
                let next_timer = self.queue.fire_due(self.now);
                let can_start = self.running.len() < self.workers && !self.queue.lock().queue.is_empty();
                let moves = self.running.len() + usize::from(can_start);
                if moves > 0 {
                    let m = self.rng.usize(..moves);
                    if m == self.running.len() {
                        let rng = &mut self.rng;
                        let key = self.queue.try_next(|n| rng.usize(..n)).expect("a queued key");
                        let (r, k) = (self.reconciler.clone(), key.clone());
                        self.starts.push((self.elapsed(), key.clone()));
                        self.running.push((key, Box::pin(async move { r.reconcile(&k).await })));
                    } else {
                        self.poll(m);
                    }
                    continue;
                }
                match next_timer {
                    Some(t) if t <= until => self.now = t,
                    _ => {
                        self.now = self.now.max(until);
                        return;
                    }
                }
            }
            panic!("the simulation does not settle (a reconcile that never completes?)");
        }

        fn poll(&mut self, m: usize) {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            if let Poll::Ready(result) = self.running[m].1.as_mut().poll(&mut cx) {
                let (key, _) = self.running.swap_remove(m);
                let outcome = settle("sim", &self.queue, &*self.reconciler, &key, result, self.now);
                self.finishes.push((self.elapsed(), key, outcome));
            }
        }
    }

    /// What a simulated reconcile's task answers: the settling of its outcome at the (virtual) time
    /// the scheduler sees it finished.
    type Settle = Box<dyn FnOnce(Instant) -> Outcome + Send>;
    type Starter = Arc<dyn Fn(Key, Arc<WorkQueue>) -> Pin<Box<dyn Future<Output = Settle> + Send>> + Send + Sync>;

    struct Controller {
        name: &'static str,
        queue: Arc<WorkQueue>,
        workers: usize,
        running: usize,
        start: Starter,
    }

    /// The controllers of a seeded simulation over real I/O: each reconcile runs as a tokio task that
    /// is a participant of `gates` (it parks before every backend and store call, see
    /// [`crate::pool::gate`]); the scheduler decides which key starts when, which parked reconcile
    /// goes on, and when time moves. The queues are the runtime's, with as many workers per
    /// controller as production runs.
    pub(crate) struct Controllers {
        pub gates: Arc<crate::pool::gate::Gates>,
        list: Vec<Controller>,
        tasks: BTreeMap<u64, (usize, Key, tokio::task::JoinHandle<Settle>)>,
        /// Every reconcile started and finished, in order (printed with a failing seed).
        pub log: Vec<String>,
    }

    impl Controllers {
        pub(crate) fn new() -> Controllers {
            Controllers { gates: Default::default(), list: Vec::new(), tasks: BTreeMap::new(), log: Vec::new() }
        }

        /// Adds a controller; returns its index.
        pub(crate) fn add<R: Reconciler>(&mut self, name: &'static str, reconciler: Arc<R>, workers: usize) -> usize {
            let queue = Arc::new(WorkQueue::default());
            queue.started();
            let start: Starter = Arc::new(move |key: Key, queue: Arc<WorkQueue>| {
                let reconciler = reconciler.clone();
                Box::pin(async move {
                    let result = reconciler.reconcile(&key).await;
                    Box::new(move |now: Instant| settle(name, &queue, &*reconciler, &key, result, now)) as Settle
                })
            });
            self.list.push(Controller { name, queue, workers: workers.max(1), running: 0, start });
            self.list.len() - 1
        }

        /// The queue of controller `c` (feed it as production's feeders do).
        pub(crate) fn queue(&self, c: usize) -> &Arc<WorkQueue> {
            &self.list[c].queue
        }

        /// Controllers with a free worker and a queued key.
        pub(crate) fn startable(&self) -> Vec<usize> {
            (0..self.list.len())
                .filter(|&c| {
                    let ctl = &self.list[c];
                    ctl.running < ctl.workers && !ctl.queue.lock().queue.is_empty()
                })
                .collect()
        }

        /// The reconcile participant `id` runs: controller and key.
        pub(crate) fn describe(&self, id: u64) -> String {
            match self.tasks.get(&id) {
                Some((c, key, _)) => format!("{} {}/{}", self.list[*c].name, key.0, key.1),
                None => format!("#{id}"),
            }
        }

        /// Starts a reconcile of controller `c`, of the queued key `pick` chooses among the `n` queued.
        pub(crate) fn start(&mut self, c: usize, pick: impl FnOnce(usize) -> usize) {
            let ctl = &mut self.list[c];
            let key = ctl.queue.try_next(pick).expect("a queued key");
            ctl.running += 1;
            self.log.push(format!("start {} {}/{}", ctl.name, key.0, key.1));
            let (id, task) = self.gates.spawn((ctl.start)(key.clone(), ctl.queue.clone()));
            self.tasks.insert(id, (c, key, task));
        }

        /// Settles the reconciles that finished, at `now`; panics with the reconcile's panic.
        pub(crate) async fn settle_finished(&mut self, now: Instant) {
            for id in self.gates.take_done() {
                let Some((c, key, task)) = self.tasks.remove(&id) else { continue };
                let settle = match task.await {
                    Ok(settle) => settle,
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => panic!("reconcile task of {key:?}: {e}"),
                };
                let outcome = settle(now);
                let ctl = &mut self.list[c];
                ctl.running -= 1;
                self.log.push(format!("done {} {}/{}: {:?}", ctl.name, key.0, key.1, outcome));
            }
        }

        /// Queues the keys whose requeue is due at `now`; returns when the next one is.
        pub(crate) fn fire_due(&self, now: Instant) -> Option<Instant> {
            self.list.iter().filter_map(|c| c.queue.fire_due(now)).min()
        }

        /// Nothing runs and nothing is queued (timers aside).
        pub(crate) fn idle(&self) -> bool {
            self.tasks.is_empty() && self.list.iter().all(|c| c.queue.lock().queue.is_empty())
        }

        /// The process restarts: running reconciles are dropped where they are parked, and every
        /// queue (with its timers) is lost; the caller queues everything again, as a start does.
        pub(crate) fn restart(&mut self) {
            for (_, (_, _, task)) in std::mem::take(&mut self.tasks) {
                task.abort();
            }
            self.gates.clear();
            for ctl in &mut self.list {
                ctl.queue.stopped();
                ctl.queue = Arc::new(WorkQueue::default());
                ctl.queue.started();
                ctl.running = 0;
            }
            self.log.push("restart".into());
        }
    }

    /// Pending `n` times, then ready: a reconcile's await points, where others run meanwhile.
    pub(crate) struct Yield(pub u32);

    impl Future for Yield {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 == 0 {
                return Poll::Ready(());
            }
            self.0 -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::sim::{Sim, Yield};
    use super::*;

    fn key(name: &str) -> Key {
        ("ns".to_string(), name.to_string())
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// A test reconciler's error.
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Failure(String);

    /// The outcome a waiter learns of a reconcile that failed with `message`.
    fn failed(message: impl Into<String>) -> ReconcileError {
        ReconcileError::Failed(Arc::new(Failure(message.into())))
    }

    #[test]
    fn a_key_is_queued_once_however_often_it_is_pushed() {
        let q = WorkQueue::default();
        for name in ["a", "b", "a", "a", "b", "c"] {
            q.push(key(name));
        }
        assert_eq!(q.pending(), 3);
        let order: Vec<Key> = std::iter::from_fn(|| q.try_next(|_| 0)).collect();
        assert_eq!(order, [key("a"), key("b"), key("c")]);
        assert_eq!(q.try_next(|_| 0), None);
    }

    #[test]
    fn a_key_pushed_while_reconciled_is_not_taken_again_until_its_reconcile_ends() {
        let q = WorkQueue::default();
        let now = Instant::now();
        q.push(key("a"));
        assert_eq!(q.try_next(|_| 0), Some(key("a")));
        q.push(key("a"));
        q.push(key("a"));
        // Being reconciled: no second worker gets it.
        assert_eq!(q.try_next(|_| 0), None);
        assert_eq!(q.pending(), 1);
        q.finish(&key("a"), Ok(Action::Done), Action::Done, now);
        // Once for both pushes, whatever the reconcile asked.
        assert_eq!(q.try_next(|_| 0), Some(key("a")));
        q.finish(&key("a"), Ok(Action::Done), Action::Done, now);
        assert_eq!(q.pending(), 0);
        assert_eq!(q.try_next(|_| 0), None);
    }

    #[test]
    fn a_key_has_one_pending_requeue_and_the_earliest_wins() {
        let q = WorkQueue::default();
        let t0 = Instant::now();
        let a = key("a");
        {
            let mut s = q.lock();
            assert!(s.schedule(a.clone(), t0 + secs(10.0)));
            assert!(s.schedule(a.clone(), t0 + secs(5.0)), "earlier: replaces the first");
            assert!(!s.schedule(a.clone(), t0 + secs(20.0)), "later: ignored");
            assert!(!s.schedule(key("b"), t0 + secs(7.0)));
            assert_eq!(s.timers.len(), 2);
        }
        assert_eq!(q.requeue_at(&a), Some(t0 + secs(5.0)));
        assert_eq!(q.fire_due(t0 + secs(4.9)), Some(t0 + secs(5.0)));
        assert_eq!(q.pending(), 0);
        assert_eq!(q.fire_due(t0 + secs(5.0)), Some(t0 + secs(7.0)));
        assert_eq!((q.pending(), q.requeue_at(&a)), (1, None));
        // Queued: a delayed requeue adds nothing.
        assert!(!q.lock().schedule(a.clone(), t0 + secs(6.0)));
        assert_eq!(q.requeue_at(&a), None);
        // Pushed to run now: its delayed requeue is dropped.
        q.push(key("b"));
        assert_eq!(q.requeue_at(&key("b")), None);
        assert_eq!(q.fire_due(t0 + secs(100.0)), None);
        assert_eq!(q.pending(), 2);
        // A reconcile's requeue is one timer, replaced by an earlier one only.
        let a = q.try_next(|_| 0).unwrap();
        q.finish(&a, Ok(Action::RequeueAfter(secs(30.0))), Action::RequeueAfter(secs(30.0)), t0);
        assert_eq!(q.requeue_at(&a), Some(t0 + secs(30.0)));
    }

    #[test]
    fn backoff_doubles_from_a_second_to_five_minutes() {
        let b = Backoff::DEFAULT;
        let delays: Vec<u64> = (1..=11).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(b.delay(0), secs(1.0));
        assert_eq!(b.delay(u32::MAX), secs(300.0));
    }

    /// Fails `failures` times in a row (each count in turn), succeeds in between.
    struct Failing {
        runs: Mutex<Vec<u32>>,
        plan: Vec<u32>,
    }

    impl Reconciler for Failing {
        type Error = Failure;
        async fn reconcile(&self, _: &Key) -> Result<Action, Failure> {
            let mut runs = self.runs.lock().unwrap();
            let n = runs.len() as u32;
            runs.push(n);
            // plan: failures before each success.
            let mut at = 0;
            for &f in &self.plan {
                if n < at + f {
                    return Err(Failure(format!("failure {} of {f}", n - at + 1)));
                }
                at += f + 1;
                if n < at {
                    return Ok(Action::Done);
                }
            }
            Ok(Action::Done)
        }
    }

    #[test]
    fn failed_reconciles_back_off_exponentially_per_key_and_a_success_resets_it() {
        let q = Arc::new(WorkQueue::default());
        let r = Arc::new(Failing { runs: Mutex::new(vec![]), plan: vec![11, 2] });
        let mut sim = Sim::new(q.clone(), r, 1, 1);
        q.push(key("a"));
        sim.run_until(secs(10_000.0));
        let times: Vec<u64> = sim.starts.iter().map(|(t, _)| t.as_secs()).collect();
        // 11 failures: 1, 2, 4, ... 256, 300, 300 s apart; then a success at once after the last wait.
        let mut expected = vec![0];
        for d in [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300] {
            expected.push(expected.last().unwrap() + d);
        }
        assert_eq!(times, expected);
        assert_eq!(sim.finishes.last().unwrap().2, Ok(Action::Done));
        // After the success, the count starts over: the next failures wait 1 s, then 2 s.
        q.push(key("a"));
        let pushed = sim.elapsed().as_secs();
        sim.run_until(secs(20_000.0));
        let later: Vec<u64> = sim.starts[12..].iter().map(|(t, _)| t.as_secs() - pushed).collect();
        assert_eq!(later, [0, 1, 3]);
        assert_eq!(q.requeue_at(&key("a")), None);
    }

    /// A scripted controller: what each key's n-th reconcile does, and how long it works (in await
    /// points, where other reconciles run), depend on the key and n only, never on the schedule.
    struct Script {
        queue: Arc<WorkQueue>,
        calls: Mutex<HashMap<String, u32>>,
        in_progress: Mutex<BTreeSet<String>>,
    }

    impl Reconciler for Script {
        type Error = Failure;
        async fn reconcile(&self, key: &Key) -> Result<Action, Failure> {
            let name = key.1.clone();
            let call = {
                let mut calls = self.calls.lock().unwrap();
                let n = calls.entry(name.clone()).or_default();
                *n += 1;
                *n
            };
            assert!(self.in_progress.lock().unwrap().insert(name.clone()), "two reconciles of {name} at once");
            Yield(name.len() as u32 + call).await;
            if name == "echo" && call == 1 {
                // Its own write's change event, while it runs.
                self.queue.push(key.clone());
            }
            Yield(if name == "busy" { 20 } else { 1 }).await;
            self.in_progress.lock().unwrap().remove(&name);
            match (name.as_str(), call) {
                ("flaky", 1..=3) | ("flaky", 5) => Err(Failure(format!("failure {call}"))),
                ("flaky", 4) => Ok(Action::RequeueAfter(secs(10.0))),
                ("poll", 1..=2) => Ok(Action::RequeueAfter(secs(5.0))),
                _ => Ok(Action::Done),
            }
        }
    }

    type Trace = BTreeMap<String, Vec<(u64, Outcome)>>;

    /// One run of the script under `seed`: each key's reconciles (when, in virtual ms, and what they
    /// gave), the order reconciles started in, and what the waiters got.
    fn scripted_run(seed: u64) -> (Trace, Vec<String>, Vec<Option<Outcome>>) {
        let queue = Arc::new(WorkQueue::default());
        let script =
            Arc::new(Script { queue: queue.clone(), calls: Default::default(), in_progress: Default::default() });
        let mut sim = Sim::new(queue.clone(), script, 3, seed);
        for name in ["ok", "flaky", "poll", "echo", "busy", "ok", "flaky", "busy"] {
            queue.push(key(name));
        }
        let mut waits = vec![queue.enqueue_and_wait(key("echo"))];
        sim.run_until(secs(2.5));
        // A change while `poll` waits for its requeue: it runs now, and its requeue is set anew.
        queue.push(key("poll"));
        waits.push(queue.enqueue_and_wait(key("ok")));
        sim.run_until(secs(60.0));
        assert_eq!(queue.pending(), 0);
        let mut trace = Trace::new();
        for (t, k, outcome) in &sim.finishes {
            trace.entry(k.1.clone()).or_default().push((t.as_millis() as u64, outcome.clone()));
        }
        let order = sim.starts.iter().map(|(_, k)| k.1.clone()).collect();
        let answers = waits.into_iter().map(|w| w.now_or_never().expect("answered")).collect();
        (trace, order, answers)
    }

    #[test]
    fn the_runtime_does_the_same_under_every_schedule() {
        let failure = |n: u32| Err(failed(format!("failure {n}")));
        let after = |s: f64| Ok(Action::RequeueAfter(secs(s)));
        let done = Ok(Action::Done);
        let expected: Trace = [
            ("busy", vec![(0, done.clone())]),
            // Its own event while it ran: once more, after.
            ("echo", vec![(0, done.clone()), (0, done.clone())]),
            // 1 s, 2 s, 4 s after failures; the success resets the count.
            (
                "flaky",
                vec![
                    (0, failure(1)),
                    (1000, failure(2)),
                    (3000, failure(3)),
                    (7000, after(10.0)),
                    (17000, failure(5)),
                    (18000, done.clone()),
                ],
            ),
            ("ok", vec![(0, done.clone()), (2500, done.clone())]),
            // Pushed at 2.5 s: the requeue due at 5 s is replaced by one 5 s after that run.
            ("poll", vec![(0, after(5.0)), (2500, after(5.0)), (7500, done.clone())]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut orders = BTreeSet::new();
        for seed in 0..64 {
            let (trace, order, answers) = scripted_run(seed);
            assert_eq!(trace, expected, "seed {seed}");
            assert_eq!(answers, [Some(done.clone()), Some(done.clone())], "seed {seed}");
            orders.insert(order);
        }
        // The seeds did schedule differently.
        assert!(orders.len() > 1, "every seed ran the reconciles in the same order");
        // And one seed twice is one schedule.
        assert_eq!(scripted_run(7).1, scripted_run(7).1);
    }

    #[test]
    fn a_waiter_gets_the_reconcile_that_starts_after_it_asked() {
        let q = WorkQueue::default();
        let now = Instant::now();
        q.push(key("a"));
        q.push(key("b"));
        let a = q.try_next(|_| 0).unwrap();
        // `a` runs; the wait is for the next run.
        let mut first = Box::pin(q.enqueue_and_wait(key("a")));
        // Waited for: ahead of `b`.
        let mut second = Box::pin(q.enqueue_and_wait(key("c")));
        q.finish(&a, Ok(Action::Done), Action::Done, now);
        assert!((&mut first).now_or_never().is_none());
        assert_eq!(q.try_next(|_| 0), Some(key("a")));
        q.finish(&a, Err(failed("broken")), Action::RequeueAfter(secs(1.0)), now);
        assert_eq!(first.now_or_never(), Some(Some(Err(failed("broken")))));
        assert_eq!(q.try_next(|_| 0), Some(key("c")));
        q.finish(&key("c"), Ok(Action::Done), Action::Done, now);
        assert_eq!(second.as_mut().now_or_never(), Some(Some(Ok(Action::Done))));
        assert_eq!(q.try_next(|_| 0), Some(key("b")));
        // Nobody answers once the runtime stopped.
        let waiting = q.enqueue_and_wait(key("d"));
        q.stopped();
        assert_eq!(waiting.now_or_never(), Some(None));
        assert_eq!(q.enqueue_and_wait(key("d")).now_or_never(), Some(None));
        // What it was reconciling is queued again.
        assert_eq!(q.pending(), 2);
    }

    /// Counts reconciles per key and the most that ever ran at once per key.
    #[derive(Default)]
    struct Slow {
        now: Mutex<HashMap<String, usize>>,
        most: AtomicUsize,
        runs: AtomicUsize,
        /// What the first reconcile asks for (the others are done).
        requeue_after: Option<Duration>,
    }

    impl Reconciler for Slow {
        type Error = Failure;
        async fn reconcile(&self, key: &Key) -> Result<Action, Failure> {
            {
                let mut now = self.now.lock().unwrap();
                let n = now.entry(key.1.clone()).or_default();
                *n += 1;
                self.most.fetch_max(*n, Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            *self.now.lock().unwrap().get_mut(&key.1).unwrap() -= 1;
            let first = self.runs.fetch_add(1, Relaxed) == 0;
            Ok(match self.requeue_after {
                Some(d) if first => Action::RequeueAfter(d),
                _ => Action::Done,
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn workers_never_reconcile_one_key_at_once() {
        let metrics = Arc::new(ControllerMetrics::default());
        let q = Arc::new(WorkQueue::default());
        let r = Arc::new(Slow::default());
        let runtime = tokio::spawn({
            let (q, r, metrics) = (q.clone(), r.clone(), metrics.clone());
            async move { run("slow", q, r, 4, &metrics).await }
        });
        for _ in 0..50 {
            for name in ["a", "b"] {
                q.push(key(name));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The last push is reconciled after it, whatever ran meanwhile.
        let last = q.enqueue_and_wait(key("a")).await;
        assert_eq!(last, Some(Ok(Action::Done)));
        assert_eq!(r.most.load(Relaxed), 1);
        // Pushes folded together while a reconcile ran: far fewer runs than pushes.
        assert!(r.runs.load(Relaxed) < 100, "{}", r.runs.load(Relaxed));
        runtime.abort();
        let _ = runtime.await;
        assert!(metrics.controllers().is_empty());
    }

    #[tokio::test]
    async fn the_runtime_requeues_on_time_and_lists_its_counters_while_it_runs() {
        let metrics = Arc::new(ControllerMetrics::default());
        let q = Arc::new(WorkQueue::default());
        let r = Arc::new(Slow { requeue_after: Some(secs(0.3)), ..Default::default() });
        let runtime = tokio::spawn({
            let (q, r, metrics) = (q.clone(), r.clone(), metrics.clone());
            async move { run("slow", q, r, 1, &metrics).await }
        });
        assert_eq!(q.enqueue_and_wait(key("a")).await, Some(Ok(Action::RequeueAfter(secs(0.3)))));
        let at = q.requeue_at(&key("a")).expect("a requeue");
        assert_eq!(r.runs.load(Relaxed), 1);
        tokio::time::sleep_until(at - secs(0.1)).await;
        assert_eq!(r.runs.load(Relaxed), 1, "not before its time");
        let deadline = at + secs(10.0);
        while r.runs.load(Relaxed) < 2 && Instant::now() < deadline {
            tokio::time::sleep(secs(0.01)).await;
        }
        assert_eq!(r.runs.load(Relaxed), 2);
        assert!(Instant::now() >= at);
        let listed = metrics.controllers();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].name, listed[0].reconciles.load(Relaxed)), ("slow", 2));
        drop(listed);
        runtime.abort();
        let _ = runtime.await;
        assert!(metrics.controllers().is_empty(), "a stopped controller is not listed");
    }

    mod finalizers {
        use super::*;
        use crate::resources::{InfraEnv, Kind};
        use crate::store::sqlite::SqliteStore;

        const F: &str = "example.com/cleanup";

        async fn infraenv(store: &SqliteStore) -> InfraEnv {
            let doc = serde_json::json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
                                         "metadata": {"name": "ie", "namespace": "ns"},
                                         "spec": {"pullSecretRef": {"name": "ps"}}});
            let (_, doc) = crate::resources::validate_document(&doc).unwrap();
            store.apply_document(Kind::InfraEnv, doc).await.unwrap();
            store.get("ns", "ie").await.unwrap().unwrap()
        }

        /// Runs the finalizer over the stored InfraEnv; the cleanup answers `cleanup`. Returns the
        /// action and which event the reconcile got.
        async fn reconcile(store: &SqliteStore, on_added: OnAdded, cleanup: Action) -> (Action, Option<&'static str>) {
            let ie: InfraEnv = store.get("ns", "ie").await.unwrap().unwrap();
            let mut seen = None;
            let seen_by = &mut seen;
            let action = finalizer::<_, _, StoreError, _, _>(store, F, on_added, ie, move |event| {
                let seen = seen_by;
                async move {
                    match event {
                        FinalizerEvent::Apply(ie) => {
                            assert!(has_finalizer(&ie.metadata, F), "work is done with the finalizer in place");
                            *seen = Some("apply");
                            Ok(Action::Done)
                        }
                        FinalizerEvent::Cleanup(_) => {
                            *seen = Some("cleanup");
                            Ok(cleanup)
                        }
                    }
                }
            })
            .await
            .unwrap();
            (action, seen)
        }

        async fn stored(store: &SqliteStore) -> Option<InfraEnv> {
            store.get("ns", "ie").await.unwrap()
        }

        #[tokio::test]
        async fn the_finalizer_is_added_before_the_work() {
            let store = SqliteStore::open_in_memory().unwrap();
            infraenv(&store).await;
            assert_eq!(reconcile(&store, OnAdded::Apply, Action::Done).await, (Action::Done, Some("apply")));
            assert!(has_finalizer(&stored(&store).await.unwrap().metadata, F));
            // Once there, nothing more is written.
            let version = stored(&store).await.unwrap().metadata.resource_version;
            assert_eq!(reconcile(&store, OnAdded::Requeue, Action::Done).await, (Action::Done, Some("apply")));
            assert_eq!(stored(&store).await.unwrap().metadata.resource_version, version);
        }

        #[tokio::test]
        async fn adding_the_finalizer_may_end_the_reconcile() {
            let store = SqliteStore::open_in_memory().unwrap();
            infraenv(&store).await;
            assert_eq!(
                reconcile(&store, OnAdded::Requeue, Action::Done).await,
                (Action::RequeueAfter(Duration::ZERO), None)
            );
            assert!(has_finalizer(&stored(&store).await.unwrap().metadata, F));
        }

        #[tokio::test]
        async fn deletion_runs_the_cleanup_until_it_is_done_then_removes_the_finalizer() {
            let store = SqliteStore::open_in_memory().unwrap();
            infraenv(&store).await;
            reconcile(&store, OnAdded::Apply, Action::Done).await;
            store.delete::<InfraEnv>("ns", "ie").await.unwrap();
            // Not finished: the finalizer stays, and the object with it.
            let wait = Action::RequeueAfter(secs(60.0));
            assert_eq!(reconcile(&store, OnAdded::Apply, wait).await, (wait, Some("cleanup")));
            assert!(has_finalizer(&stored(&store).await.unwrap().metadata, F));
            // Finished: the finalizer goes, and the object (it was the last).
            assert_eq!(reconcile(&store, OnAdded::Apply, Action::Done).await, (Action::Done, Some("cleanup")));
            assert!(stored(&store).await.is_none());
        }

        #[tokio::test]
        async fn an_object_deleted_without_the_finalizer_is_left_alone() {
            let store = SqliteStore::open_in_memory().unwrap();
            let mut ie = infraenv(&store).await;
            ie.metadata.finalizers = Some(vec!["someone.else/keep".into()]);
            store.update(&ie).await.unwrap();
            store.delete::<InfraEnv>("ns", "ie").await.unwrap();
            assert_eq!(reconcile(&store, OnAdded::Apply, Action::Done).await, (Action::Done, None));
            let left = stored(&store).await.unwrap();
            assert_eq!(left.metadata.finalizers, Some(vec!["someone.else/keep".to_string()]));
        }

        #[test]
        fn finalizers_are_added_and_removed_once() {
            let mut meta = crate::resources::ObjectMeta::default();
            assert!(!has_finalizer(&meta, F));
            assert!(!remove_finalizer(&mut meta, F));
            assert!(add_finalizer(&mut meta, F));
            assert!(!add_finalizer(&mut meta, F));
            assert_eq!(meta.finalizers.as_deref(), Some(&[F.to_string()][..]));
            assert!(remove_finalizer(&mut meta, F));
            assert!(!has_finalizer(&meta, F));
        }
    }
}
