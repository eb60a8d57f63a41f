/*
 * reentrant.pml: the reentrant lock on one Redis node.
 *
 * Mirrors distlock/src/reentrant/{acquire,extend,release}.lua and the client code around
 * them (lock.rs, lease.rs, guard.rs), as setnx.pml does; the table in spec/README.md maps
 * each atomic step to its script lines.
 *
 * Two owners (an owner is client id : context, the same for every acquisition of one task),
 * one lock:
 *   owner A (client 0) holds up to two guards, slot 0 and slot 1, each its own acquisition
 *     with its own nonce. It runs one task, so one call at a time, in any order the
 *     program below allows: acquire slot 0; acquire slot 1 (a re-entry while slot 0 is
 *     held, or a new tenure once it expired); release either guard whenever it exists
 *     (held, run out, or lost); renew one guard once. Its requests and replies may be
 *     lost, and it may drop an acquire future while it is pending.
 *   owner B (client 1) makes one acquisition, holds, releases: the witness.
 *
 * Properties (assertions):
 *   mutex    no guard of A says held while the guard of B says held
 *   reentry  A's acquire never answers busy while a guard of A says held (property 4)
 *   fence    each token issued is above every token issued before; a holder gets its
 *            tenure's token (a re-entry the one the tenure began with)
 *   final    once every call returned and every background release finished, no key is
 *            left (except one held only by acquisitions whose release gave up at the end
 *            of its lease)
 *
 * Variants (-D):
 *   OLD_RELEASE    acquire and release as before e9490dc: a count per owner, no nonce
 *                  (5e3c280). A release from a guard of an earlier tenure takes one level
 *                  of the owner's new hold                           -> mutex fails
 *   OLD_EXTEND     extend as before e9490dc: PEXPIRE ttl (may shorten), answer 1, the guard
 *                  keeps max(its validity, sent + ttl)                -> mutex fails
 *   OLD_GIVE_BACK  finding 1 (spec/README.md), fixed in lock.rs: after giving back a grant
 *                  that came too late, the next attempts keep the same nonce -> mutex fails
 */

#ifndef MAXATT
#define MAXATT 2                /* attempts of owner A's first acquisition */
#endif
#ifndef MAXATT1
#define MAXATT1 1               /* ... of its second (a retry there is the first's again) */
#endif
#ifndef WATT
#define WATT 1                  /* ... of the witness B (its one attempt may come at any time) */
#endif
#define TS 1
#define TL 2
#define AGECAP (TL + 1)
#define NG 3                    /* guards: A slot 0, A slot 1, B */
#define NBG 5                   /* background release slots */
#define OWN_A 1
#define OWN_B 2

#include "common.pml"

/* ---- server: the lock hash ---- */
byte owner = 0;                 /* field `owner`: 0 = no key, else OWN_A / OWN_B */
byte hf = 0;                    /* fields h:<nonce>, bit n for nonce n (OLD_RELEASE: the
                                   owner's count) */
int  fence = 0;                 /* field `fence` */
byte kleft = 0;                 /* the key's time to live */
int  ctr = 0;                   /* the fencing counter */

/* ---- clients ---- */
byte gst[NG];                   /* guard state (G_*) */
byte gleft[NG];                 /* validity left */
byte age[2];                    /* per client: 1 + ticks since its request in flight was sent */
byte rleft[2];                  /* per client: its release's lease left (client.pml) */
byte bgown[NBG];                /* background release: owner (0 = slot free) */
byte bgnonce[NBG];
byte bgleft[NBG];               /* time left before it gives up */

/* ---- ghosts ---- */
int  maxtok = 0;                /* largest token issued */
int  abandoned = 0;             /* bit n: a release of nonce n gave up, its lease over */
byte ndone = 0;

#define held(g) (gst[g] == G_HELD && gleft[g] > 0)
#define A_HELD (held(0) || held(1))
#define MUTEX (!(A_HELD && held(2)))

#define TIMERS (kleft + gleft[0] + gleft[1] + gleft[2] + age[0] + age[1] + rleft[0] + rleft[1] + \
                bgleft[0] + bgleft[1] + bgleft[2] + bgleft[3] + bgleft[4] > 0)

inline WIPE() { owner = 0; hf = 0; fence = 0; kleft = 0 }

inline TICK() {
  DOWN(kleft);
  if
  :: kleft == 0 -> WIPE()              /* expired */
  :: else
  fi;
  DOWN(gleft[0]); DOWN(gleft[1]); DOWN(gleft[2]);
  AGE(age[0]); AGE(age[1]);
  if
  :: MAYFAIL -> DOWN(rleft[0]); DOWN(rleft[1]);
       DOWN(bgleft[0]); DOWN(bgleft[1]); DOWN(bgleft[2]); DOWN(bgleft[3]); DOWN(bgleft[4])
  :: else ->                           /* no failure can come: these no longer matter */
       rleft[0] = 0; rleft[1] = 0;
       bgleft[0] = 0; bgleft[1] = 0; bgleft[2] = 0; bgleft[3] = 0; bgleft[4] = 0
  fi
}

#include "clock.pml"

/* acquire.lua. me: owner, n: nonce. r: 1 held (token f), 0 busy. */
inline ACQUIRE(me, n, ttl, unsure, r) {
#ifndef OLD_RELEASE
  if
  :: owner == me ->                             /* 26: re-entry, or this acquisition retried */
       hf = hf | (1 << n);                      /* 29: hset h:<nonce> (no double count) */
       if
       :: kleft < ttl -> kleft = ttl            /* 30-32: never shortened */
       :: else
       fi;
       r = 1                         /* 33 */
  :: owner == 0 ->                              /* 35: left == -2, no key */
       TICK_US; ctr++;                          /* 36 */
       if
       :: ctr < us -> ctr = us                   /* the fence floor (the server clock) */
       :: else
       fi;
       assert(ctr > maxtok); maxtok = ctr;      /* property 3 */
       owner = me; fence = ctr; hf = 1 << n;    /* 48 */
       kleft = ttl;                             /* 49 */
       r = 1                         /* 50 */
  :: else -> r = 0                              /* 66: busy */
  fi
#else
  /* 5e3c280 acquire.lua: hash of owner -> count, no nonce */
  if
  :: owner == me ->                             /* 13: mine */
       hf++;                                    /* 15: hincrby owner 1 (a retry counts twice) */
       if
       :: kleft < ttl -> kleft = ttl            /* 16-18 */
       :: else
       fi;
       r = 1                         /* 19 */
  :: owner == 0 ->                              /* 21: no key */
       ctr++;                                   /* 22 */
       assert(ctr > maxtok); maxtok = ctr;
       owner = me; hf = 1; fence = ctr;         /* 27 */
       kleft = ttl;                             /* 28 */
       r = 1                         /* 29 */
  :: else -> r = 0                              /* 35: busy */
  fi
#endif
}

/* release.lua. r: 1 given back, 0 not held here. */
inline RELEASE(me, n, r) {
#ifndef OLD_RELEASE
  if
  :: owner != me -> r = 0                       /* 8-10 */
  :: owner == me && (hf & (1 << n)) == 0 -> r = 0   /* 11-13: hdel found nothing */
  :: owner == me && (hf & (1 << n)) != 0 ->
       hf = hf & ~(1 << n);                     /* 11: hdel h:<nonce> */
       if
       :: hf == 0 -> WIPE()                     /* 15-18: the last one deletes the key */
       :: else
       fi;
       r = 1                                    /* 19 */
  fi
#else
  /* 5e3c280 release.lua */
  if
  :: owner != me -> r = 0                       /* 6-8 */
  :: owner == me ->
       hf--;                                    /* 9: hincrby owner -1 */
       if
       :: hf == 0 -> WIPE()                     /* 9-12 */
       :: else
       fi;
       r = 1                                    /* 13 */
  fi
#endif
}

/* extend.lua. rem: the lease left after it (0: not held here). */
inline EXTEND(me, n, ttl, rem) {
#ifdef OLD_EXTEND
  if                                            /* 5e3c280 extend.lua 4-5 */
  :: owner == me -> kleft = ttl; rem = 1
  :: else -> rem = 0
  fi
#else
  if
  :: owner == me && (hf & (1 << n)) != 0 ->     /* 6-7 */
       if
       :: kleft < ttl -> kleft = ttl; rem = ttl /* 10-12 */
       :: else -> rem = kleft                   /* 14 */
       fi
  :: else -> rem = 0                            /* 16 */
  fi
#endif
}

/* Hands a release to the first free background slot (guard.rs spawn_release). */
inline SPAWN_RELEASE(me, n, until) {
  bi = 0;
  do
  :: bgown[bi] == 0 -> bgown[bi] = me; bgnonce[bi] = n; bgleft[bi] = (MAYFAIL -> until : 0); break
  :: else -> bi++; assert(bi < NBG)
  od;
  bi = 0
}
byte bi;                        /* slot index (back to 0 after use: no state of its own) */

/* Property 4, in the step that runs the acquire script: a re-entry never waits on its own
   hold (A's acquire never answers busy while a guard of A says held). */
#define AFTER_ACQUIRE(me, n, r) assert(!(me == OWN_A && r == 0 && A_HELD))

#include "client.pml"

/* Renewal of guard g (nonce n) by owner A, once: is_held() checked and the request sent in
   one step (guard.rs 151-154), then the reply. */
inline RENEW(g, n) {
  atomic {
    !ext && held(g) ->
      ext = true;
      ETTL(ettl);
      if
      :: MAYFAIL -> faults++; ettl = 0          /* request lost: Err, guard unchanged */
      :: EXTEND(OWN_A, n, ettl, rem); age[0] = 1
      fi
  };
  if
  :: ettl == 0
  :: ettl > 0 -> EXTEND_REPLY(0, g, ettl, true)
  fi;
  ettl = 0
}

/* A's requests and replies may be lost, and its caller may drop an acquire future. Not in
   the OLD_RELEASE run: the stale guard needs none of that, and without it the first
   counterexample spin meets is the stale guard's, not a dropped future's (the old
   protocol loses the same way there: see README). */
#ifdef OLD_RELEASE
#define A_LOSSY false
#else
#define A_LOSSY true
#endif

/* Owner A: two acquisitions (nonces 1 and 3; 2 and 4 after a give-back),
   each released once, one renewal, in any order one task can make them. */
proctype OwnerA()
{
  byte ttl, att, res, r, rem, ettl, n0 = 1, n1 = 3;
  bool unsure, acq0, acq1, ext;

  do
  :: !acq0 -> ttl = TL; ACQUISITION(0, 0, OWN_A, n0, ttl, A_LOSSY, MAXATT); atomic { acq0 = true; ttl = 0 }
  :: acq0 && !acq1 -> ttl = TL; ACQUISITION(0, 1, OWN_A, n1, ttl, A_LOSSY, MAXATT1); atomic { acq1 = true; ttl = 0 }
  :: gst[0] == G_HELD || gst[0] == G_LOST -> GUARD_RELEASE(0, 0, OWN_A, n0, A_LOSSY)
  :: gst[1] == G_HELD || gst[1] == G_LOST -> GUARD_RELEASE(0, 1, OWN_A, n1, A_LOSSY)
#ifndef OLD_RELEASE
  :: RENEW(0, n0)
  :: RENEW(1, n1)
#endif
  :: acq0 && acq1 && gst[0] != G_HELD && gst[0] != G_LOST && gst[1] != G_HELD && gst[1] != G_LOST ->
       break
  od;
  ndone++
}

/* Owner B: one acquisition, hold, release. */
proctype OwnerB()
{
  byte ttl = TL, att, res, r, n = 5;
  bool unsure;

  ACQUISITION(1, 2, OWN_B, n, ttl, false, WATT);
  if
  :: gst[2] == G_HELD -> GUARD_RELEASE(1, 2, OWN_B, n, false)
  :: else
  fi;
  ndone++
}

#ifdef LIVE
/* property 2 as liveness, under weak fairness (pan -a -f): every run ends with every call
   returned, every background release finished and nothing left on the server. */
ltl settles { <> [] (ndone == 2 && bgown[0] + bgown[1] + bgown[2] + bgown[3] + bgown[4] == 0 && owner == 0) }
#endif

init {
  atomic {
    run OwnerA(); run OwnerB();
    run BgRelease(0); run BgRelease(1); run BgRelease(2); run BgRelease(3); run BgRelease(4)
  };
  /* property 2: nothing left behind */
  atomic {
    ndone == 2 && bgown[0] + bgown[1] + bgown[2] + bgown[3] + bgown[4] == 0 ->
#ifndef OLD_RELEASE
      assert(owner == 0 || (hf & ~abandoned) == 0)
#else
      assert(owner == 0 || abandoned != 0)
#endif
  }
#ifdef LIVE
  ;
  /* Everything returned: idle for ever (see setnx.pml). */
  do :: ndone == 2 od
#endif
}
