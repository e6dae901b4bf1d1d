//! Async locks by key, for work that must run one at a time per key (the host records behind one
//! Agent name) while other keys go on side by side. A key's lock exists only
//! while someone holds or waits for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
        let mutex = self.0.lock().unwrap().entry(key.clone()).or_default().clone();
        let guard = mutex.clone().lock_owned().await;
        KeyGuard { locks: self, key, mutex, guard: Some(guard) }
    }

    /// Keys locked or waited for (tests).
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut map = self.locks.0.lock().unwrap();
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
