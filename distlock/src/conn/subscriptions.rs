//! The channels a [`Link`] listens on, and how it subscribes them.
//!
//! RESP3 answers `SUBSCRIBE` and `UNSUBSCRIBE` with a push frame (`subscribe <channel> <n>`),
//! not an in-band reply (an error, such as an ACL refusal, comes in-band): the connection
//! counts that push as the request's answer ([`Confirm`]). A channel counts as subscribed only
//! once that confirmation arrived on the connection that carries it: [`Link::subscribe`]
//! returns then, not before. The link keeps the set of channels it was asked to listen on, and
//! every connection it opens after the first subscribes them all before any other request
//! (so a `PING` answered there is answered after their confirmations), whichever connection
//! an earlier confirmation came on. (redis-rs's manager, once a confirmation was lost, could
//! reconnect twice, see the channel confirmed on the connection it then discarded, and never
//! subscribe the one it kept.)

use std::collections::HashSet;
use std::io;
use std::sync::Mutex;

use redis::{PushKind, RedisResult, Value};

use super::link::Link;
use super::wire::{Confirm, Wire};
use crate::sync::lock;

/// Tries of a subscription whose connection failed before the confirmation came (a lost
/// confirmation resets the connection): each on a new connection.
const SUBSCRIBE_TRIES: usize = 2;

#[derive(Default)]
pub(crate) struct Subscriptions {
    channels: Mutex<HashSet<Vec<u8>>>,
}

impl Subscriptions {
    /// True while some channel is listened on.
    pub(super) fn any(&self) -> bool {
        !lock(&self.channels).is_empty()
    }

    /// Subscribes every channel on `wire`, a connection just opened: nobody waits for these
    /// confirmations (a `PING` behind them is answered after them).
    pub(super) fn send_all(&self, wire: &Wire) {
        let channels = lock(&self.channels);
        wire.send_unanswered(
            channels
                .iter()
                .map(|channel| change("SUBSCRIBE", PushKind::Subscribe, channel)),
        );
    }
}

/// The command that changes a subscription, and the push confirming it.
fn change(name: &str, kind: PushKind, channel: &[u8]) -> (Vec<u8>, Confirm) {
    let bytes = redis::cmd(name).arg(channel).get_packed_command();
    let confirm = Confirm {
        kind,
        channel: channel.to_vec(),
    };
    (bytes, confirm)
}

impl Link {
    /// Listens on `channel`: returns once the server confirmed the subscription on the open
    /// connection, which every later connection of this link subscribes again. Only for a
    /// link with a push sink.
    pub(crate) async fn subscribe(&self, channel: &[u8]) -> RedisResult<()> {
        let shared = &self.shared;
        if shared.sink.is_none() {
            return Err(no_subscriptions());
        }
        lock(&shared.subscriptions.channels).insert(channel.to_vec());
        let mut tries = 0;
        let result = loop {
            tries += 1;
            let wire = match self.wire().await {
                Ok(wire) => wire,
                Err(e) => break Err(e),
            };
            let (bytes, confirm) = change("SUBSCRIBE", PushKind::Subscribe, channel);
            match wire.request(&bytes, 1, Some(confirm)).await {
                Ok(answer) => break confirmed(answer),
                // The connection failed before the confirmation came: the next one
                // subscribes the channel first thing.
                Err(kind) if kind != io::ErrorKind::TimedOut && tries < SUBSCRIBE_TRIES => {}
                Err(kind) => break Err(self.failure(kind)),
            }
        };
        if result.is_err() {
            lock(&shared.subscriptions.channels).remove(channel);
            // A connection opened meanwhile may have subscribed it all the same.
            let _opening = shared.opening.lock().await;
            if let Some(wire) = self.usable() {
                wire.send_unanswered([change("UNSUBSCRIBE", PushKind::Unsubscribe, channel)]);
            }
        }
        result
    }

    /// Stops listening on `channel`: no later connection subscribes it, and the open one (if
    /// any) unsubscribes it, confirmed when this returns.
    pub(crate) async fn unsubscribe(&self, channel: &[u8]) -> RedisResult<()> {
        let shared = &self.shared;
        if shared.sink.is_none() {
            return Err(no_subscriptions());
        }
        lock(&shared.subscriptions.channels).remove(channel);
        // A connection being opened subscribes the channels as they were: wait for it.
        let wire = {
            let _opening = shared.opening.lock().await;
            self.usable()
        };
        let Some(wire) = wire else {
            // No connection open: the channel is subscribed nowhere.
            return Ok(());
        };
        let (bytes, confirm) = change("UNSUBSCRIBE", PushKind::Unsubscribe, channel);
        let answer = wire.request(&bytes, 1, Some(confirm)).await;
        answer
            .map_err(|kind| self.failure(kind))
            .and_then(confirmed)
    }
}

/// A subscription change's answer: the confirmation (nothing), or the error it was refused with.
fn confirmed(answer: Vec<Value>) -> RedisResult<()> {
    answer
        .into_iter()
        .try_for_each(|value| value.extract_error().map(drop))
}

/// Subscriptions go on a node's first connection, never on an acquisition lane.
pub(crate) fn no_subscriptions() -> redis::RedisError {
    (
        redis::ErrorKind::Client,
        "subscriptions go on the node's first connection",
    )
        .into()
}
