/*
 * many.pml: several names at once (Client::lock_many, the attribute's key = [..]).
 *
 * Mirrors distlock/src/many/{acquire,release}.lua, the way nodes/groups.rs takes a set whose
 * names span Redis Cluster slots (one group of names per slot, the groups in the set's fixed
 * order, the groups taken so far given back when a later one is busy or fails), the waiter
 * that waits for the busy name's release (lock/attempt.rs, wait.rs listen_to), and the
 * give-backs of a failed or dropped acquisition (Pending) and of a release that failed
 * (Drop). key/set.rs fixes the order: by slot, then by key, whatever the caller's order.
 *
 * Three names, two slots: name 0 in the first slot, names 1 and 2 in the second (ONE_SLOT:
 * all in one, as on one node, through Sentinel and on each node of a quorum). Three
 * clients, one acquisition each: client 0 asks for [0, 2], client 1 for [2, 0] (the other
 * order), client 2 for [2] alone (a name's own lock is a set of one: the same script).
 * A holder releases its set after its critical section.
 *
 * What is left out (each checked elsewhere): time. A lease outlasts an attempt and the
 * watchdog renews a held set, so no name expires under its holder or between the groups of
 * one attempt (what a late answer or a lost lease does is setnx.pml's, with the same lease
 * code; a set's renewal succeeds only while every name is ours, many/extend.lua, tested in
 * tests/tests/suite/many.rs). A waiter waits until the name it found busy is released (its sleep
 * is also capped by the holder's lease, which a holder renews: a waiter behind a holder that
 * never releases waits its whole `wait`, as good as a deadlock). Fencing tokens (one per set,
 * the counters raised: many/acquire.lua, nodes/groups.rs, tested in tests/tests/suite/many.rs), the
 * waited-for marks and wake-ups (they decide only when a waiter tries again), the quorum
 * (each node takes the whole set in one script: the one-slot case per node, redlock.pml for
 * the majority).
 *
 * Faults (FAULTS, default 1, a shared budget): a request lost (never ran), a reply lost (ran;
 * the caller sees an error), and free of the budget, the caller dropping the acquire future
 * while an attempt is out.
 *
 * Properties:
 *   mutex    a set's guard says held only while the server holds every name of it for it,
 *            and no two held guards share a name (assertion where a guard turns held)
 *   partial  a caller waiting for a busy name holds none of its names (assertion where it
 *            starts to wait), unless a give-back of its request was lost: that part is
 *            retaken by its next attempt or given back in the background
 *   deadlock no state where a call cannot finish (spin's invalid end states)
 *   settles  once every call returned and every background give-back finished, no name is
 *            held (end-state assertion)
 *
 * Variants (-D) that keep the protocol: ONE_SLOT, every name in one slot (the one-script
 * case); ALL_FULL, every client with client 0's faults (a larger run).
 * Variants that must fail:
 *   NO_ROLLBACK      the groups taken so far are kept while the caller waits for a busy
 *                    one                                                   -> partial fails
 *   OLD_CALLER_ORDER the naive multi-lock: the names one at a time in the caller's order,
 *                    each waited for while holding the ones before         -> deadlock
 *                    (with NO_PARTIAL_CHECK; without it, partial fails first)
 *   OLD_GIVE_BACK_TAKEN  a busy or failed group gives back only what this attempt took,
 *                    also after an earlier attempt failed (the first version of
 *                    nodes/groups.rs): with FAULTS=2, a group left taken by an attempt
 *                    whose give-back was lost is held while the caller waits, and left
 *                    behind if it stops there                             -> partial fails
 *   NO_PENDING       a dropped acquire future gives nothing back          -> settles fails
 */

#ifndef MAXATT
#define MAXATT 2                /* attempts per acquisition */
#endif
#define NN 3                    /* names */
#define NC 3                    /* clients */
#define FAIL 2                  /* an attempt's answer: 1 taken, 0 busy, FAIL an error */

#include "common.pml"

/* Client 0 does everything a caller can (its requests and replies may be lost, it may drop
   the acquire future); the others only take, wait, hold and release: a smaller run. ALL_FULL
   gives every client client 0's faults. */
#ifdef ALL_FULL
#define FULL(c) true
#else
#define FULL(c) (c == 0)
#endif
#define MAYFAIL_C(c) (MAYFAIL && FULL(c))

#ifdef OLD_CALLER_ORDER
#define NO_ROLLBACK
#endif

/* The names each client asks for (bit n: name n), and in which order it names them. */
#define WANT(c) (c == 2 -> 4 : 5)
#define ASKED_FIRST(c) (c == 1 -> 4 : (c == 0 -> 1 : 4))

/* The slot of each name. */
#ifdef ONE_SLOT
#define SLOT(n) 0
#else
#define SLOT(n) (n == 0 -> 0 : 1)
#endif

/* ---- server ---- */
byte key[NN];                   /* the holder's token (client c: c + 1); 0 = free */

/* ---- clients ---- */
byte gst[NC];                   /* guard state (common.pml G_*) */
byte nbg = 0;                   /* background give-backs running */
/* The units an acquisition takes one after another, each in one script call: the names of
   each slot, in the set's order (by slot); OLD_CALLER_ORDER: each name alone, in the order
   the caller gave them. Client c's units are unit[2c], unit[2c + 1]. */
byte unit[2 * NC];
byte nunits[NC];
byte ndone = 0;                 /* clients whose calls all returned */

/* Names held for client c on the server. */
#define HOLDS(c) ((key[0] == c + 1) || (key[1] == c + 1) || (key[2] == c + 1))
/* Guards c and d share a name. */
#define SHARE(c, d) ((WANT(c) & WANT(d)) != 0)

/* many/acquire.lua on the names `names` (a bit set) for client c: every one free or c's ->
   all taken, r = 1; else the first busy one (the set's order) is `busy`, c's own holds among
   them given up (acquire.lua: a set is never left held in part), r = 0. */
inline GROUP_ACQUIRE(c, names, r, busy) {
  busy = NN;
  j = 0;
  do
  :: j < NN ->
       if
       :: busy == NN && (names & (1 << j)) && key[j] != 0 && key[j] != c + 1 -> busy = j
       :: else
       fi;
       j++
  :: else -> break
  od;
  j = 0;
  do
  :: j < NN ->
       if
       :: (names & (1 << j)) && busy == NN -> key[j] = c + 1
       :: (names & (1 << j)) && busy < NN && key[j] == c + 1 -> key[j] = 0
       :: else
       fi;
       j++
  :: else -> break
  od;
  r = (busy == NN -> 1 : 0);
  j = 0
}

/* many/release.lua on the names `names` for client c: those still c's are freed. */
inline GROUP_RELEASE(c, names) {
  j = 0;
  do
  :: j < NN ->
       if
       :: (names & (1 << j)) && key[j] == c + 1 -> key[j] = 0
       :: else
       fi;
       j++
  :: else -> break
  od;
  j = 0
}

/* One release request of `names`: runs, or is lost (ok = false). */
inline SEND_RELEASE(c, names, ok) {
  if
  :: d_step { GROUP_RELEASE(c, names); ok = true }
  :: d_step { MAYFAIL_C(c) -> faults++; ok = false }                 /* request lost */
  :: d_step { MAYFAIL_C(c) -> faults++; GROUP_RELEASE(c, names); ok = false } /* reply lost */
  fi
}

/* A give-back in the background (release.rs release_in_background; Pending::give_back):
   every group of c's set, each retried until it ran (the fault budget ends the losses). */
proctype BgRelease(byte c)
{
  byte u = 0, j;
  bool ok;
  do
  :: u < nunits[c] ->
       SEND_RELEASE(c, unit[2 * c + u], ok);
       if
       :: ok -> u++
       :: else
       fi
  :: else -> break
  od;
  atomic { ok = false; u = 0; nbg-- }
}

inline UNITS(c) {
#ifdef OLD_CALLER_ORDER
  if
  :: WANT(c) == ASKED_FIRST(c) -> unit[2 * c] = WANT(c); nunits[c] = 1
  :: else -> unit[2 * c] = ASKED_FIRST(c); unit[2 * c + 1] = WANT(c) & ~ASKED_FIRST(c);
       nunits[c] = 2
  fi
#else
  j = 0;
  do
  :: j < NN ->
       if
       :: (WANT(c) & (1 << j)) && SLOT(j) == 0 -> unit[2 * c] = unit[2 * c] | (1 << j)
       :: (WANT(c) & (1 << j)) && SLOT(j) == 1 -> unit[2 * c + 1] = unit[2 * c + 1] | (1 << j)
       :: else
       fi;
       j++
  :: else -> break
  od;
  j = 0;
  if
  :: unit[2 * c] == 0 -> unit[2 * c] = unit[2 * c + 1]; unit[2 * c + 1] = 0; nunits[c] = 1
  :: unit[2 * c] != 0 && unit[2 * c + 1] == 0 -> nunits[c] = 1
  :: else -> nunits[c] = 2
  fi
#endif
}

/* Gives back units `from` .. `to` of client c (nodes/groups.rs: what this attempt took, when
   a later group is busy or failed; guard.rs: the release of a held set), one request per
   unit; ok = false if any was lost. */
inline GIVE_BACK(c, from, to, ok) {
  ok = true;
  k = from;
  do
  :: k <= to ->
       if
       :: d_step { GROUP_RELEASE(c, unit[2 * c + k]); k++ }
       :: d_step { MAYFAIL_C(c) -> faults++; ok = false; k++ }   /* request lost */
       :: d_step { MAYFAIL_C(c) -> faults++; GROUP_RELEASE(c, unit[2 * c + k]); ok = false; k++ }
       fi
  :: else -> break
  od;
  k = 0
}

#define DROPPED 3               /* the caller dropped the future */
#define RETRY 4                 /* an error: try again, or return it */
#define WAIT 5                  /* busy: wait for the name's release */

proctype Client(byte c)
{
  byte u, r, busy, att, j, k, d;
  bool ok, unsure;

  d_step { UNITS(c); att = 1; r = 1 };
  do
  :: r == 1 && u < nunits[c] ->
       /* The next unit's script; the caller may drop the future while it is out. */
       if
       :: d_step { GROUP_ACQUIRE(c, unit[2 * c + u], r, busy); u = u + r }
       :: d_step { MAYFAIL_C(c) -> faults++; r = FAIL }           /* request lost */
       :: d_step { MAYFAIL_C(c) -> faults++; GROUP_ACQUIRE(c, unit[2 * c + u], r, busy); r = FAIL }
       :: atomic {                                                /* dropped: Pending */
            FULL(c) ->
            if
            :: GROUP_ACQUIRE(c, unit[2 * c + u], r, busy)
            :: skip
            fi;
#ifndef NO_PENDING
            nbg++; run BgRelease(c);
#endif
            r = DROPPED
          }
       fi
  :: r == 1 && u == nunits[c] ->
       /* Held: every name is this client's, and no other held guard has one of them. */
       d_step {
         d = 0;
         do
         :: d < NC ->
              assert(d == c || gst[d] != G_HELD || !SHARE(c, d));
              d++
         :: else -> break
         od;
         d = 0;
         assert((WANT(c) & 1) == 0 || key[0] == c + 1);
         assert((WANT(c) & 2) == 0 || key[1] == c + 1);
         assert((WANT(c) & 4) == 0 || key[2] == c + 1);
         gst[c] = G_HELD
       };
       /* The critical section, then the release (each group; one lost: Drop finishes it
          in the background). */
       gst[c] = G_RELEASED;
       GIVE_BACK(c, 0, nunits[c] - 1, ok);
       if
       :: !ok -> atomic { nbg++; run BgRelease(c) }
       :: else
       fi;
       break
  :: r == 0 ->
       /* A unit busy: what this attempt took goes back first (nodes/groups.rs); after an
          attempt that failed, every unit (it may have left a later one taken). */
#ifndef NO_ROLLBACK
       if
#ifndef OLD_GIVE_BACK_TAKEN
       :: unsure -> GIVE_BACK(c, 0, nunits[c] - 1, ok)
#else
       :: false
#endif
       :: !unsure && u > 0 -> GIVE_BACK(c, 0, u - 1, ok)
       :: else -> ok = true
       fi;
       /* Maybe held in part: the error of the give-back, as after a lost reply. */
       r = (ok -> WAIT : RETRY)
#else
       r = WAIT
#endif
  :: r == FAIL ->
       /* A unit failed (maybe taken unseen): it goes back too, with the ones before (after
          an earlier failure, every unit). */
#ifndef OLD_GIVE_BACK_TAKEN
       if
       :: unsure -> GIVE_BACK(c, 0, nunits[c] - 1, ok)
       :: else -> GIVE_BACK(c, 0, u, ok)
       fi;
#else
       GIVE_BACK(c, 0, u, ok);
#endif
       r = RETRY
  :: r == RETRY ->
       if
       :: att < MAXATT -> d_step { att++; u = 0; r = 1; ok = false; unsure = true } /* again */
       :: else -> atomic { nbg++; run BgRelease(c) }; break   /* Err: Pending armed */
       fi
  :: r == WAIT ->
       /* Waits for the busy name's release, holding nothing. */
#ifndef NO_PARTIAL_CHECK
       assert(!HOLDS(c));
#endif
       if
       :: att < MAXATT -> atomic { key[busy] == 0 -> att++; u = 0; r = 1; busy = 0; ok = false }
       :: else -> break                         /* Timeout: Pending disarmed */
       fi
  :: r == DROPPED -> break
  od;
  atomic { ndone++; r = 0; busy = 0; u = 0; att = 0; ok = false; unsure = false }
}

init {
  atomic { run Client(0); run Client(1); run Client(2) };
#if !defined(NO_ROLLBACK) && !defined(OLD_GIVE_BACK_TAKEN)
  /* settles: nothing left behind */
end:
  atomic {
    ndone == NC && nbg == 0 -> assert(key[0] == 0 && key[1] == 0 && key[2] == 0)
  }
#endif
}
