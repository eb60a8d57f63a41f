//! Following an election: who leads and their term, as a watch channel kept up to date by one
//! background task per [`Election::observe`] call.
//!
//! The task listens on the lock's wake-up channel as an observer (every message wakes it, none
//! is taken from a waiter) and reads the lock after each message, and when the lease it last
//! saw ends (a leader that died frees nothing: its key simply expires), and at least once a
//! ttl. Each read also marks the lock as waited for, so that the leader's resignation
//! publishes even where no candidate waits (`mark.lua`).

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::algorithm::{evalsha, Lua};
use crate::error::Error;
use crate::identity::Described;
use crate::inspect::{inspected_keys, parse_info, Holder, LockInfo, INSPECTED_KEYS};
use crate::key::{Kind, LockKey};
use crate::lease;
use crate::mode::{LockMode, Primitive};
use crate::notify::Subscription;
use crate::runtime::Shared;
use crate::token::FencingToken;

use super::Election;

/// The inspection's read of the lock, behind the waited-for mark.
static OBSERVE: LazyLock<Lua> = LazyLock::new(|| Lua::new(script_source()));

pub(super) fn script_source() -> &'static str {
    concat!(
        include_str!("mark.lua"),
        include_str!("../inspect/inspect.lua")
    )
}

/// First pause before reading again after a failed read; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(20);
/// Longest pause between reads while they fail (never above the ttl).
const MAX_RETRY: Duration = Duration::from_secs(1);

/// Who leads an election, as [`Election::observe`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's term: its [`Leadership::term`](super::Leadership::term).
    pub term: FencingToken,
    /// Who leads: its process (tag, host, pid), where it campaigned and since when, as
    /// [`Client::inspect`](crate::Client::inspect) describes a holder.
    pub holder: Holder,
}

impl Election {
    /// Follows who leads: a [`watch::Receiver`] holding the current [`Leader`] (`None` while
    /// nobody leads), read before this returns and kept up to date by a background task
    /// until every receiver is dropped (clone the receiver rather than observing twice; the
    /// task keeps the client's connections open meanwhile).
    ///
    /// The changes come as events: a resignation is seen within about a round trip (the
    /// release publishes on the election's channel: every read marks the lock so that it
    /// does), and so is a new leader (it says so on that channel). A leader that died is seen
    /// gone when its lease runs out on the server: the observer reads again when the lease it
    /// last saw ends, and at least once a ttl; it never polls in a loop. While Redis cannot
    /// be read, the leader last seen is kept until its lease as then seen ends, and `None`
    /// follows. On a quorum, a leader is reported once a majority of nodes holds it, with the
    /// term that a majority of their counters reach: the leader's own term once its campaign
    /// returned.
    ///
    /// Fails when the name or ttl cannot be used, the name is held as a lock of another
    /// mode, or the first read failed (Redis unreachable: try again).
    ///
    /// ```no_run
    /// # async fn demo(client: distlock::Client) -> Result<(), distlock::Error> {
    /// let mut leader = client.election("billing-scheduler").observe().await?;
    /// loop {
    ///     match &*leader.borrow_and_update() {
    ///         Some(now) => println!("term {} led by pid {:?}", now.term, now.holder.pid),
    ///         None => println!("nobody leads"),
    ///     }
    ///     if leader.changed().await.is_err() {
    ///         break; // the runtime is shutting down
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn observe(&self) -> Result<watch::Receiver<Option<Leader>>, Error> {
        let key = self.shared.key_as(Primitive::Election, &self.name)?;
        let ttl = Duration::from_millis(lease::ttl_ms(self.settings.ttl)?);
        let tasks = self.shared.nodes.tasks.clone();
        if tasks.is_closed() {
            return Err(Error::ShutDown {
                name: key.lock_name(),
            });
        }
        let (ready, first) = oneshot::channel();
        let watcher = Watcher {
            shared: self.shared.clone(),
            key,
            ttl,
            known: None,
        };
        // Ends with the client's shutdown: its receivers then see the sender gone.
        let spawned = tasks.clone().spawn(async move {
            tokio::select! {
                () = watcher.run(ready) => {}
                () = tasks.closed() => {}
            }
        });
        if !spawned {
            return Err(Error::config("observing an election needs a Tokio runtime"));
        }
        first.await.unwrap_or_else(|_| {
            Err(Error::config(
                "the election's observer stopped before its first read",
            ))
        })
    }
}

/// What one read found.
struct Seen {
    leader: Option<Leader>,
    /// How long the leader's lease has left, as read.
    remaining: Option<Duration>,
}

impl Seen {
    /// Nobody leads.
    const NOBODY: Seen = Seen {
        leader: None,
        remaining: None,
    };

    /// How long to wait for a message before reading again: until the lease read ends (the
    /// leader may have died), and at most a ttl (the mark's lifetime).
    fn pause(&self, ttl: Duration) -> Duration {
        match self.remaining {
            // +1 ms: PTTL rounds down, and the key must be gone when read again.
            Some(left) => left.min(ttl) + Duration::from_millis(1),
            None => ttl,
        }
    }
}

/// One observation of one election.
struct Watcher {
    shared: Arc<Shared>,
    key: LockKey,
    ttl: Duration,
    /// The holder last described, with what its process's record said: looked up again only
    /// when another holder leads.
    known: Option<Holder>,
}

type Ready = oneshot::Sender<Result<watch::Receiver<Option<Leader>>, Error>>;

impl Watcher {
    /// Reads the lock after every message on its channel and when its lease may have ended,
    /// sending each change, until every receiver is gone. The first read's outcome goes to
    /// `ready`.
    async fn run(mut self, ready: Ready) {
        let shared = self.shared.clone();
        let notifier = &shared.notifier;
        let mut ready = Some(ready);
        let mut sender: Option<watch::Sender<Option<Leader>>> = None;
        let mut subscription: Option<Subscription> = None;
        // The pauses before reading again after a failed read, and before listening again
        // after a failed subscription.
        let (mut retry, mut relisten) = (FIRST_RETRY, FIRST_RETRY);
        // Until when the leader last read may still lead.
        let mut trusted_until = None;
        loop {
            // Listening before reading: a message sent after the read is heard.
            subscription = match subscription.take() {
                None => notifier.observe(&self.key).await.ok(),
                Some(sub) => {
                    notifier.resubscribe(&sub).await;
                    Some(sub)
                }
            };
            let changed = subscription.as_ref().map(Subscription::changed);
            let mut changed = std::pin::pin!(changed);
            if let Some(changed) = changed.as_mut().as_pin_mut() {
                changed.enable();
            }
            let pause = match self.read().await {
                Ok(seen) => {
                    retry = FIRST_RETRY;
                    let pause = seen.pause(self.ttl);
                    trusted_until = seen.remaining.map(|left| Instant::now() + left);
                    match &sender {
                        Some(sender) => publish(sender, seen.leader),
                        None => {
                            let (first, receiver) = watch::channel(seen.leader);
                            let Some(Ok(())) = ready.take().map(|r| r.send(Ok(receiver))) else {
                                return;
                            };
                            sender = Some(first);
                        }
                    }
                    pause
                }
                Err(e) => {
                    let Some(sender) = &sender else {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(Err(e));
                        }
                        return;
                    };
                    if trusted_until.is_none_or(|until| until <= Instant::now()) {
                        publish(sender, None);
                    }
                    if e.is_transient() {
                        let pause = retry;
                        retry = (retry * 2).min(MAX_RETRY).min(self.ttl);
                        pause
                    } else {
                        // The application's data or another mode's lock at the name: look
                        // again now and then, in case it goes.
                        self.ttl
                    }
                }
            };
            let Some(sender) = &sender else {
                return;
            };
            // Not listening (the subscription failed): listen again soon rather than after
            // the whole pause.
            let pause = if subscription.is_none() {
                let soon = relisten.min(pause);
                relisten = (relisten * 2).min(MAX_RETRY).min(self.ttl);
                soon
            } else {
                relisten = FIRST_RETRY;
                pause
            };
            tokio::select! {
                biased;
                () = sender.closed() => return,
                () = async {
                    match changed.as_mut().as_pin_mut() {
                        Some(changed) => changed.await,
                        None => std::future::pending().await,
                    }
                } => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Who leads now, by one read of every node (see `Nodes::read_every`): the holder a
    /// majority of nodes agree on, with the term and lease that majority reaches.
    async fn read(&mut self) -> Result<Seen, Error> {
        let shared = self.shared.clone();
        let key = &self.key;
        let mut cmd = evalsha(
            &OBSERVE,
            INSPECTED_KEYS + 1,
            INSPECTED_KEYS + 2,
            7 * key.lock().len() + 80,
        );
        inspected_keys(&mut cmd, key);
        cmd.arg(key.helper_arg(Kind::Waited))
            .arg(self.ttl.as_millis().to_string());
        // An election's lock is a setnx lock: it has no permits.
        let parse = |reply| parse_info(key, reply).map(|(info, holder, _)| (info, holder));
        let readings = shared.nodes.read_every(key, &OBSERVE, &cmd, parse).await?;
        if let Some(held_as) = readings
            .all()
            .find_map(|(_, (info, _))| info.mode.filter(|&mode| mode != LockMode::SetNx))
        {
            return Err(Error::ModeConflict {
                name: key.lock_name(),
                held_as,
                requested: LockMode::SetNx,
            });
        }
        // The holder a majority of nodes agree on (one node: the holder), if any.
        let owner = |(info, _): &Reading| info.holder.as_ref().map(|h| h.owner.clone());
        let Some(agreed) = readings.agreed(owner) else {
            return Ok(Seen::NOBODY);
        };
        let Some(&(node, (info, _))) = agreed.answers.first() else {
            return Ok(Seen::NOBODY);
        };
        if info.holder.is_none() {
            return Ok(Seen::NOBODY);
        }
        let term = agreed
            .least(|(info, _)| info.fencing_token.unwrap_or(FencingToken::new(0)))
            .unwrap_or(FencingToken::new(0));
        let remaining = agreed.least(|(info, _)| info.remaining.unwrap_or_default());
        let Some((info, described)) = readings.into_answer(node) else {
            return Ok(Seen::NOBODY);
        };
        let holder = self.describe(node, info, described).await;
        Ok(Seen {
            leader: Some(Leader { term, holder }),
            remaining,
        })
    }

    /// The holder of `info`, with what its process's record says (looked up on `node` only
    /// when another holder than the last leads).
    async fn describe(
        &mut self,
        node: usize,
        info: LockInfo,
        described: Option<Described>,
    ) -> Holder {
        let mut holder = info.holder.unwrap_or_default();
        if let Some(known) = self.known.as_ref().filter(|k| k.owner == holder.owner) {
            return known.clone();
        }
        if let Some(described) = described {
            let (nodes, prefix) = (&self.shared.nodes, &self.shared.prefix);
            (holder.host, holder.pid, holder.site) = nodes.look_up(node, prefix, &described).await;
        }
        self.known = Some(holder.clone());
        holder
    }
}

/// One node's reading of the election's lock, and its holder's description.
type Reading = (LockInfo, Option<Described>);

/// Sends `leader` to the receivers if it is another leader or term than they have.
fn publish(sender: &watch::Sender<Option<Leader>>, leader: Option<Leader>) {
    sender.send_if_modified(|current| {
        let same = match (&*current, &leader) {
            (Some(a), Some(b)) => a.term == b.term && a.holder.owner == b.holder.owner,
            (None, None) => true,
            _ => false,
        };
        if !same {
            *current = leader;
        }
        !same
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(term: u64, owner: &str) -> Option<Leader> {
        Some(Leader {
            term: FencingToken::new(term),
            holder: Holder {
                owner: owner.into(),
                ..Holder::default()
            },
        })
    }

    #[test]
    fn receivers_hear_of_another_leader_or_term_only() {
        let (sender, mut receiver) = watch::channel(None);
        publish(&sender, None);
        assert!(!receiver.has_changed().unwrap());
        publish(&sender, leader(7, "a"));
        assert!(receiver.has_changed().unwrap());
        receiver.mark_unchanged();
        let mut same = leader(7, "a");
        if let Some(l) = &mut same {
            l.holder.pid = Some(1);
        }
        publish(&sender, same);
        assert!(!receiver.has_changed().unwrap());
        publish(&sender, leader(8, "a"));
        assert!(receiver.has_changed().unwrap());
        receiver.mark_unchanged();
        publish(&sender, leader(8, "b"));
        assert!(receiver.has_changed().unwrap());
        receiver.mark_unchanged();
        publish(&sender, None);
        assert_eq!(*receiver.borrow(), None);
    }

    #[test]
    fn a_reader_waits_for_the_lease_it_saw_and_at_most_a_ttl() {
        let ttl = Duration::from_secs(10);
        let seen = |remaining| Seen {
            leader: None,
            remaining,
        };
        assert_eq!(seen(None).pause(ttl), ttl);
        assert_eq!(
            seen(Some(Duration::from_secs(3))).pause(ttl),
            Duration::from_millis(3001)
        );
        assert_eq!(
            seen(Some(Duration::from_secs(60))).pause(ttl),
            ttl + Duration::from_millis(1)
        );
    }
}
