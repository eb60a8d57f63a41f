//! Who "the current owner" is, for locks that care: the reentrant lock and the check that
//! stops a task from waiting on a non-reentrant lock it already holds.
//!
//! Async code has no stable thread (a task moves between worker threads at every `.await`,
//! and many tasks share one thread), so ownership follows the Tokio **task**. Outside any
//! task (inside `block_on`) the thread stands in, since `block_on` never moves. A spawned
//! task is a new owner; to let it act as its parent, pass the context on explicitly with
//! [`LockContext::scope`].

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

tokio::task_local! {
    static SCOPE: LockContext;
}

/// The identity that owns reentrant and read/write holds.
///
/// ```no_run
/// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
/// use distlock::LockContext;
/// let outer = locks.reentrant("job:9").acquire().await?;
/// let me = LockContext::current();
/// // The spawned task re-enters the parent's hold instead of waiting for it.
/// let locks2 = locks.clone();
/// tokio::spawn(me.scope(async move {
///     let inner = locks2.reentrant("job:9").try_acquire().await?;
///     inner.release().await
/// }))
/// .await
/// .expect("task")?;
/// outer.release().await
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockContext(Owner);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Owner {
    /// Made by [`LockContext::new`] and carried by [`LockContext::scope`].
    Scope(u64),
    /// The current Tokio task.
    Task(tokio::task::Id),
    /// No task: the thread inside `block_on`.
    Thread(std::thread::ThreadId),
}

impl LockContext {
    /// The owner identity of the code calling this: the innermost [`scope`](Self::scope), else
    /// the current Tokio task, else the current thread.
    pub fn current() -> LockContext {
        SCOPE
            .try_with(|c| *c)
            .unwrap_or_else(|_| match tokio::task::try_id() {
                Some(id) => LockContext(Owner::Task(id)),
                None => LockContext(Owner::Thread(std::thread::current().id())),
            })
    }

    /// A fresh identity, distinct from every task's and every other context's.
    #[allow(clippy::new_without_default)]
    pub fn new() -> LockContext {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        LockContext(Owner::Scope(NEXT.fetch_add(1, Ordering::Relaxed)))
    }

    /// Runs `future` as this owner: locks it takes re-enter this context's holds and count as
    /// this context's for release.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        SCOPE.scope(self, future).await
    }
}

impl fmt::Display for LockContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Owner::Scope(n) => write!(f, "s{n}"),
            Owner::Task(id) => write!(f, "t{id}"),
            // ThreadId has no stable numeric accessor; its Debug form is unique per thread.
            Owner::Thread(id) => {
                let digits: String = format!("{id:?}")
                    .chars()
                    .filter(char::is_ascii_digit)
                    .collect();
                write!(f, "h{digits}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LockContext;

    #[tokio::test]
    async fn tasks_are_distinct_owners_and_scopes_carry_identity() {
        let here = LockContext::current();
        assert_eq!(here, LockContext::current(), "stable within a task");
        let spawned = tokio::spawn(async { LockContext::current() })
            .await
            .unwrap();
        assert_ne!(here, spawned);
        let carried = tokio::spawn(here.scope(async { LockContext::current() }))
            .await
            .unwrap();
        assert_eq!(here, carried);
        assert_ne!(LockContext::new(), LockContext::new());
        assert!(here.to_string().starts_with('t') || here.to_string().starts_with('h'));
    }
}
