//! The system under test: its clients behind their fault proxies, running one step with a
//! fault, and the model's bookkeeping of holds.

use super::*;

impl Sut {
    pub(crate) fn new(modes: [Mode; LOCKS]) -> Sut {
        redis::cmd("FLUSHALL").exec(&mut admin()).expect("FLUSHALL");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let proxies: Vec<FaultProxy> = (0..CLIENTS)
            .map(|_| FaultProxy::start(&server().addr()).expect("fault proxy"))
            .collect();
        let clients = proxies
            .iter()
            .map(|p| {
                rt.block_on(
                    Client::builder(&p.url())
                        .response_timeout(RESPONSE_TIMEOUT)
                        .connect(),
                )
                .expect("connect")
            })
            .collect::<Vec<Client>>();
        // Each election is followed from the first client, which the faults hit as well.
        let observers = std::array::from_fn(|lock| {
            (modes[lock] == Mode::Election).then(|| {
                let election = clients[0].election(lock_name(lock)).ttl(LONG_TTL);
                let seen = rt.block_on(election.observe()).expect("observe");
                (seen, Cell::new(0))
            })
        });
        Sut {
            rt,
            modes,
            clients,
            proxies,
            contexts: (0..OWNERS).map(|_| LockContext::new()).collect(),
            holds: BTreeMap::new(),
            next_orphan: 1 << 32,
            max_fence: [0; LOCKS],
            unseen_fence: [false; LOCKS],
            intents: Vec::new(),
            observers,
            log: Vec::new(),
        }
    }

    pub(crate) fn client_of(owner: usize) -> usize {
        owner / CONTEXTS_PER_CLIENT
    }

    pub(crate) fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!(
            "{what}\nmodes: {:?}\nsteps:\n  {}\nholds:\n{:#?}",
            self.modes,
            self.log.join("\n  "),
            self.holds
        );
    }

    pub(crate) fn orphan(&mut self, hold: Hold) {
        let id = self.next_orphan;
        self.next_orphan += 1;
        self.holds.insert(
            id,
            Hold {
                guard: None,
                ..hold
            },
        );
    }

    /// Runs `f` (a future made by `make`) under `fault` on behalf of `owner`.
    pub(crate) fn run<T>(
        &self,
        owner: usize,
        fault: Fault,
        f: impl std::future::Future<Output = T>,
    ) -> T {
        let proxy = &self.proxies[Self::client_of(owner)];
        let scoped = self.contexts[owner].scope(f);
        match fault {
            Fault::None => self.rt.block_on(scoped),
            Fault::DropReply => {
                proxy.drop_next_reply();
                let out = self.rt.block_on(scoped);
                // A drop the operation did not use must not hit the next step.
                proxy.clear();
                self.heal(owner);
                out
            }
            Fault::Pause => {
                server().pause();
                let resumer = std::thread::spawn(|| {
                    std::thread::sleep(PAUSE);
                    server().resume();
                });
                let out = self.rt.block_on(scoped);
                resumer.join().expect("resume");
                out
            }
        }
    }

    /// After a reset connection, waits until the client answers again, so that the next
    /// step's outcome does not depend on how fast it reconnects.
    pub(crate) fn heal(&self, owner: usize) {
        let client = &self.clients[Self::client_of(owner)];
        let healed = poll(Duration::from_secs(3), || {
            self.rt.block_on(async {
                match client
                    .lock("model-probe")
                    .ttl(LONG_TTL)
                    .watchdog(false)
                    .try_acquire()
                    .await
                {
                    Ok(g) => g.release().await.is_ok(),
                    Err(_) => false,
                }
            })
        });
        if !healed {
            self.fail("client did not reconnect within 3 s");
        }
    }

    /// The mode of `lock` (`BOTH`: setnx, as each of its names is).
    pub(crate) fn mode(&self, lock: usize) -> Mode {
        self.modes.get(lock).copied().unwrap_or(Mode::Setnx)
    }

    pub(crate) fn kind(&self, lock: usize, read: bool) -> Kind {
        match self.mode(lock) {
            Mode::Setnx | Mode::Reentrant => Kind::Exclusive,
            Mode::Write => Kind::Write,
            Mode::ReadWrite if read => Kind::Read,
            Mode::ReadWrite => Kind::Write,
            Mode::Semaphore => Kind::Permit,
            Mode::Election => Kind::Leader,
        }
    }

    /// The holds that may be on `lock` (a name, or `BOTH`: on either name).
    pub(crate) fn on_lock(&self, lock: usize) -> impl Iterator<Item = &Hold> {
        self.holds.values().filter(move |h| {
            names(lock).iter().any(|&l| covers(h.lock, l)) && h.status != Status::Gone
        })
    }

    /// Marks every hold on `lock` (a name, or `BOTH`: either) matching `which` as gone
    /// (orphans are forgotten).
    pub(crate) fn gone(&mut self, lock: usize, which: impl Fn(&Hold) -> bool) {
        for hold in self.holds.values_mut() {
            if names(lock).iter().any(|&l| covers(hold.lock, l)) && which(hold) {
                hold.status = Status::Gone;
            }
        }
        self.holds
            .retain(|_, h| h.guard.is_some() || h.status != Status::Gone);
    }
}
