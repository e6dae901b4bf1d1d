//! Async locks by key, for work that must run one at a time per key (the host records behind one
//! Agent name) while other keys go on side by side. A key's lock exists only
//! while someone holds or waits for it.
//!
//! Also the crate's one policy for a poisoned `std::sync` lock ([`Locked`]): take it anyway. Every
//! critical section in the crate is a few assignments, a push or a map insert: a panic inside one
//! leaves the data as it was before or after a whole step, never half-made, so refusing every later
//! caller would turn one bug into an outage of everything that shares the lock. Production code
//! takes `std::sync` locks only through [`Locked`]; tests may `unwrap`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `std::sync` locks taken by the crate's policy (module docs): a poisoned lock is taken anyway.
pub trait Locked<T> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`Locked`] for readers-writer locks.
pub trait LockedRw<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> LockedRw<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }
    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Async locks by key, kept only while someone holds or waits for one.
#[derive(Default)]
pub struct KeyLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

/// Holds the lock of a key; dropping it lets the next waiter in.
pub struct KeyGuard<'a> {
    locks: &'a KeyLocks,
    key: String,
    mutex: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl KeyLocks {
    pub async fn lock(&self, key: String) -> KeyGuard<'_> {
        let mutex = self.0.locked().entry(key.clone()).or_default().clone();
        let guard = mutex.clone().lock_owned().await;
        KeyGuard { locks: self, key, mutex, guard: Some(guard) }
    }

    /// Keys locked or waited for (tests).
    pub fn len(&self) -> usize {
        self.0.locked().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut map = self.locks.0.locked();
        // Only the map and this guard hold it (clones are made under the map's lock): nobody waits.
        if Arc::strong_count(&self.mutex) == 2 {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn key_locks_take_turns_and_are_forgotten_when_free() {
        let locks = Arc::new(KeyLocks::default());
        let first = locks.lock("ns/a".into()).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiter = {
            let (locks, order) = (locks.clone(), order.clone());
            tokio::spawn(async move {
                let _g = locks.lock("ns/a".into()).await;
                order.lock().unwrap().push("second");
            })
        };
        // Another key does not wait.
        drop(locks.lock("ns/b".into()).await);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        order.lock().unwrap().push("first");
        drop(first);
        waiter.await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["first", "second"]);
        assert!(locks.is_empty());
    }
}
