/*
 * common.pml: what every model of the distlock protocol shares.
 *
 * Abstract time. Time passes in ticks of the Clock process (think: milliseconds), which
 * may come between any two steps of the other processes. Every time value is kept
 * RELATIVE to now: a lease as the time it has left (0 = gone), a request as the ticks since
 * it was sent. A tick counts them all down (or up) in one atomic step (each model's TICK()),
 * so states that differ only in the absolute time are the same state, and the clock can
 * tick for ever without making the state space infinite. Server and clients read the same
 * clock, so the drift allowance of lease.rs (`valid_until = sent + ttl - drift`) has
 * nothing to absorb: DRIFT is 0 unless a run sets it, the strictest choice (every gap
 * between sending a request and the server running it shows).
 *
 * Lease expiry. A key (or a lease field) exists while its time left is above 0; the tick
 * that brings it to 0 removes it (Redis's expiry seen from outside: no state holds an
 * expired-but-present key).
 *
 * One request = one atomic step. A script runs on the server as one atomic step (Redis
 * runs a script without interleaving). A client's call is: the request is sent and run (or
 * lost: never run); then, as a step of its own, the reply is handled (or lost, or the caller
 * drops its future first). Ticks and other processes interleave between the two. The
 * client's bookkeeping around a call (lease arithmetic, guard state) has no await in the
 * code, so it is part of the step that receives the reply. Requests of one client run in
 * the order sent (one connection): the model runs them in the client's program order.
 * Sending and running a request in one step is no loss: the guard measures its lease from
 * the send time, so a request that ran later than it was sent only makes the guard more
 * careful than in the model.
 *
 * Faults. FAULTS lost requests or lost replies in all (a shared budget, so retries end).
 *
 * Properties are checked by assertions at the steps that can make them false (a guard
 * turning held, a validity moving forward, a token handed out, a busy answer) rather than
 * by a never claim at every state: time passing only ever ends validity, so nothing else
 * can break them. That keeps partial-order reduction effective.
 */

#ifndef DRIFT
#define DRIFT 0
#endif
#ifndef FAULTS
#define FAULTS 1
#endif

byte faults = 0;       /* faults injected so far */
int us = 1;            /* the server's microsecond clock (TIME): see TICK_US */

#define MAYFAIL (faults < FAULTS)

/* The server's microsecond clock, which a new fencing counter starts from. The scripts
   rely on it advancing by more than 1 per acquisition ("each acquisition takes the server
   more than 1 us"); the model grants exactly that and no more: +1 at each acquisition that
   issues a token (TICK_US), nothing at a restart or a tick. Only the models with restarts
   read it; elsewhere it stays put, so states that differ only in it do not multiply. */
#ifdef RESTART
#define TICK_US us++
#else
#define TICK_US skip
#endif

/* Guard states, as the caller sees its guard. */
#define G_NONE     0   /* no guard */
#define G_HELD     1   /* a guard exists; is_held() = this and validity left > 0 */
#define G_LOST     2   /* declared lost (renewal refused, or answered too late) */
#define G_RELEASED 3   /* release() called (the guard is consumed) */

/* Ticks since a request was sent, capped at AGECAP (enough to tell every ttl apart). */
#define AGE(a) if :: a > 0 && a < AGECAP -> a++ :: else fi
/* A time left, counted down. */
#define DOWN(t) if :: t > 0 -> t-- :: else fi

/* The ttl of a renewal. With the current scripts TL alone takes every branch (a lease with
   less left is raised, one with as much is kept: a tick decides which); OLD_EXTEND needs a
   shorter one too, to shorten a lease. */
#ifdef OLD_EXTEND
#define ETTL(t) if :: t = TS :: t = TL fi
#else
#define ETTL(t) t = TL
#endif
