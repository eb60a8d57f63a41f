//! The redlock column (a blocking client, run in `spawn_blocking`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{timed_out, BoxFut, Column, Held, Release, TTL};

pub struct Redlock(pub Arc<redlock::RedLock>);

/// redlock's `Lock` borrows its manager, so a held lock keeps the owned parts and rebuilds
/// the `Lock` (all its fields are public) for `unlock`.
struct RedlockHeld {
    manager: Arc<redlock::RedLock>,
    resource: Vec<u8>,
    val: Vec<u8>,
}

impl Column for Redlock {
    fn acquire<'a>(&'a self, key: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        let manager = Arc::clone(&self.0);
        let key = key.to_owned();
        Box::pin(async move {
            let deadline = Instant::now() + wait;
            let taken = tokio::task::spawn_blocking(move || loop {
                match manager.lock(key.as_bytes(), TTL.as_millis() as usize) {
                    Ok(Some(lock)) => {
                        let (resource, val) = (lock.resource, lock.val);
                        break Ok(RedlockHeld {
                            manager,
                            resource,
                            val,
                        });
                    }
                    Ok(None) if Instant::now() < deadline => {}
                    Ok(None) => break Err(timed_out(&key, wait)),
                    Err(e) => break Err(e.to_string()),
                }
            });
            let held = taken.await.map_err(|e| e.to_string())??;
            Ok(Box::new(held) as Held)
        })
    }
}

impl Release for RedlockHeld {
    fn release(self: Box<Self>) -> BoxFut<'static, Result<(), String>> {
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let lock = redlock::Lock {
                    resource: self.resource,
                    val: self.val,
                    validity_time: 0,
                    lock_manager: &self.manager,
                };
                // Best effort like rslock's: redlock reports nothing back.
                self.manager.unlock(&lock);
            })
            .await
            .map_err(|e| e.to_string())
        })
    }
}
