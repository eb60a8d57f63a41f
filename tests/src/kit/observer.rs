//! Mutual-exclusion probes that several processes share through one Redis.

use std::time::Duration;

use distlock::FencingToken;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, RedisResult, Script};

const OBSERVER_TIMEOUT: Duration = Duration::from_secs(5);

/// Occupancy, violation count and high-water mark updated as one atomic step.
const ENTER_SCRIPT: &str = r"
local occupancy = redis.call('INCR', KEYS[1])
if occupancy > 1 then
  redis.call('INCR', KEYS[2])
end
if occupancy > tonumber(redis.call('GET', KEYS[3]) or '0') then
  redis.call('SET', KEYS[3], occupancy)
end
return occupancy
";

/// [`ENTER_SCRIPT`] plus a look at another probe: counts an entry that finds someone inside
/// the other probe (a reader finding a writer, or a writer finding a reader). Both sides
/// increment their own occupancy before looking at the other's, in one atomic step, so of two
/// overlapping sections the later one to enter always sees the earlier.
const ENTER_EXCLUDING_SCRIPT: &str = r"
local occupancy = redis.call('INCR', KEYS[1])
if occupancy > 1 then
  redis.call('INCR', KEYS[2])
end
if occupancy > tonumber(redis.call('GET', KEYS[3]) or '0') then
  redis.call('SET', KEYS[3], occupancy)
end
if tonumber(redis.call('GET', KEYS[4]) or '0') > 0 then
  redis.call('INCR', KEYS[5])
end
return occupancy
";

/// Accepts a holder's fencing token only if it is larger than every one seen before (what a
/// fenced resource does), counting the refusals.
const FENCE_SCRIPT: &str = r"
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) <= last then
  redis.call('INCR', KEYS[2])
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
";

/// Accepts a leader's action when its term is at least every term accepted before (from the
/// same holder, for an equal term) and the server's clock has not passed the leader's
/// deadline; counts the refusals: `stale-terms` (an older term acting after a newer one, or
/// two holders acting in one term: two leaders at once) and `late` (past the deadline the
/// leader gave). Each newly accepted term is appended to `terms`.
const LEAD_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(ARGV[3]) then
  redis.call('INCR', KEYS[4])
  return -2
end
local term = tonumber(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if term < last or (term == last and redis.call('GET', KEYS[2]) ~= ARGV[2]) then
  redis.call('INCR', KEYS[3])
  return -1
end
if term > last then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], ARGV[2])
  redis.call('RPUSH', KEYS[5], ARGV[1])
end
redis.call('INCR', KEYS[6])
return 1
";

/// Records what the holders of a distributed lock actually did, in a Redis
/// server that is *not* one of the lock's nodes and never receives faults.
///
/// Every process (or task) that takes part in a safety test connects its own
/// `Observer` with the same `name` and, while it believes it holds the lock,
/// calls [`enter`](Self::enter) … [`bump`](Self::bump) … [`exit`](Self::exit).
/// Afterwards a test asserts `violations() == 0` and `counter() == acked()`.
///
/// Keys used on the observer server: `occ:<name>`, `violations:<name>`,
/// `max:<name>`, `counter:<name>`, `acked:<name>`, `fence:<name>`, `stale:<name>`; for
/// leaders ([`lead`](Self::lead)): `term:<name>`, `leader:<name>`, `stale-terms:<name>`,
/// `late:<name>`, `terms:<name>`, `acts:<name>`.
///
/// Methods panic (with the observer's name and address) if the observer
/// server cannot be reached: it is test infrastructure, not the system under test.
#[derive(Clone)]
pub struct Observer {
    conn: MultiplexedConnection,
    name: String,
    url: String,
    enter_script: Script,
    fence_script: Script,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("name", &self.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Observer {
    /// Connects to the observer server at `url`; `name` namespaces the keys
    /// so independent tests can share one server.
    ///
    /// # Panics
    /// If the connection fails.
    pub async fn connect(url: &str, name: &str) -> Self {
        Self::try_connect(url, name)
            .await
            .unwrap_or_else(|e| panic!("observer {name:?}: connecting to {url}: {e}"))
    }

    /// Like [`connect`](Self::connect) but returns the failure instead of panicking.
    pub async fn try_connect(url: &str, name: &str) -> RedisResult<Self> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(OBSERVER_TIMEOUT))
            .set_response_timeout(Some(OBSERVER_TIMEOUT));
        let conn = redis::Client::open(url)?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Self {
            conn,
            name: name.to_owned(),
            url: url.to_owned(),
            enter_script: Script::new(ENTER_SCRIPT),
            fence_script: Script::new(FENCE_SCRIPT),
        })
    }

    /// The namespace given to [`connect`](Self::connect).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Marks the caller as inside the critical section. Returns the
    /// occupancy including the caller; anything above 1 is counted as a
    /// violation and the maximum is recorded.
    pub async fn enter(&self) -> u64 {
        let result = self
            .enter_script
            .key(self.key("occ"))
            .key(self.key("violations"))
            .key(self.key("max"))
            .invoke_async(&mut self.conn.clone())
            .await;
        self.check("enter", result)
    }

    /// Like [`enter`](Self::enter), for two probes that must never be occupied at the same
    /// time, such as the readers and the writers of one read/write lock (each side with its
    /// own observer name on the same server): also counts, in
    /// [`overlaps`](Self::overlaps), an entry that finds anyone inside the probe named
    /// `other`. Leave with [`exit`](Self::exit). For a probe of readers, `violations` and
    /// `max_occupancy` count readers sharing the lock, which is allowed.
    pub async fn enter_excluding(&self, other: &str) -> u64 {
        static SCRIPT: std::sync::LazyLock<Script> =
            std::sync::LazyLock::new(|| Script::new(ENTER_EXCLUDING_SCRIPT));
        let result = SCRIPT
            .key(self.key("occ"))
            .key(self.key("violations"))
            .key(self.key("max"))
            .key(format!("occ:{other}"))
            .key(self.key("overlaps"))
            .invoke_async(&mut self.conn.clone())
            .await;
        self.check("enter_excluding", result)
    }

    /// Entries by [`enter_excluding`](Self::enter_excluding) that found the other probe
    /// occupied.
    pub async fn overlaps(&self) -> u64 {
        self.read("overlaps").await
    }

    /// Marks the caller as having left the critical section. Returns the
    /// remaining occupancy (negative only if `exit` was called without `enter`).
    pub async fn exit(&self) -> i64 {
        let result = self.conn.clone().decr(self.key("occ"), 1).await;
        self.check("exit", result)
    }

    /// Increments `counter:<name>` with a deliberately NON-atomic
    /// read-modify-write (GET, yield, optional `pause`, SET), so holders that
    /// overlap lose updates; then increments `acked:<name>` atomically.
    ///
    /// With correct mutual exclusion `counter() == acked()` at the end.
    /// A non-zero `pause` widens the race window.
    pub async fn bump(&self, pause: Duration) {
        let mut conn = self.conn.clone();
        let counter = self.key("counter");
        let seen: Option<u64> = self.check("bump GET", conn.get(&counter).await);
        tokio::task::yield_now().await;
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        let next = seen.unwrap_or(0) + 1;
        self.check::<()>("bump SET", conn.set(&counter, next).await);
        self.check::<()>("bump INCR acked", conn.incr(self.key("acked"), 1).await);
    }

    /// Presents a fencing token as a fenced resource would see it: accepted (true) only if it
    /// is larger than every token presented before under this name.
    pub async fn fence(&self, token: FencingToken) -> bool {
        let result: RedisResult<i64> = self
            .fence_script
            .key(self.key("fence"))
            .key(self.key("stale"))
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await;
        self.check("fence", result) == 1
    }

    /// An action of the leader of an election, as a store that takes the leader's term and
    /// deadline would see it: accepted (1) when `term` is at least every term accepted before
    /// (and, for an equal term, comes from the same `holder`) and the observer server's clock
    /// has not passed `deadline` (what the leader's lease had left when it decided to act,
    /// from the wall clock of the same host); refused as stale (-1: an older term after a
    /// newer one acted, or two holders acting in one term) or as late (-2).
    pub async fn lead(
        &self,
        term: FencingToken,
        holder: &str,
        deadline: std::time::SystemTime,
    ) -> i64 {
        static SCRIPT: std::sync::LazyLock<Script> =
            std::sync::LazyLock::new(|| Script::new(LEAD_SCRIPT));
        let deadline_ms = deadline
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let result = SCRIPT
            .key(self.key("term"))
            .key(self.key("leader"))
            .key(self.key("stale-terms"))
            .key(self.key("late"))
            .key(self.key("terms"))
            .key(self.key("acts"))
            .arg(term)
            .arg(holder)
            .arg(deadline_ms)
            .invoke_async(&mut self.conn.clone())
            .await;
        self.check("lead", result)
    }

    /// Leaders' actions refused by [`lead`](Self::lead) as stale: two leaders at once.
    pub async fn stale_terms(&self) -> u64 {
        self.read("stale-terms").await
    }

    /// Leaders' actions refused by [`lead`](Self::lead) as late.
    pub async fn late(&self) -> u64 {
        self.read("late").await
    }

    /// Leaders' actions accepted by [`lead`](Self::lead).
    pub async fn acts(&self) -> u64 {
        self.read("acts").await
    }

    /// The terms [`lead`](Self::lead) accepted, in the order they first acted.
    pub async fn terms(&self) -> Vec<FencingToken> {
        let result = self.conn.clone().lrange(self.key("terms"), 0, -1).await;
        let terms: Vec<u64> = self.check("terms", result);
        terms.into_iter().map(FencingToken::new).collect()
    }

    /// Fencing tokens refused by [`fence`](Self::fence) for not being larger than the last.
    pub async fn stale_tokens(&self) -> u64 {
        self.read("stale").await
    }

    /// Number of `enter` calls that found someone else already inside.
    pub async fn violations(&self) -> u64 {
        self.read("violations").await
    }

    /// Highest occupancy ever observed (1 when exclusion held).
    pub async fn max_occupancy(&self) -> u64 {
        self.read("max").await
    }

    /// Current occupancy.
    pub async fn occupancy(&self) -> i64 {
        let result: RedisResult<Option<i64>> = self.conn.clone().get(self.key("occ")).await;
        self.check("occupancy", result).unwrap_or(0)
    }

    /// Value of the non-atomic counter.
    pub async fn counter(&self) -> u64 {
        self.read("counter").await
    }

    /// Number of completed [`bump`](Self::bump) calls.
    pub async fn acked(&self) -> u64 {
        self.read("acked").await
    }

    /// Deletes all of this observer's keys.
    pub async fn reset(&self) {
        let keys = [
            "occ",
            "violations",
            "max",
            "counter",
            "acked",
            "fence",
            "stale",
            "term",
            "leader",
            "stale-terms",
            "late",
            "terms",
            "acts",
        ]
        .map(|k| self.key(k));
        let result = self.conn.clone().del(&keys).await;
        self.check::<()>("reset", result);
    }

    fn key(&self, kind: &str) -> String {
        format!("{kind}:{}", self.name)
    }

    async fn read(&self, kind: &str) -> u64 {
        let result: RedisResult<Option<u64>> = self.conn.clone().get(self.key(kind)).await;
        self.check(kind, result).unwrap_or(0)
    }

    fn check<T>(&self, what: &str, result: RedisResult<T>) -> T {
        result.unwrap_or_else(|e| {
            panic!(
                "observer {:?} at {}: {what} failed: {e}",
                self.name, self.url
            )
        })
    }
}
