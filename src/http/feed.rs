//! The pieces of a streamed response body ([`super::Body::Stream`]), queued by their producer (a
//! watch) and taken by the server as it writes them, under a budget of bytes.
//!
//! A client that stops reading must not make the server hold an ever-growing queue: every piece
//! queued and not yet written counts against the feed's budget (its whole length, even when its
//! bytes are shared with the store or with other feeds: the budget bounds what this client pins),
//! the producer waits while the budget is full, and when no room is made within the stall time the
//! feed is cut: its queue is dropped at once and the writer ends the response with an error, which
//! closes the connection. The client resumes as after any dropped watch.
//!
//! Pieces are `Bytes`: shared, never copied here. A piece is released (its bytes leave the budget)
//! when the writer drops it, after writing it; on the hyper path that is when hyper has sent it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;

use crate::keylocks::Locked as _;

/// What one queued piece costs at least, whatever its length: the queue's own bookkeeping, so that
/// a flood of empty pieces is bounded too.
const PIECE_OVERHEAD: u64 = 64;

/// Bytes queued in every feed of the process, not yet written (see [`queued_total`]).
static QUEUED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// The bytes queued in every streamed body of the process and not yet written: what stalled
/// clients hold (each feed at most its budget plus one piece).
pub fn queued_total() -> u64 {
    QUEUED_TOTAL.load(Ordering::Relaxed)
}

fn cost(piece: &Bytes) -> u64 {
    piece.len() as u64 + PIECE_OVERHEAD
}

#[derive(Default)]
struct State {
    queue: VecDeque<Bytes>,
    /// Cost of the queued pieces and of those taken but not yet written.
    queued: u64,
    sender_gone: bool,
    receiver_gone: bool,
    /// The feed was cut: its client did not make room within the stall time.
    cut: bool,
    receiver_waker: Option<Waker>,
    sender_waker: Option<Waker>,
    /// Who waits for a cut besides the receiver's reads (see [`CutSignal`]).
    cut_waker: Option<Waker>,
}

struct Shared {
    state: Mutex<State>,
    budget: u64,
    stall: Duration,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.locked()
    }

    fn release(&self, state: &mut State, amount: u64) {
        state.queued -= amount;
        QUEUED_TOTAL.fetch_sub(amount, Ordering::Relaxed);
        if let Some(w) = state.sender_waker.take() {
            w.wake();
        }
    }

    /// Drops the queue (the receiver left, or the feed was cut).
    fn drop_queue(&self, state: &mut State) {
        let freed: u64 = state.queue.drain(..).map(|p| cost(&p)).sum();
        self.release(state, freed);
    }
}

/// A stream body with at most `budget` bytes queued, whose producer is cut off after waiting
/// `stall` for room.
pub fn channel(budget: u64, stall: Duration) -> (FeedSender, Feed) {
    let shared = Arc::new(Shared { state: Mutex::new(State::default()), budget, stall });
    let receiver = FeedReceiver { shared: shared.clone() };
    (FeedSender { shared }, Feed(Arc::new(Mutex::new(Some(receiver)))))
}

/// Why a piece was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// The response is over: its client left, or it was never written.
    Closed,
    /// The client made no room within the stall time: the feed was cut.
    Stalled,
}

/// The producing end of a feed. Dropping it ends the body once the queued pieces are written.
pub struct FeedSender {
    shared: Arc<Shared>,
}

impl FeedSender {
    /// Queues `piece`, waiting while the budget is full (a piece larger than the whole budget goes
    /// alone into an empty queue). After waiting the stall time the feed is cut: its queue is
    /// dropped, the writer fails the response, and this and every later call answer `Stalled`.
    pub async fn send(&self, piece: Bytes) -> Result<(), SendError> {
        let room = std::future::poll_fn(|cx| self.poll_room(cx, cost(&piece)));
        match tokio::time::timeout(self.shared.stall, room).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                self.cut();
                return Err(SendError::Stalled);
            }
        }
        let mut state = self.shared.lock();
        // Room was made above and nobody else queues: checked again only for a receiver that left.
        if state.receiver_gone || state.cut {
            return Err(if state.cut { SendError::Stalled } else { SendError::Closed });
        }
        let c = cost(&piece);
        state.queued += c;
        QUEUED_TOTAL.fetch_add(c, Ordering::Relaxed);
        state.queue.push_back(piece);
        if let Some(w) = state.receiver_waker.take() {
            w.wake();
        }
        Ok(())
    }

    fn poll_room(&self, cx: &mut Context<'_>, cost: u64) -> Poll<Result<(), SendError>> {
        let mut state = self.shared.lock();
        if state.cut {
            return Poll::Ready(Err(SendError::Stalled));
        }
        if state.receiver_gone {
            return Poll::Ready(Err(SendError::Closed));
        }
        if state.queued == 0 || state.queued + cost <= self.shared.budget {
            return Poll::Ready(Ok(()));
        }
        state.sender_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Cuts the feed: drops what is queued and makes the writer fail the response.
    pub fn cut(&self) {
        let mut state = self.shared.lock();
        state.cut = true;
        self.shared.drop_queue(&mut state);
        for w in [state.receiver_waker.take(), state.cut_waker.take()].into_iter().flatten() {
            w.wake();
        }
    }

    /// Completes when the response is over (its client left, or the writer dropped the body).
    pub async fn closed(&self) {
        std::future::poll_fn(|cx| {
            let mut state = self.shared.lock();
            if state.receiver_gone {
                Poll::Ready(())
            } else {
                state.sender_waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    /// The bytes this feed holds: queued, or taken by the writer and not yet written.
    pub fn queued(&self) -> u64 {
        self.shared.lock().queued
    }
}

impl Drop for FeedSender {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.sender_gone = true;
        if let Some(w) = state.receiver_waker.take() {
            w.wake();
        }
    }
}

/// The writing end of a feed.
pub struct FeedReceiver {
    shared: Arc<Shared>,
}

/// The feed was cut (see [`FeedSender::send`]).
#[derive(Debug)]
pub struct Cut;

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client did not read the stream: it was cut")
    }
}

impl std::error::Error for Cut {}

impl FeedReceiver {
    /// The next piece; None once the sender is gone and every piece was taken.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Piece, Cut>>> {
        let mut state = self.shared.lock();
        if state.cut {
            return Poll::Ready(Some(Err(Cut)));
        }
        if let Some(bytes) = state.queue.pop_front() {
            return Poll::Ready(Some(Ok(Piece { bytes, shared: self.shared.clone() })));
        }
        if state.sender_gone {
            return Poll::Ready(None);
        }
        state.receiver_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The bytes this feed holds: queued, or taken and not yet written.
    pub fn queued(&self) -> u64 {
        self.shared.lock().queued
    }

    /// The pieces queued and not yet taken (for tests of what a feed holds: the same memory as the
    /// producer's, not copies).
    pub fn queued_pieces(&self) -> Vec<Bytes> {
        self.shared.lock().queue.iter().cloned().collect()
    }

    pub async fn recv(&mut self) -> Option<Result<Piece, Cut>> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Completes when the feed is cut (for a writer blocked on a client that does not read).
    pub async fn cut(&self) {
        self.cut_signal().cut().await
    }

    /// What tells whoever holds the connection that the feed was cut, when the receiver itself is
    /// inside hyper (which polls a body only when it has room to write it).
    pub fn cut_signal(&self) -> CutSignal {
        CutSignal { shared: self.shared.clone() }
    }
}

/// See [`FeedReceiver::cut_signal`].
#[derive(Clone)]
pub struct CutSignal {
    shared: Arc<Shared>,
}

impl CutSignal {
    /// Completes when the feed is cut.
    pub async fn cut(&self) {
        std::future::poll_fn(|cx| {
            let mut state = self.shared.lock();
            if state.cut {
                Poll::Ready(())
            } else {
                state.cut_waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

impl Drop for FeedReceiver {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.receiver_gone = true;
        self.shared.drop_queue(&mut state);
    }
}

/// A piece taken from a feed: counted against its budget until dropped.
pub struct Piece {
    bytes: Bytes,
    shared: Arc<Shared>,
}

impl Piece {
    /// The piece as `Bytes` still counted until the last clone of them is dropped (what hyper gets:
    /// it drops them once sent). The bytes are the same memory, not a copy.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl std::ops::Deref for Piece {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Piece {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        self.shared.release(&mut state, cost(&self.bytes));
    }
}

/// The receiving end of a [`super::Body::Stream`]; taken by whoever writes the response.
#[derive(Clone)]
pub struct Feed(Arc<Mutex<Option<FeedReceiver>>>);

impl Feed {
    /// The receiver, once: a second writer of the same response gets an empty body.
    pub fn take(&self) -> Option<FeedReceiver> {
        self.0.locked().take()
    }
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Feed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[tokio::test]
    async fn pieces_are_shared_and_the_budget_holds_the_producer() {
        let (tx, feed) = channel(3 * 1024, Duration::from_secs(30));
        let mut rx = feed.take().unwrap();
        let big = piece(1024);
        for _ in 0..2 {
            tx.send(big.clone()).await.unwrap();
        }
        // The queue holds the producer's own bytes, not copies.
        assert!(rx.queued_pieces().iter().all(|p| p.as_ptr() == big.as_ptr()));
        assert_eq!(tx.queued(), 2 * (1024 + PIECE_OVERHEAD));
        // A third piece does not fit: the producer waits until the writer takes and writes one.
        {
            let third = tx.send(big.clone());
            tokio::pin!(third);
            assert!(tokio::time::timeout(Duration::from_millis(50), &mut third).await.is_err());
            let first = rx.recv().await.unwrap().unwrap();
            // Taken but not written: still counted.
            assert!(tokio::time::timeout(Duration::from_millis(50), &mut third).await.is_err());
            drop(first);
            tokio::time::timeout(Duration::from_secs(5), &mut third).await.unwrap().unwrap();
        }
        // Through hyper's form the bytes are still the producer's, counted until dropped.
        let second = rx.recv().await.unwrap().unwrap().into_bytes();
        assert_eq!(second.as_ptr(), big.as_ptr());
        assert_eq!(tx.queued(), 2 * (1024 + PIECE_OVERHEAD));
        drop(second);
        assert_eq!(tx.queued(), 1024 + PIECE_OVERHEAD);
        drop(tx);
        assert!(rx.recv().await.unwrap().is_ok());
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_feed_nobody_reads_is_cut_after_the_stall_time_and_its_queue_dropped() {
        let (tx, feed) = channel(2048, Duration::from_millis(100));
        let rx = feed.take().unwrap();
        let started = std::time::Instant::now();
        tx.send(piece(1500)).await.unwrap();
        // An oversized piece goes alone into an empty queue only; here it waits, then the feed is cut.
        assert_eq!(tx.send(piece(1500)).await, Err(SendError::Stalled));
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(tx.queued(), 0, "the queue of a cut feed is dropped at once");
        assert_eq!(tx.send(piece(1)).await, Err(SendError::Stalled));
        // The writer, blocked on its client, learns it at once.
        tokio::time::timeout(Duration::from_secs(5), rx.cut()).await.unwrap();
        let mut rx = rx;
        assert!(matches!(rx.recv().await, Some(Err(Cut))));
    }

    #[tokio::test]
    async fn a_writer_that_leaves_ends_the_producer() {
        let (tx, feed) = channel(1 << 20, Duration::from_secs(30));
        tx.send(piece(10)).await.unwrap();
        drop(feed.take());
        tokio::time::timeout(Duration::from_secs(5), tx.closed()).await.unwrap();
        assert_eq!(tx.send(piece(10)).await, Err(SendError::Closed));
        assert_eq!(tx.queued(), 0);
    }
}
