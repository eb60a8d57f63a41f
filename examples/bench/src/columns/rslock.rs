//! The rslock column.

use std::time::{Duration, Instant};

use super::{timed_out, BoxFut, Column, Held, Release, TTL};

pub struct Rslock(pub rslock::LockManager);

impl Column for Rslock {
    fn acquire<'a>(&'a self, key: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        Box::pin(async move {
            let deadline = Instant::now() + wait;
            loop {
                match self.0.lock(key, TTL).await {
                    Ok(lock) => return Ok(Box::new(lock) as Held),
                    Err(rslock::LockError::Unavailable) if Instant::now() < deadline => {}
                    Err(rslock::LockError::Unavailable) => return Err(timed_out(key, wait)),
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
    }
}

impl Release for rslock::Lock {
    fn release(self: Box<Self>) -> BoxFut<'static, Result<(), String>> {
        Box::pin(async move {
            (*self).release().await;
            Ok(())
        })
    }
}
