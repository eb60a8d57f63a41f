//! The distributed-lock-redis column (on fred).

use std::time::{Duration, Instant};

use super::{timed_out, BoxFut, Column, Held, Release, PEER_RETRY_DELAY_MS, TTL};

/// `distributed-lock-redis` on `urls` (one node, or a quorum's), set up as every scenario runs
/// it: the bench's ttl, valid for 90 % of it, extended every third.
pub async fn dl_redis_provider(
    urls: &[impl AsRef<str>],
) -> Result<distributed_lock_redis::RedisLockProvider, String> {
    distributed_lock_redis::RedisLockProvider::builder()
        .urls(urls)
        .expiry(TTL)
        .min_validity(TTL * 9 / 10)
        .extension_cadence(TTL / 3)
        .build()
        .await
        .map_err(|e| format!("connect failed: {e}"))
}

pub struct DlRedis(pub distributed_lock_redis::RedisLockProvider);

impl Column for DlRedis {
    fn acquire<'a>(&'a self, key: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        use distributed_lock_core::traits::{DistributedLock, LockProvider};
        Box::pin(async move {
            let deadline = Instant::now() + wait;
            loop {
                match self.0.create_lock(key).try_acquire().await {
                    Ok(Some(handle)) => return Ok(Box::new(handle) as Held),
                    Ok(None) if Instant::now() < deadline => {
                        let pause = rand::random_range(0..PEER_RETRY_DELAY_MS * 1_000);
                        tokio::time::sleep(Duration::from_micros(pause.into())).await;
                    }
                    Ok(None) => return Err(timed_out(key, wait)),
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
    }
}

impl Release for distributed_lock_redis::RedisLockHandle {
    fn release(self: Box<Self>) -> BoxFut<'static, Result<(), String>> {
        use distributed_lock_core::traits::LockHandle;
        Box::pin(async move { LockHandle::release(*self).await.map_err(|e| e.to_string()) })
    }
}
