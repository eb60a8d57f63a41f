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
use std::sync::Arc;

tokio::task_local! {
    static SCOPE: Arc<Frame>;
}

/// One scope and the scopes it runs inside.
struct Frame {
    context: LockContext,
    /// The scope around this one, for a locked call's scope (its body re-enters what the
    /// calls around it hold); `None` for a [`LockContext::scope`], which stands for its
    /// context alone.
    parent: Option<Arc<Frame>>,
    /// Set for a [`LockContext::scope`]: neither enclosing scopes nor the task count.
    alone: bool,
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
///
/// # Locked calls
///
/// Each call of a locked fn (`#[distributed_lock]`, `#[read_lock]`, `#[write_lock]`) runs as
/// an owner of its own, so two calls joined in one task (`tokio::join!(debit(1, 10),
/// debit(1, 20))`) exclude each other. Its body also re-enters the holds of the calls around
/// it and of the task (or [`scope`](Self::scope)) they run in: a locked call made from inside
/// the body of another, directly or through awaited calls, re-enters the outer call's hold
/// instead of waiting for it.
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
            .try_with(|frame| frame.context)
            .unwrap_or_else(|_| Self::base())
    }

    /// The task (or, outside any task, the thread): the outermost context of every chain.
    fn base() -> LockContext {
        match tokio::task::try_id() {
            Some(id) => LockContext(Owner::Task(id)),
            None => LockContext(Owner::Thread(std::thread::current().id())),
        }
    }

    /// Which of a single node's connections this owner's commands travel on (modulo their
    /// number): a hash, so that tasks spread over them.
    pub(crate) fn lane(&self) -> u32 {
        use std::hash::BuildHasher as _;
        foldhash::fast::FixedState::with_seed(0).hash_one(self) as u32
    }

    /// A fresh identity, distinct from every task's and every other context's.
    #[allow(clippy::new_without_default)]
    pub fn new() -> LockContext {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        LockContext(Owner::Scope(NEXT.fetch_add(1, Ordering::Relaxed)))
    }

    /// Runs `future` as this owner, and only this owner: locks it takes count as this
    /// context's and re-enter this context's holds, not those of the task or of the scope the
    /// call is made in.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        let frame = Arc::new(Frame {
            context: self,
            parent: None,
            alone: true,
        });
        SCOPE.scope(frame, future).await
    }

    /// Runs one locked call as a fresh owner that also re-enters the holds around it (see
    /// [Locked calls](Self#locked-calls)).
    ///
    /// The holds around it are those of the scope this is called in, so it is called where
    /// its future is then awaited, as the locked fns' `run(..).await` does. Not an `async fn`:
    /// that would hold `future` twice in its own state and move it through its poll frame,
    /// which stays on the stack while the call's body runs, once per level of nesting.
    pub(crate) fn call<F: Future>(future: F) -> impl Future<Output = F::Output> {
        let frame = Arc::new(Frame {
            context: LockContext::new(),
            parent: SCOPE.try_with(Arc::clone).ok(),
            alone: false,
        });
        SCOPE.scope(frame, future)
    }

    /// Calls `found` with the current context, then each enclosing one, innermost first, and
    /// last the task (or thread) unless a [`scope`](Self::scope) stands in for it; returns the
    /// first context for which it says true.
    pub(crate) fn find_enclosing(
        mut found: impl FnMut(LockContext) -> bool,
    ) -> Option<LockContext> {
        let scoped = SCOPE.try_with(|frame| {
            let mut frame = frame;
            loop {
                if found(frame.context) {
                    return Ok(frame.context);
                }
                match &frame.parent {
                    Some(parent) => frame = parent,
                    None if frame.alone => return Err(false),
                    None => return Err(true),
                }
            }
        });
        match scoped {
            Ok(Ok(context)) => Some(context),
            // Ran out of scopes inside a `LockContext::scope`: the task does not count.
            Ok(Err(false)) => None,
            // No scope, or locked calls made directly in the task: the task counts.
            Err(_) | Ok(Err(true)) => {
                let base = Self::base();
                found(base).then_some(base)
            }
        }
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
        // Locked calls see their own context first, then the enclosing ones, then the task;
        // an explicit scope stands alone.
        let chain = || {
            let mut seen = Vec::new();
            LockContext::find_enclosing(|c| {
                seen.push(c);
                false
            });
            seen
        };
        // Each call is made where it is awaited (as the locked fns' `run(..).await`): it takes
        // the scope it is made in as its parent.
        let seen = LockContext::call(async { LockContext::call(async { chain() }).await }).await;
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[2], here);
        assert_ne!(seen[0], seen[1]);
        let other = LockContext::new();
        let seen = other
            .scope(async { LockContext::call(async { chain() }).await })
            .await;
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1], other);
        assert!(here.to_string().starts_with('t') || here.to_string().starts_with('h'));
    }
}
