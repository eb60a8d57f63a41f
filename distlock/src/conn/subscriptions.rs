//! The channels a [`Link`](super::link::Link) listens on, and how it subscribes them.
//!
//! RESP3 answers `SUBSCRIBE` and `UNSUBSCRIBE` with a push frame (`subscribe <channel> <n>`),
//! not an in-band reply (an error, such as an ACL refusal, comes in-band): the connection
//! counts that push as the request's answer ([`Confirm`]). A channel counts as subscribed only
//! once that confirmation arrived on the connection that carries it: [`Link::subscribe`](super::link::Link::subscribe)
//! returns then, not before. The link keeps the set of channels it was asked to listen on, and
//! every connection it opens after the first subscribes them all before any other request
//! (so a `PING` answered there is answered after their confirmations), whichever connection
//! an earlier confirmation came on. (redis-rs's manager, once a confirmation was lost, could
//! reconnect twice, see the channel confirmed on the connection it then discarded, and never
//! subscribe the one it kept.)

use std::collections::HashSet;

use std::sync::Mutex;

use redis::{PushKind, RedisResult, Value};

use super::wire::{Confirm, Wire};
use crate::sync::lock;

/// Tries of a subscription whose connection failed before the confirmation came (a lost
/// confirmation resets the connection): each on a new connection.
pub(super) const SUBSCRIBE_TRIES: usize = 2;

#[derive(Default)]
pub(crate) struct Subscriptions {
    pub(super) channels: Mutex<HashSet<Vec<u8>>>,
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
pub(super) fn change(name: &str, kind: PushKind, channel: &[u8]) -> (Vec<u8>, Confirm) {
    let bytes = redis::cmd(name).arg(channel).get_packed_command();
    let confirm = Confirm {
        kind,
        channel: channel.to_vec(),
    };
    (bytes, confirm)
}

/// A subscription change's answer: the confirmation (nothing), or the error it was refused with.
pub(super) fn confirmed(answer: Vec<Value>) -> RedisResult<()> {
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
