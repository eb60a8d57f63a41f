//! What a call costs the server: a fixed few commands, whatever the crowd on the name.

use super::*;

/// Server commands (the script call and every command it ran) between two `INFO
/// commandstats` readings: not the readings' own (`INFO`, and the `CLIENT SETINFO` of the
/// connection each opens, which Redis 6.2 counts as `client`, having no subcommand counts).
fn commands(before: &std::collections::BTreeMap<String, u64>, server: &RedisServer) -> u64 {
    server
        .commandstats()
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "client|setinfo" | "client"))
        .map(|(name, calls)| calls - before.get(name).copied().unwrap_or(0))
        .sum()
}

/// Takes `n` read holds of `name` as as many owners, kept without renewal (nothing runs on
/// the server behind the test's back).
async fn crowd(locks: &Client, name: &str, n: usize) -> Vec<distlock::Guard> {
    let mut held = Vec::new();
    for _ in 0..n {
        let read = locks
            .read(name)
            .ttl(Duration::from_secs(60))
            .watchdog(false)
            .try_acquire();
        held.push(as_other_owner(read).await.expect("readers share"));
    }
    held
}

/// One read acquisition as another owner, without renewal, from one call site: the first
/// hold of a call site also writes the process's record (see docs/operations.md), which the
/// tests take out of the count by taking one read here first.
async fn read(locks: &Client, name: &str) -> Result<distlock::Guard, Error> {
    as_other_owner(locks.read(name).watchdog(false).try_acquire()).await
}

/// A server and a client whose call site in `read` has taken its first hold, so that the
/// process record it writes then is not counted.
async fn measured_client() -> (RedisServer, Client) {
    let server = RedisServer::start();
    let locks = client(&server).await;
    read(&locks, "first")
        .await
        .expect("free")
        .release()
        .await
        .expect("held");
    (server, locks)
}

/// A reader joining readers already inside, and leaving while they stay: the calls of the
/// 9:1 mix. Each costs the script call, the server's clock, one read of the hash (with the
/// owner's own lease in it) and the few writes of its own entries (acquire: its reader entry
/// and its hold, with the hash's expiry where its lease is the latest; release: its hold and
/// entry removed), the same with 5 readers inside as with 500. Before the summaries in the
/// hash, an acquisition here also asked for the hash's PTTL, counted the waiting writers,
/// looked for expired readers and set the readers' expiry (9 commands; 11 where its lease was
/// the latest, all three keys' expiry stretched), and a release looked for expired readers
/// too (9); until the owner's lease was kept in the hash, a release looked it up in the
/// readers' set and then looked for the latest lease left (7).
#[tokio::test]
async fn a_read_call_costs_a_fixed_few_commands_whatever_the_crowd() {
    let (server, locks) = measured_client().await;
    for (name, inside) in [("few", 5), ("many", 500)] {
        let _held = crowd(&locks, name, inside).await;
        let mut per_acquire = Vec::new();
        let mut per_release = Vec::new();
        for _ in 0..5 {
            let before = server.commandstats();
            let held = read(&locks, name).await.expect("readers share");
            per_acquire.push(commands(&before, &server));
            let before = server.commandstats();
            held.release().await.expect("held");
            per_release.push(commands(&before, &server));
        }
        assert!(
            per_acquire.iter().all(|&n| n <= 6),
            "{inside} readers inside: commands per read acquisition {per_acquire:?}"
        );
        assert!(
            per_release.iter().all(|&n| n <= 5),
            "{inside} readers inside: commands per read release {per_release:?}"
        );
    }
}

/// The script calls (`EVALSHA`, or `EVAL` where a script was not loaded yet) since `before`.
fn script_calls(before: &std::collections::BTreeMap<String, u64>, server: &RedisServer) -> u64 {
    server
        .commandstats()
        .iter()
        .filter(|(name, _)| matches!(name.as_str(), "evalsha" | "eval"))
        .map(|(name, calls)| calls - before.get(name).copied().unwrap_or(0))
        .sum()
}

/// A writer that waits behind readers registers its intent: each of its attempts costs a
/// fixed few commands too, and a reader that comes while the intent is live is turned away
/// for a few more (it looks for live intents), no more with 500 readers inside than with 5.
#[tokio::test]
async fn a_waiting_writers_attempts_and_the_readers_it_keeps_out_cost_a_fixed_few_commands() {
    let (server, locks) = measured_client().await;
    let raw = server.async_connection().await;
    for (name, inside) in [("few-w", 5), ("many-w", 500)] {
        let held = crowd(&locks, name, inside).await;
        let before = server.commandstats();
        let writer = {
            let locks = locks.clone();
            let name = name.to_owned();
            tokio::spawn(as_other_owner(async move {
                locks
                    .write(name)
                    .wait(EVENT_LIMIT)
                    .acquire()
                    .await
                    .map(drop)
            }))
        };
        // ZCARD, which no script sends, so the polling can be told from the writer's calls:
        // the intent and the set's placeholder. (The writer's client subscribes to the
        // lock's channel too, once: that is its wake-up, not its attempts.)
        let intents = intents_key(name);
        let waiting = wait_until_async(EVENT_LIMIT, || {
            let mut raw = raw.clone();
            let intents = intents.clone();
            async move { raw.zcard::<_, u64>(&intents).await.expect("ZCARD") >= 2 }
        })
        .await;
        assert!(waiting, "no writer intent appeared in {name}");
        let stats = server.commandstats();
        let sent = |name: &str| {
            stats.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0)
        };
        let polls = sent("zcard") + sent("subscribe");
        let per_attempt =
            (commands(&before, &server) - polls) as f64 / script_calls(&before, &server) as f64;
        assert!(
            per_attempt <= 7.0,
            "{inside} readers inside: {per_attempt} commands per attempt of a waiting writer"
        );
        // The writer renews its intent now and then: a reading that caught one of its
        // attempts too is taken again.
        let busy = loop {
            let before = server.commandstats();
            let turned_away = read(&locks, name).await;
            assert!(
                matches!(turned_away, Err(Error::Busy { .. })),
                "{turned_away:?}"
            );
            if script_calls(&before, &server) == 1 {
                break commands(&before, &server);
            }
        };
        assert!(
            busy <= 6,
            "{inside} readers inside: a reader turned away cost {busy} commands"
        );
        drop(held);
        writer
            .await
            .expect("writer task")
            .expect("the writer gets in once the readers left");
    }
}
