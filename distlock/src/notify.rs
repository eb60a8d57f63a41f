//! Wake-up on release: waiters sleep until a release is published instead of polling Redis.
//!
//! Every release script publishes on the lock's channel (`<lock key>:wake`, same slot). The
//! client's one connection runs RESP3, so those messages arrive as push frames on the
//! connection it already has, and redis-rs re-subscribes by itself after a reconnect.
//!
//! Per channel, local waiters queue on one [`Notify`]: a release wakes **one** of them, in
//! arrival order, so 200 waiters cost one attempt per release per process instead of 200,
//! and a task that just released cannot jump ahead of tasks already waiting here. A message
//! that is lost (a reconnect, a waiter cancelled at the wrong moment) costs at most the
//! fallback timeout, which the acquire loop caps by the holder's remaining lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;

/// The waiters of one process, per channel.
#[derive(Default)]
pub(crate) struct Channels {
    map: Mutex<HashMap<Vec<u8>, Arc<Channel>>>,
}

struct Channel {
    /// A release wakes the first queued waiter (or leaves a permit if none is parked).
    released: Notify,
    /// Live subscriptions of this process to the channel.
    waiters: AtomicUsize,
    /// Serialises SUBSCRIBE / UNSUBSCRIBE for the channel; true while subscribed.
    subscribed: tokio::sync::Mutex<bool>,
}

impl Channels {
    /// Handles one push frame from the connection. Runs on the connection's reader, so it only
    /// looks up a map and wakes a task: it never blocks.
    pub(crate) fn on_push(&self, push: PushInfo) {
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let Some(Value::BulkString(channel)) = push.data.first() else {
                    return;
                };
                if let Some(ch) = self.lock().get(channel.as_slice()) {
                    ch.released.notify_one();
                }
            }
            // Releases published while the connection was down are lost: let every waiter
            // try once now rather than sleep until its fallback.
            PushKind::Disconnection => {
                for ch in self.lock().values() {
                    ch.released.notify_waiters();
                }
            }
            _ => {}
        }
    }

    /// True when tasks of this process already wait on `channel`: a newcomer then queues
    /// behind them instead of racing them.
    pub(crate) fn has_waiters(&self, channel: &[u8]) -> bool {
        self.lock()
            .get(channel)
            .is_some_and(|ch| ch.waiters.load(Ordering::Acquire) > 0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Arc<Channel>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Subscribes waiters and delivers releases to them.
pub(crate) struct Notifier {
    channels: Arc<Channels>,
    conn: ConnectionManager,
}

impl Notifier {
    pub(crate) fn new(channels: Arc<Channels>, conn: ConnectionManager) -> Self {
        Notifier { channels, conn }
    }

    pub(crate) fn channels(&self) -> &Channels {
        &self.channels
    }

    /// Joins the queue of `channel`, subscribing the connection if this is its first waiter.
    /// The subscription is confirmed before this returns, so a release published afterwards
    /// cannot be missed; the caller must re-check the lock once before sleeping.
    pub(crate) async fn subscribe(&self, channel: &[u8]) -> redis::RedisResult<Subscription> {
        let ch = {
            let mut map = self.channels.lock();
            let ch = map
                .entry(channel.to_vec())
                .or_insert_with(|| {
                    Arc::new(Channel {
                        released: Notify::new(),
                        waiters: AtomicUsize::new(0),
                        subscribed: tokio::sync::Mutex::new(false),
                    })
                })
                .clone();
            ch.waiters.fetch_add(1, Ordering::AcqRel);
            ch
        };
        let subscription = Subscription {
            channel: channel.to_vec(),
            ch: ch.clone(),
            channels: Arc::downgrade(&self.channels),
            conn: self.conn.clone(),
        };
        let mut subscribed = ch.subscribed.lock().await;
        if !*subscribed {
            self.conn.clone().subscribe(channel).await?;
            *subscribed = true;
        }
        Ok(subscription)
    }
}

/// One waiter's place in a channel's queue; leaving the last place unsubscribes.
pub(crate) struct Subscription {
    channel: Vec<u8>,
    ch: Arc<Channel>,
    channels: Weak<Channels>,
    conn: ConnectionManager,
}

impl Subscription {
    /// Sleeps until a release is published or `fallback` passes.
    pub(crate) async fn released(&self, fallback: Duration) {
        let _ = tokio::time::timeout(fallback, self.ch.released.notified()).await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.ch.waiters.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // The last local waiter left: unsubscribe, unless a new one arrived meanwhile.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (ch, channel, channels, mut conn) = (
            self.ch.clone(),
            std::mem::take(&mut self.channel),
            self.channels.clone(),
            self.conn.clone(),
        );
        runtime.spawn(async move {
            let mut subscribed = ch.subscribed.lock().await;
            if ch.waiters.load(Ordering::Acquire) != 0 {
                return;
            }
            if *subscribed && conn.unsubscribe(&channel).await.is_ok() {
                *subscribed = false;
            }
            if let Some(channels) = channels.upgrade() {
                let mut map = channels.lock();
                if ch.waiters.load(Ordering::Acquire) == 0 && !*subscribed {
                    map.remove(&channel);
                }
            }
        });
    }
}
