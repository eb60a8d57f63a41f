/*
 * wakeup.pml: the wake-up path. How a release published by a script wakes the waiters of one
 * process, and why a waiter does not sleep through a release while the lock (a permit, the
 * read side) is free for it. The other models leave this out ("waiting is try again later").
 *
 * Mirrors distlock/src/channels.rs (`Channel`, `Channels::on_push`), notify.rs
 * (`Notifier::join`, `Subscription::released`), wait.rs (`Waiter::attempting`, `pause`,
 * `sleep_subscribed`) and the scripts' busy answers and publishes: semaphore/acquire.lua
 * (`{0, first permit's lease end}`), semaphore/release.lua (`permit`), rwlock/read_acquire.lua
 * (`{0, writer's lease end}`, `{0, first other intent's end}`), rwlock/prelude.lua
 * `others_intend`, rwlock/write_release.lua (`all`). spec/README.md maps each step to its lines.
 *
 * THE RULE (what docs/design.md points to)
 *
 *   One process's waiters for one lock share one channel entry: a count `wake_alls` and two
 *   tokio `Notify`s, `released` (waiters that take the lock alone: setnx, reentrant, writers)
 *   and `released_shared` (waiters that may share it: readers, semaphore permits). A Notify
 *   wakes a waiter already registered on it, or, if none is, keeps ONE permit for the next
 *   to register (never more); `notify_waiters` wakes every registered waiter and keeps none.
 *   Each message published on the lock's channel is handled by `on_push`:
 *
 *     payload          published by                       count  wakes
 *     empty, or an id  a setnx/reentrant/many release,    no     one `released` and one
 *                      the last reader leaving (no               `released_shared` (an id
 *                      intent), a give-back (held_as.lua)        heard before: nobody)
 *     `all`            a writer's release or withdrawal   yes    every registered
 *                      (write_release.lua), force_unlock         `released_shared` and one
 *                                                                more (stored if none is
 *                                                                registered), one `released`
 *     `writer`         the last reader leaving while      yes    one `released`, no reader
 *                      intents stand (read_release.lua)
 *     `permit`         a semaphore's release              yes    one `released` and one
 *                                                                `released_shared`
 *     `taken`          a new leader (election)            no     nobody (observers only)
 *
 *   A subscription made by a waiter counts too (`Notifier::join`: a release just before it
 *   reached nobody here). A waiter reads the count when it sends an attempt
 *   (`Waiter::attempting`) and again once the busy answer is in, just before it sleeps
 *   (`sleep_subscribed`); if the count moved it attempts again at once instead of sleeping.
 *   That is why a waiter whose attempt was in flight when a release came cannot sleep through
 *   it: the release ran on the server after the attempt did (or the attempt would have seen
 *   it), so its message is handled after the count was read at the send; it is handled
 *   either before the check (the count moved: attempt again), or after the waiter registered
 *   on the Notify (its wake-up finds the waiter there). A release that frees the lock for one
 *   need not be counted: one stored permit wakes the one waiter that sleeps next, and one
 *   waiter is all that can get in. A release that frees it for more than one (a writer
 *   leaving: every reader; two permits freed together: two waiters) must be counted, or the
 *   second waiter in flight sleeps on a permit the first one took. A sleep ends at the
 *   latest at its cap, the end the busy answer named (the holder's lease, the first permit's
 *   lease, the first other writer's intent): what ends without a message (a lease or an
 *   intent running out, a holder that crashed) ends the sleep then.
 *
 *   The argument needs the check and the registration to be one step as far as `on_push` is
 *   concerned. In the code they are not: the count is compared in `sleep_subscribed`, and the
 *   `Notified` future is created and first polled later, in `Subscription::released`, with no
 *   await between but on another thread than `on_push` (a multi-threaded runtime): see
 *   finding 4 in spec/README.md (the default of this model, and its control runs).
 *
 * WHAT IS MODELLED
 *
 *   One process P with two waiters (W0, W1) of one lock, both using one Notify; the
 *   releasers are other processes; P's pushes arrive in order on one connection (`pending`
 *   messages in transit, handled one at a time by `OnPush`). Abstract time (common.pml,
 *   clock.pml): leases, intents, the waiters' caps and P's `holder_until` count down per tick.
 *
 *   Default: the semaphore, 2 permits, both held at the start by other processes H0 and H1,
 *   each releasing at any moment (publishing `permit`) or never (its lease ends in silence:
 *   a crash); W0 and W1 each want one permit (and keep it). A busy answer names the first
 *   permit's lease end.
 *   READERS: the read/write lock; writer H of another process holds the write lock and
 *   releases it at any moment (publishing `all`) or never (its lease ends); writer C of a
 *   third process waits for it with an intent (it keeps readers out) and has died: it never
 *   withdraws, nothing is published when the intent lapses. W0 and W1 are readers of P. The
 *   leases and the intent start with any length from 1 to 3 ticks (the intent may end
 *   before or after the lease).
 *
 *   A waiter: attempt (`attempting` reads the count; the script runs; one step), the reply
 *   handled (the first waiter to sleep joins and subscribes, which counts, and attempts at
 *   once: `join`; then the count check; `holder_seen` when the answer named a time),
 *   registration on the Notify (the `Notified` created and polled: a stored permit is taken
 *   at once), asleep until woken (then it attempts) or its cap passes. At the cap: a later
 *   `holder_until` another local waiter learned means sleep on (a new `Notified`); else it
 *   attempts (the probe: `wait.rs` lets one waiter attempt for the others and the others
 *   wait for its outcome, which is one attempt sooner or later; the model lets each attempt).
 *   A waiter that got in keeps its hold, and leaves the channel (the last one to leave
 *   unsubscribes).
 *
 *   Left out: the `released` Notify (no waiter here takes the lock alone; the setnx and
 *   writer paths are the one-permit case: a release for one needs no count), waiters that
 *   queue on arrival without an attempt (they compare `alls_heard`, the releases alone:
 *   setnx, reentrant and writers only), the connection lost and back (`Disconnection` wakes
 *   every waiter, `rejoins` makes the ones in flight attempt), a slot migrated away
 *   (`dropped`), the hand-off, the courtesy pause, the random spread added to a cap (0 here,
 *   as DRIFT), a quorum's wake-up ids, and more than two waiters (bounded model checking).
 *
 * PROPERTIES (assertions of the Watch process, in every state)
 *
 *   idle-permit  (default) never, at a quiescent point (no message in transit to P, each
 *                waiter asleep or holding), is a waiter asleep with its cap still ahead
 *                while a permit is free: it could take it, and nothing will wake it
 *   idle-reader  (READERS) never is a reader asleep with its cap still ahead while the lock
 *                has no writer and no live intent and no message is in transit to P: it could
 *                enter, and nothing will wake it before its cap
 *   and every safety run: no invalid end state (every waiter gets in at last).
 *
 * Variants (-D):
 *   (none)              the code: the `Notified` is created and enabled before the count is
 *                       compared, on every sleep (also each sleep on after a later
 *                       `holder_until`: `notify.rs` `Subscription::released`); a notify_one
 *                       that reached a waiter that then attempts instead is passed on when its
 *                       `Notified` is dropped (tokio). Was ENABLE_FIRST, the fix of finding 4.
 *   OLD_CHECK_FIRST     the code before that fix on a multi-threaded runtime: `on_push` may run
 *                       between the count check and the registration, and between the end of
 *                       one sleep and the next (finding 4) -> idle-permit / idle-reader fail
 *   NO_WINDOW           (with OLD_CHECK_FIRST) the count check and the registration as one step:
 *                       a current-thread runtime, where `on_push` runs only at the waiter's
 *                       awaits; the old code was right there
 *   OLD_EMPTY_PAYLOAD   the semaphore's release published an empty payload (before issue 36
 *                       item 1): not counted -> idle-permit fails
 *   OLD_NO_INTENT_TIME  (READERS) a reader kept out only by intents was answered `{0, -1}` (no
 *                       time; before issue 36 item 2): it slept to P's `holder_until`, an old
 *                       lease end, or `UNKNOWN_HOLDER` if none -> idle-reader fails
 */

#include "common.pml"

#ifndef HL
#define HL 2                    /* the longest lease at the start (permits), in ticks */
#endif
#ifdef READERS
#undef HL
#define HL 3                    /* the writer's lease and the intent: 1 .. 3 ticks */
#endif
#define UNK 1                   /* wait.rs UNKNOWN_HOLDER (250 ms): a short guess */

/* A waiter's state. */
#define W_TRY    0              /* about to attempt (woken, or the count moved, or its cap) */
#define W_REPLY  1              /* busy answer in, not yet handled */
#define W_GAP    2              /* checked (or its sleep ended, to sleep on): not registered */
#define W_EN     3              /* enable-first: registered, the count not yet checked */
#define W_ASLEEP 4              /* registered, asleep until woken or cap */
#define W_DONE   5              /* got in (holds), left the channel */

/* ---- server ---- */
#ifndef READERS
byte hl[2];                     /* H0's, H1's permit: lease left (0: not held) */
byte free = 0;                  /* permits free */
#else
byte hl = 0;                    /* writer H: lease left (0: no writer) */
byte il = 0;                    /* C's intent: time left (0: lapsed) */
#endif

/* ---- process P ---- */
byte cnt = 0;                   /* Channel::wake_alls */
bit  sub = 0;                   /* P subscribed to the channel */
byte joined = 0;                /* P's waiters with a Subscription (Channel::waiters) */
bit  stored = 0;                /* the Notify's one stored permit */
byte pending = 0;               /* messages published while P was subscribed, not yet handled */
byte hu = 0;                    /* Channel::holder_until: time left (0: none, or past) */
byte ws[2];                     /* waiter state */
byte att[2];                    /* the count when its last attempt was sent */
byte cap[2];                    /* its sleep's cap: time left */
bit  known[2];                  /* its last busy answer named a time (holder_known) */
bit  inq[2];                    /* has a Subscription (joined) */
#ifndef OLD_CHECK_FIRST
byte got[2];                    /* W_EN: 0 not notified, 1 by notify_one in the list (passed on
                                   if dropped), 2 took the stored permit, 3 by notify_waiters */
#endif

#define REGISTERED(w) (ws[w] == W_ASLEEP || (ws[w] == W_EN && got[w] == 0))
#ifdef OLD_CHECK_FIRST
#undef REGISTERED
#define REGISTERED(w) (ws[w] == W_ASLEEP)
#endif

/* A woken waiter attempts. Under the enable-first code a registered waiter not yet past its check
   only records it (its poll returns ready, or its drop passes it on). */
#ifndef OLD_CHECK_FIRST
#define WAKE(w, how) \
  if \
  :: ws[w] == W_ASLEEP -> ws[w] = W_TRY; cap[w] = 0 \
  :: else -> got[w] = how \
  fi
#else
#define WAKE(w, how) ws[w] = W_TRY; cap[w] = 0
#endif

/* Notify::notify_one: a registered waiter (tokio takes the first; any one here), else the
   permit is stored (one at most). */
#define NOTIFY_ONE \
  if \
  :: REGISTERED(0) -> WAKE(0, 1) \
  :: REGISTERED(1) -> WAKE(1, 1) \
  :: else -> stored = 1 \
  fi

/* Notify::notify_waiters: every registered waiter, nothing stored. */
#define NOTIFY_WAITERS \
  if :: REGISTERED(0) -> WAKE(0, 3) :: else fi; \
  if :: REGISTERED(1) -> WAKE(1, 3) :: else fi

/* A script publishes: the message reaches P if P is subscribed now. */
#define PUBLISH if :: sub -> pending++ :: else fi

/* Channels::on_push, for the one payload of this configuration. */
#ifndef READERS
#ifdef OLD_EMPTY_PAYLOAD
#define ON_PUSH NOTIFY_ONE                        /* empty: wake_one, not counted */
#else
#define ON_PUSH cnt++; NOTIFY_ONE                 /* `permit`: counted, wake_one */
#endif
#else
#define ON_PUSH cnt++; NOTIFY_WAITERS; NOTIFY_ONE /* `all` (on released_shared) */
#endif

/* ---- time ---- */
#ifndef READERS
#define TICK() \
  DOWN(cap[0]); DOWN(cap[1]); DOWN(hu); \
  if :: hl[0] == 1 -> free++ :: else fi; DOWN(hl[0]); \
  if :: hl[1] == 1 -> free++ :: else fi; DOWN(hl[1])
#define TIMERS (cap[0] > 0 || cap[1] > 0 || hu > 0 || hl[0] > 0 || hl[1] > 0)
#else
#define TICK() DOWN(cap[0]); DOWN(cap[1]); DOWN(hu); DOWN(hl); DOWN(il)
#define TIMERS (cap[0] > 0 || cap[1] > 0 || hu > 0 || hl > 0 || il > 0)
#endif

#include "clock.pml"

/* ---- the properties ---- */
#define QUIET(w) (ws[w] == W_ASLEEP || ws[w] == W_DONE)
#define SLEEPS(w) (ws[w] == W_ASLEEP && cap[w] > 0)
#ifndef READERS
#define IDLE_PERMIT (pending == 0 && QUIET(0) && QUIET(1) && (SLEEPS(0) || SLEEPS(1)) && free > 0)
#else
#define IDLE_READER (pending == 0 && hl == 0 && il == 0 && (SLEEPS(0) || SLEEPS(1)))
#endif

active proctype Watch()
{
end:
#ifndef READERS
  atomic { IDLE_PERMIT -> assert(!IDLE_PERMIT) }
#else
  atomic { IDLE_READER -> assert(!IDLE_READER) }
#endif
}

/* ---- the releasers (other processes) ---- */
#ifndef READERS
/* semaphore/release.lua: zrem, then publish. */
proctype Holders()
{
end:
  do
  :: atomic { hl[0] > 0 -> hl[0] = 0; free++; PUBLISH }
  :: atomic { hl[1] > 0 -> hl[1] = 0; free++; PUBLISH }
  od
}
#else
/* rwlock/write_release.lua, the last hold: the writer's fields go, publish `all`. C has died:
   it does nothing. */
proctype Holders()
{
end:
  atomic { hl > 0 -> hl = 0; PUBLISH }
}
#endif

/* ---- P's connection: the pushes, in order ---- */
proctype OnPush()
{
end:
  do
  :: atomic { pending > 0 -> pending--; ON_PUSH }
  od
}

/* The attempt: `attempting` reads the count, and the script runs (one step, common.pml). */
#ifndef READERS
/* semaphore/acquire.lua: a free permit is taken; else {0, the first permit's lease end}
   (P's own permits are not timed here: both held permits are never P's when it is busy). */
#define ATTEMPT(w) \
  att[w] = cnt; \
  if \
  :: free > 0 -> free--; ws[w] = W_DONE \
  :: else -> \
     assert(hl[0] > 0 || hl[1] > 0); \
     if \
     :: hl[0] > 0 && (hl[1] == 0 || hl[0] <= hl[1]) -> cap[w] = hl[0] \
     :: else -> cap[w] = hl[1] \
     fi; \
     known[w] = 1; ws[w] = W_REPLY \
  fi
#else
/* rwlock/read_acquire.lua: a writer: {0, its lease end}; only C's intent: {0, its end}
   (OLD_NO_INTENT_TIME: {0, -1}, and the client falls back on holder_until, then on
   UNKNOWN_HOLDER); neither: the read lock is taken. */
#ifdef OLD_NO_INTENT_TIME
#define INTENT_CAP(w) known[w] = 0; if :: hu > 0 -> cap[w] = hu :: else -> cap[w] = UNK fi
#else
#define INTENT_CAP(w) known[w] = 1; cap[w] = il
#endif
#define ATTEMPT(w) \
  att[w] = cnt; \
  if \
  :: hl > 0 -> cap[w] = hl; known[w] = 1; ws[w] = W_REPLY \
  :: hl == 0 && il > 0 -> INTENT_CAP(w); ws[w] = W_REPLY \
  :: else -> ws[w] = W_DONE \
  fi
#endif

/* Registration (the Notified polled): a stored permit is taken at once. */
#define REGISTER(w) \
  if \
  :: stored -> stored = 0; ws[w] = W_TRY; cap[w] = 0 \
  :: else -> ws[w] = W_ASLEEP \
  fi

/* holder_seen, when the answer named a time (the spread left out: DRIFT-like, 0). */
#define HOLDER_SEEN(w) if :: known[w] -> hu = cap[w] :: else fi

proctype Waiter(byte w)
{
  do
  :: atomic { ws[w] == W_TRY -> ATTEMPT(w) }
  :: atomic {
       ws[w] == W_REPLY ->
       if
       :: !inq[w] ->
          /* Notifier::join: the first waiter here subscribes (counted) and attempts at
             once; a later one joins the subscription already made. */
          inq[w] = 1; joined++;
          if
          :: joined == 1 -> sub = 1; cnt++; ws[w] = W_TRY; cap[w] = 0
          :: else -> goto check
          fi
       :: else ->
check:
#ifndef OLD_CHECK_FIRST
          REGISTER(w);
          if :: ws[w] == W_TRY -> got[w] = 2 :: else -> got[w] = 0 fi;
          ws[w] = W_EN
#else
          if
          :: cnt != att[w] -> ws[w] = W_TRY; cap[w] = 0
          :: else ->
             HOLDER_SEEN(w);
#ifdef NO_WINDOW
             REGISTER(w)
#else
             ws[w] = W_GAP
#endif
          fi
#endif
       fi
     }
#ifndef OLD_CHECK_FIRST
  /* the count compared with the Notified already enabled */
  :: atomic {
       ws[w] == W_EN ->
       if
       :: cnt != att[w] ->
          ws[w] = W_TRY; cap[w] = 0;
          if :: got[w] == 1 -> NOTIFY_ONE :: else fi   /* the dropped Notified passes it on */
       :: else ->
          if
          :: got[w] != 0 -> ws[w] = W_TRY; cap[w] = 0
          :: else -> HOLDER_SEEN(w); ws[w] = W_ASLEEP
          fi
       fi;
       got[w] = 0
     }
#else
  :: atomic { ws[w] == W_GAP -> REGISTER(w) }
#endif
  /* The cap passed (woken waiters left W_ASLEEP in on_push). */
  :: atomic {
       ws[w] == W_ASLEEP && cap[w] == 0 ->
       if
       :: hu > 0 ->
          /* another local waiter learned a later end: sleep on, with a new Notified */
          cap[w] = hu;
#if defined(NO_WINDOW)
          skip
#elif !defined(OLD_CHECK_FIRST)
          got[w] = 0; ws[w] = W_EN
#else
          ws[w] = W_GAP
#endif
       :: else -> ws[w] = W_TRY
       fi
     }
  :: atomic {
       ws[w] == W_DONE ->
       /* the Subscription dropped; the last one unsubscribes */
       if :: inq[w] -> inq[w] = 0; joined--; if :: joined == 0 -> sub = 0 :: else fi :: else fi;
       break
     }
  od
}

init {
  atomic {
#ifndef READERS
    /* H0 and H1 are alike: H0's lease is the shorter or equal one. */
    if :: hl[0] = 1 :: hl[0] = 2 fi;
    if :: hl[1] = hl[0] :: hl[1] = HL fi;
#else
    if :: hl = 1 :: hl = 2 :: hl = 3 fi;
    if :: il = 1 :: il = 2 :: il = 3 fi;
#endif
    run Holders();
    run OnPush();
    run Waiter(0);
    run Waiter(1)
  }
}
