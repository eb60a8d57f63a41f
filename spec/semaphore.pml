/*
 * semaphore.pml: the counting semaphore on one Redis node.
 *
 * Mirrors distlock/src/semaphore/{acquire,extend,release}.lua (prelude.lua in front of each)
 * and the client code around them (client.pml); the table in spec/README.md maps each atomic
 * step to its script lines.
 *
 * The sorted set, as the model keeps it (relative times, see common.pml): pleft[t], the
 * lease left of the permit whose member is token t (0: no such member). Every script starts
 * with load() (prelude.lua), which drops the permits whose lease has ended before anything is
 * decided; the model drops a permit at the tick that ends it, which no script can tell apart.
 * The recorded limit (every client here asks for the same PERMITS) and the key's PEXPIRE
 * (settle(): the latest lease) only describe that state: the key exists while a permit does.
 *
 * NC = 3 clients, PERMITS = 2, one semaphore. Each client makes one acquisition with a token
 * of its own (2c+1; 2c+2 after a give-back), picks a ttl (TS or TL), holds, releases. Client 0
 * does everything a caller can: retries, renews once, drops its acquire future, and its
 * requests and replies may be lost. Clients 1 and 2 acquire, hold and release; client 2 may
 * instead crash while it holds its permit (its process is gone: its guard says nothing, it
 * never releases, its background releases die with it).
 *
 * Properties (assertions):
 *   limit   never more than PERMITS guards say held at once (checked wherever a guard turns
 *           held or its validity moves forward)
 *   frees   a permit is on the server only while the lease its own holder was last granted
 *           lasts (gl[t], a ghost set only by t's own acquire and extend): a crashed holder's
 *           permit ends at its own ttl, and no other holder's renewal keeps it alive
 *   fence   each token handed out is above every token handed out before
 *   final   once every call returned and every background release finished, no permit is
 *           left but a crashed holder's (which "frees" ends) or one whose release gave up
 *           after its lease had run out
 *   slots   every acquisition is fenced here, so every permit takes a permit slot (the lowest
 *           no live permit holds; a retry that finds its own permit keeps its slot): the slot
 *           taken is below PERMITS and no other live permit holds it, so the holders of one
 *           slot follow each other, with growing tokens (fence), and a resource with one mark
 *           per slot refuses only a slot's expired holder (docs/design.md, "Fenced permits")
 *
 * Variants (-D):
 *   ONE_KEY         the permits share one expiry, the key's (the common design: a set of
 *                   holders with one PEXPIRE that every acquire and renewal raises): a raise
 *                   renews every permit              -> frees fails (a crashed holder is kept
 *                   alive by the others' leases)
 *   RETRY_NO_RENEW  an acquisition retried after a lost reply that finds its own permit
 *                   leaves its lease as it is (as rwlock's finding 2): the guard trusts a
 *                   lease from the retry that the server does not hold -> limit fails
 *   SLOT_BY_COUNT   a permit's slot is the number of permits held when it was taken (its
 *                   rank), not the lowest free one: after a lower permit ends, the next one
 *                   takes a slot a live permit holds -> slots fails
 */

#ifndef NC
#define NC 3
#endif
#ifndef PERMITS
#define PERMITS 2
#endif
#ifndef MAXATT
#define MAXATT 2                /* attempts of client 0's acquisition */
#endif
#ifndef WATT
#define WATT 1                  /* ... of the others (their one attempt may come at any time) */
#endif
#define TS 1
#define TL 2
#define AGECAP (TL + 1)
#define NT (2 * NC + 1)         /* tokens 1 .. 2 NC */
#define NBG (NC + 1)            /* background release slots: 2 for client 0, 1 for the others
                                   (their one attempt can only be given back late) */

#include "common.pml"

#define FULL(c) (c == 0)

/* ---- server: the sorted set ---- */
byte pleft[NT];                 /* per token: its permit's lease left (0: no member) */
byte pslot[NT];                 /* per token: its permit slot, held while pleft > 0 (the
                                   #slots hash: a field whose member is gone is stale) */
int  ctr = 0;                   /* the fencing counter */

/* ---- clients ---- */
byte gst[NC];                   /* guard state (common.pml G_*) */
byte gleft[NC];                 /* guard validity left */
byte age[NC];                   /* 0: nothing in flight; else 1 + ticks since the send */
byte rleft[NC];                 /* its release's lease left (client.pml) */
byte bgown[NBG];                /* background release: owner (0 = slot free) */
byte bgnonce[NBG];              /* ... its token */
byte bgleft[NBG];               /* ... and time left before it gives up */

/* ---- ghosts ---- */
byte gl[NT];                    /* per token: the lease its own calls were last granted */
int  maxtok = 0;                /* largest fencing token issued so far */
int  abandoned = 0;             /* bit t: a release of token t gave up, its lease over */
int  crashed = 0;               /* bit t: token t's holder crashed */
byte ndone = 0;                 /* clients whose calls all returned (or that crashed) */

#define held(c) (gst[c] == G_HELD && gleft[c] > 0)
#define MUTEX (held(0) + held(1) + held(2) <= PERMITS)

/* Permits on the server. */
#define NPERMITS ((pleft[1] > 0) + (pleft[2] > 0) + (pleft[3] > 0) + (pleft[4] > 0) + \
                  (pleft[5] > 0) + (pleft[6] > 0))

#define TIMERS (pleft[1] + pleft[2] + pleft[3] + pleft[4] + pleft[5] + pleft[6] + \
                gl[1] + gl[2] + gl[3] + gl[4] + gl[5] + gl[6] + \
                gleft[0] + gleft[1] + gleft[2] + age[0] + age[1] + age[2] + \
                rleft[0] + rleft[1] + rleft[2] + \
                bgleft[0] + bgleft[1] + bgleft[2] + bgleft[3] > 0)

inline TICK() {
  i = 1;
  do
  :: i < NT ->
       DOWN(pleft[i]); DOWN(gl[i]);
       assert(pleft[i] == 0 || gl[i] > 0);      /* frees */
       if
       :: pleft[i] == 0 -> pslot[i] = 0         /* stale: no longer counted */
       :: else
       fi;
       i++
  :: else -> break
  od;
  i = 0;
  do
  :: i < NC -> DOWN(gleft[i]); AGE(age[i]);
       if
       :: MAYFAIL -> DOWN(rleft[i])
       :: else -> rleft[i] = 0         /* no failure can come: its time no longer matters */
       fi;
       i++
  :: else -> break
  od;
  i = 0;
  do
  :: i < NBG ->
       if
       :: MAYFAIL -> DOWN(bgleft[i])
       :: else -> bgleft[i] = 0
       fi;
       i++
  :: else -> break
  od;
  i = 0
}

byte i;                         /* loop index of TICK (back to 0 after it) */

#include "clock.pml"

/* The permit of token t made to last at least `ttl` (never shortened). ONE_KEY: one expiry
   for the whole set, so every permit on the server lasts that long too. */
inline RAISE(t, ttl) {
  if
  :: pleft[t] < ttl -> pleft[t] = ttl
  :: else
  fi;
#ifdef ONE_KEY
  j = 1;
  do
  :: j < NT ->
       if
       :: pleft[j] > 0 && pleft[j] < pleft[t] -> pleft[j] = pleft[t]
       :: else
       fi;
       j++
  :: else -> break
  od;
  j = 0;
#endif
  gl[t] = pleft[t]                              /* what t's holder was granted */
}
byte j;

/* fence.lua's mint(): INCR with the clock floor (no restart here: the counter only grows). */
inline MINT() {
  ctr++;
  assert(ctr > maxtok);                         /* fence */
  maxtok = ctr
}

/* Whether a live permit holds slot s. */
#define SLOT_HELD(s) ((pleft[1] > 0 && pslot[1] == s) || (pleft[2] > 0 && pslot[2] == s) || \
                      (pleft[3] > 0 && pslot[3] == s) || (pleft[4] > 0 && pslot[4] == s) || \
                      (pleft[5] > 0 && pslot[5] == s) || (pleft[6] > 0 && pslot[6] == s))

/* acquire.lua take_slot() for a new permit of token t (not yet a member): the lowest slot no
   live permit holds; then slots: below PERMITS, and no other live permit holds it. */
inline TAKE_SLOT(t) {
#ifdef SLOT_BY_COUNT
  pslot[t] = NPERMITS;
#else
  k = 0;
  do
  :: k < PERMITS && SLOT_HELD(k) -> k++
  :: else -> break
  od;
  pslot[t] = k;
#endif
  assert(pslot[t] < PERMITS && !SLOT_HELD(pslot[t]));   /* slots */
  k = 0
}
byte k;

/* acquire.lua (after load()). r: 1 held, 0 busy. A fenced acquisition mints a token, a
   retry that finds its own permit too (the first one never reached the caller). */
inline ACQUIRE(me, tok, ttl, unsure, r) {
  if
  :: pleft[tok] > 0 ->                          /* its own permit: a retry (its slot kept) */
#ifndef RETRY_NO_RENEW
       RAISE(tok, ttl);                         /* renewed from now, never shortened */
#endif
       MINT(); r = 1
  :: pleft[tok] == 0 && NPERMITS < PERMITS ->   /* a permit is free */
       MINT(); TAKE_SLOT(tok); RAISE(tok, ttl); r = 1
  :: else -> r = 0                              /* busy: every permit held */
  fi
}

/* extend.lua. rem: the lease left after it (0: not held). */
inline EXTEND(me, tok, ttl, rem) {
  if
  :: pleft[tok] > 0 -> RAISE(tok, ttl); rem = pleft[tok]
  :: else -> rem = 0
  fi
}

/* release.lua: only its own permit. */
inline RELEASE(me, tok, r) {
  if
  :: pleft[tok] > 0 -> pleft[tok] = 0; gl[tok] = 0; pslot[tok] = 0; r = 1
  :: else -> r = 0
  fi
}

/* Hands a release to a background task (guard.rs spawn_release): client 0's slots are 0
   and 1, client c's (c > 0) is c + 1. Its time: until the lease it may have taken ends. */
inline SPAWN_RELEASE(me, tok, until) {
  if
  :: me == 1 && bgown[0] == 0 -> bs = 0
  :: me == 1 && bgown[0] != 0 -> bs = 1
  :: else -> bs = me
  fi;
  assert(bgown[bs] == 0);
  bgown[bs] = me; bgnonce[bs] = tok; bgleft[bs] = (MAYFAIL -> until : 0);
  bs = 0
}
byte bs;                        /* the slot (back to 0 after use) */

#define AFTER_ACQUIRE(me, n, r) skip

#include "client.pml"

/* Client c (owner c + 1): one acquisition with a token of its own, ttl TS or TL; if held,
   maybe one renewal (client 0) or a crash (client 2); then the release. */
proctype Client(byte c)
{
  byte id, ttl, att, res, r, rem, ettl;
  bool unsure;

  atomic {
    id = 2 * c + 1;
    if
    :: ttl = TL
    :: FULL(c) -> ttl = TS
    fi
  };
  ACQUISITION(c, c, c + 1, id, ttl, FULL(c), (FULL(c) -> MAXATT : WATT));
  if
  :: gst[c] == G_HELD ->
       if
       :: skip
       :: atomic {
            c == 0 && held(c) ->
              ETTL(ettl);
              if
              :: MAYFAIL -> faults++; ettl = 0  /* request lost: Err, guard unchanged */
              :: EXTEND(c + 1, id, ettl, rem); age[c] = 1
              fi
          };
          if
          :: ettl == 0
          :: ettl > 0 -> EXTEND_REPLY(c, c, ettl, true)
          fi;
          ettl = 0
       :: atomic {
            c == 2 ->                           /* the process dies: SIGKILL */
              crashed = crashed | (1 << id);
              gst[c] = G_NONE; gleft[c] = 0;
              bgown[3] = 0; bgnonce[3] = 0; bgleft[3] = 0;
              ndone++;
              goto dead
          }
       fi;
       GUARD_RELEASE(c, c, c + 1, id, FULL(c))
  :: else
  fi;
  atomic { id = 0; ttl = 0; unsure = false; ndone++ }
dead:
  skip
}

#define BG_IDLE (bgown[0] + bgown[1] + bgown[2] + bgown[3] == 0)

/* No permit is left but a crashed holder's or an abandoned one. */
#define LEFT(t) (pleft[t] == 0 || ((crashed | abandoned) & (1 << t)) != 0)
#define SETTLED (LEFT(1) && LEFT(2) && LEFT(3) && LEFT(4) && LEFT(5) && LEFT(6))

#ifdef LIVE
/* final as liveness, under weak fairness (pan -a -f): every run ends with every call
   returned, every background release finished and no permit left at all (a crashed
   holder's ends with its lease). */
ltl settles { <> [] (ndone == NC && BG_IDLE && NPERMITS == 0) }
#endif

init {
  atomic {
    run Client(0); run Client(1); run Client(2);
    run BgRelease(0); run BgRelease(1); run BgRelease(2); run BgRelease(3)
  };
  /* final: nothing left behind */
  atomic {
    ndone == NC && BG_IDLE -> assert(SETTLED)
  }
#ifdef LIVE
  ;
  /* Everything returned: idle for ever (see setnx.pml). */
  do :: ndone == NC od
#endif
}
