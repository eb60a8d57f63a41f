/*
 * rwlock.pml: the read/write lock on one Redis node.
 *
 * Mirrors distlock/src/rwlock/*.lua (prelude.lua in front of each) and the client code
 * around them (client.pml); the table in spec/README.md maps each atomic step to its
 * script lines.
 *
 * The lock's keys, as the model keeps them (relative times, see common.pml):
 *   writer, wleft, wmask     the write holder, its lease left, the nonces in writer-holds
 *   rmask[o], rlease[o]      the nonces in owner o's r:<o>, and its score in the readers
 *                            (its lease left)
 *   intent[o]                owner o's score in the intents (time left)
 * No decision counts an entry that has expired: load() (prelude.lua 115-180) drops an
 * expired writer and the caller's own expired reads, and every other reader and intent
 * counts only while its score is ahead of the server's clock (ZRANGEBYSCORE, ZREVRANGE over live
 * scores; prune() clears the expired ones later, 207-236). The model drops each at the tick
 * that ends it, which no script can tell apart. A reader skips counting intents once the
 * hash's intents-until has passed; it is raised past every intent registered and lowered
 * only to the latest live one, so it gives the count's answer. mode, the keys' expiry and
 * the summaries (write() and settle(), 249-327) only describe that state and decide
 * nothing: the keys exist while any entry above is live.
 *
 * Two owners, one lock:
 *   owner A (client 0): up to two acquisitions, each read or write (slot 0, then slot 1:
 *     re-entry, downgrade W then R, upgrade R then W refused, or a new tenure), each
 *     released once, one renewal, in any order one task can make them; its requests and
 *     replies may be lost.
 *   owner B (client 1): one acquisition, read or write, hold, release: the witness.
 *
 * Properties (assertions):
 *   mutex    no guard says held in write mode while a guard of another owner says held
 *   reentry  a re-entry never waits on its own hold: A's acquire never answers busy while
 *            A holds the write lock, nor a read while A holds a read
 *   fence    each write token issued is above every token issued before
 *   final    once every call returned and every background release finished, no hold is
 *            left (intents may be: a writer whose last attempt was lost, or that crashed,
 *            leaves its intent, which ends within min(ttl, 2 s) by design, write_acquire.lua
 *            85-93; one that gives up withdraws it with its release, write_release.lua 25-34,
 *            which the model's clients do not send: it frees no hold)
 *
 * Variants (-D):
 *   OLD_READ_RETRY  finding 2 (spec/README.md), fixed in read_acquire.lua: a read acquire
 *                   that finds its own acquisition (a retry) leaves the owner's read lease
 *                   as it is                                -> reentry fails (with
 *                   NO_REENTRY_CHECK: mutex)
 *   OLD_GIVE_BACK   finding 1 (spec/README.md), fixed in lock.rs   -> mutex fails
 */

#ifndef MAXATT
#define MAXATT 2                /* attempts of owner A's first acquisition */
#endif
#ifndef MAXATT1
#define MAXATT1 1               /* ... of its second */
#endif
#ifndef WATT
#define WATT 1                  /* ... of the witness B */
#endif
#define TS 1
#define TL 2
#define AGECAP (TL + 1)
#define INTENT TL               /* min(ttl, INTENT_MAX_MS): the model's ttls are far below 2 s */
#define NG 3                    /* guards: A slot 0, A slot 1, B */
#define NBG 5
#define OWN_A 1
#define OWN_B 2
#define M_R 1                   /* modes */
#define M_W 2

/* Dropped acquire futures are left out here to keep the run short: the client code that
   handles them is the same as in setnx.pml and reentrant.pml, and the release it sends
   is idempotent by nonce in this mode too (read_release.lua 18-23, write_release.lua
   25-35). */
#define NO_CANCEL

#include "common.pml"

/* ---- server: the lock hash ---- */
byte writer = 0;
byte wleft = 0;
byte wmask = 0;
byte rmask[3];                  /* index: owner */
byte rlease[3];
byte intent[3];
int  ctr = 0;                   /* the fencing counter */

/* ---- clients ---- */
byte gst[NG];
byte gleft[NG];
byte gmode[NG];                 /* M_R / M_W */
byte nmode[8];                  /* the mode of the acquisition each nonce names */
byte age[2];
byte rleft[2];
byte bgown[NBG];
byte bgnonce[NBG];
byte bgleft[NBG];

/* ---- ghosts ---- */
int  maxtok = 0;
int  abandoned = 0;
byte ndone = 0;

#define held(g) (gst[g] == G_HELD && gleft[g] > 0)
#define CLASH(g, h) (held(g) && held(h) && (gmode[g] == M_W || gmode[h] == M_W))
#define MUTEX (!CLASH(0, 2) && !CLASH(1, 2))
#define A_HOLDS(m) ((held(0) && gmode[0] == m) || (held(1) && gmode[1] == m))

#define TIMERS (wleft + rlease[1] + rlease[2] + intent[1] + intent[2] + \
                gleft[0] + gleft[1] + gleft[2] + age[0] + age[1] + rleft[0] + rleft[1] + \
                bgleft[0] + bgleft[1] + bgleft[2] + bgleft[3] + bgleft[4] > 0)

inline TICK() {
  DOWN(wleft);
  if
  :: wleft == 0 -> writer = 0; wmask = 0          /* prelude.lua 150-155 */
  :: else
  fi;
  DOWN(rlease[1]); DOWN(rlease[2]);
  if
  :: rlease[1] == 0 -> rmask[1] = 0                /* prelude.lua 156-164, 174-184 */
  :: else
  fi;
  if
  :: rlease[2] == 0 -> rmask[2] = 0
  :: else
  fi;
  DOWN(intent[1]); DOWN(intent[2]);                /* prelude.lua 242-252, 185-187 */
  DOWN(gleft[0]); DOWN(gleft[1]); DOWN(gleft[2]);
  AGE(age[0]); AGE(age[1]);
  if
  :: MAYFAIL -> DOWN(rleft[0]); DOWN(rleft[1]);
       DOWN(bgleft[0]); DOWN(bgleft[1]); DOWN(bgleft[2]); DOWN(bgleft[3]); DOWN(bgleft[4])
  :: else ->
       rleft[0] = 0; rleft[1] = 0;
       bgleft[0] = 0; bgleft[1] = 0; bgleft[2] = 0; bgleft[3] = 0; bgleft[4] = 0
  fi
}

#include "clock.pml"

#define OTHER(o) (3 - (o))
#define READER(o) (rmask[o] != 0)       /* s.readers[o]: a live lease and a read */

/* read_acquire.lua (me, nonce n) and write_acquire.lua; r: 1 held, 0 busy, 2 upgrade. */
inline ACQUIRE(me, n, ttl, unsure, r) {
#ifndef OLD_RELEASE
  if
  :: nmode[n] == M_R ->
       if
       :: READER(me) || writer == me ||                      /* 24 */
            (writer == 0 && intent[OTHER(me)] == 0) ->
            if
            :: (rmask[me] & (1 << n)) == 0 ->                 /* 39-40: add_read */
                 rmask[me] = rmask[me] | (1 << n);           /* prelude 267-288 */
                 if
                 :: rlease[me] < ttl -> rlease[me] = ttl
                 :: else
                 fi
            :: else ->                                        /* this acquisition retried: */
#ifndef OLD_READ_RETRY                                        /* the lease raised as by */
                 if                                           /* add_read (finding 2) */
                 :: rlease[me] < ttl -> rlease[me] = ttl
                 :: else
                 fi
#else
                 skip                                         /* nothing renewed */
#endif
            fi;
            r = 1                                             /* 45 */
       :: else -> r = 0                                       /* 47-58: busy */
       fi
  :: nmode[n] == M_W ->
       if
       :: writer == me ->                                     /* 23-49: re-entry or retry */
            wmask = wmask | (1 << n);                         /* 26-29 */
            if
            :: wleft < ttl -> wleft = ttl                     /* 30-34 */
            :: else
            fi;
            r = 1                                             /* 45-48 */
       :: writer != me && READER(me) -> r = 2                 /* 50-57: upgrade refused */
       :: writer == 0 && !READER(me) && !READER(OTHER(me)) -> /* 58-59: free */
            TICK_US; ctr++;                                   /* 62: mint, fence.lua */
            if
            :: ctr < us -> ctr = us                /* the fence floor */
            :: else
            fi;
            assert(ctr > maxtok); maxtok = ctr;               /* property 3 */
            writer = me; wleft = ttl; wmask = 1 << n;         /* 71-74 */
            intent[me] = 0;                                   /* 77 */
            r = 1                                             /* 80-83 */
       :: else ->                                             /* 85-98: busy, intent */
            intent[me] = INTENT;
            r = 0
       fi
  fi
#else
  /* 5e3c280: a count per owner, no nonce (read:<owner>, writer-count). */
  if
  :: nmode[n] == M_R ->
       if
       :: READER(me) || writer == me || (writer == 0 && intent[OTHER(me)] == 0) ->
            rmask[me]++;                                      /* add_read: hincrby */
            if
            :: rlease[me] < ttl -> rlease[me] = ttl
            :: else
            fi;
            r = 1
       :: else -> r = 0
       fi
  :: nmode[n] == M_W ->
       if
       :: writer == me -> wmask++;                            /* 15-17: hincrby count */
            if
            :: wleft < ttl -> wleft = ttl
            :: else
            fi;
            r = 1
       :: writer != me && READER(me) -> r = 2
       :: writer == 0 && !READER(me) && !READER(OTHER(me)) ->
            ctr++; assert(ctr > maxtok); maxtok = ctr;
            writer = me; wleft = ttl; wmask = 1; intent[me] = 0; r = 1
       :: else -> intent[me] = INTENT; r = 0
       fi
  fi
#endif
}

/* read_release.lua / write_release.lua; r: 1 given back, 0 not held here. */
inline RELEASE(me, n, r) {
#ifndef OLD_RELEASE
  if
  :: nmode[n] == M_R ->
       if
       :: (rmask[me] & (1 << n)) == 0 -> r = 0                /* 18-23 */
       :: else ->
            rmask[me] = rmask[me] & ~(1 << n);                /* 24-33 */
            if
            :: rmask[me] == 0 -> rlease[me] = 0               /* 34-38: the last: its score */
            :: else
            fi;
            r = 1                                             /* 31, 39-44 */
       fi
  :: nmode[n] == M_W ->
       if
       :: writer != me || (wmask & (1 << n)) == 0 ->          /* 25-35 */
            if
            :: writer != me -> intent[me] = 0                 /* 26: withdrawn */
            :: else
            fi;
            r = 0
       :: else ->
            wmask = wmask & ~(1 << n);                        /* 36-40 */
            if
            :: wmask == 0 -> writer = 0; wleft = 0            /* 41-52 */
            :: else
            fi;
            r = 1
       fi
  fi
#else
  /* 5e3c280 read_release.lua / write_release.lua: by owner only, one level */
  if
  :: nmode[n] == M_R ->
       if
       :: rmask[me] == 0 -> r = 0                             /* not a reader */
       :: else -> rmask[me]--;                                /* hincrby -1 / hdel */
            if
            :: rmask[me] == 0 -> rlease[me] = 0
            :: else
            fi;
            r = 1
       fi
  :: nmode[n] == M_W ->
       if
       :: writer != me -> r = 0
       :: else -> wmask--;                                    /* writer-count - 1 */
            if
            :: wmask == 0 -> writer = 0; wleft = 0            /* hdel writer ... */
            :: else
            fi;
            r = 1
       fi
  fi
#endif
}

/* extend.lua; rem: the lease left after it, 0 when not held. */
#ifdef OLD_RELEASE
#define MINE_W(me, n) (writer == me && nmode[n] == M_W)      /* 5e3c280: by owner only */
#define MINE_R(me, n) (rmask[me] != 0 && nmode[n] == M_R)
#else
#define MINE_W(me, n) (writer == me && (wmask & (1 << n)) != 0)
#define MINE_R(me, n) ((rmask[me] & (1 << n)) != 0)
#endif
inline EXTEND(me, n, ttl, rem) {
  if
  :: MINE_W(me, n) ->               /* 18-24 */
       if
       :: wleft < ttl -> wleft = ttl
       :: else
       fi;
       rem = wleft
  :: !MINE_W(me, n) && MINE_R(me, n) ->                      /* 25-26 */
       if
       :: rlease[me] < ttl -> rlease[me] = ttl
       :: else
       fi;
       rem = rlease[me]
  :: else -> rem = 0                                          /* 14, 31 */
  fi
}

inline SPAWN_RELEASE(me, n, until) {
  bi = 0;
  do
  :: bgown[bi] == 0 -> bgown[bi] = me; bgnonce[bi] = n; bgleft[bi] = (MAYFAIL -> until : 0); break
  :: else -> bi++; assert(bi < NBG)
  od;
  bi = 0
}
byte bi;

/* Property 4 in the step that runs the acquire script. */
#ifdef NO_REENTRY_CHECK           /* only to see what else finding 2 breaks */
#define AFTER_ACQUIRE(me, n, r) skip
#else
#define AFTER_ACQUIRE(me, n, r) \
  assert(!(me == OWN_A && r == 0 && (A_HOLDS(M_W) || (nmode[n] == M_R && A_HOLDS(M_R)))))
#endif

#include "client.pml"

inline RENEW(g, n) {
  atomic {
    !ext && held(g) ->
      ext = true;
      ETTL(ettl);
      if
      :: MAYFAIL -> faults++; ettl = 0
      :: EXTEND(OWN_A, n, ettl, rem); age[0] = 1
      fi
  };
  if
  :: ettl == 0
  :: ettl > 0 -> EXTEND_REPLY(0, g, ettl, true)
  fi;
  ettl = 0
}

/* Picks the mode of acquisition n (and of n + 1, its nonce after a give-back). */
inline MODE(g, n) {
  if
  :: gmode[g] = M_R
  :: gmode[g] = M_W
  fi;
  nmode[n] = gmode[g]; nmode[n + 1] = gmode[g]
}

/* As in reentrant.pml: OLD_RELEASE runs without faults, so that its counterexample is the
   stale guard's. */
#ifdef OLD_RELEASE
#define A_LOSSY false
#else
#define A_LOSSY true
#endif

proctype OwnerA()
{
  byte ttl, att, res, r, rem, ettl, n0 = 1, n1 = 3;
  bool unsure, acq0, acq1, ext;

  do
  :: !acq0 -> atomic { MODE(0, n0); ttl = TL };
     ACQUISITION(0, 0, OWN_A, n0, ttl, A_LOSSY, MAXATT); atomic { acq0 = true; ttl = 0 }
  :: acq0 && !acq1 -> atomic { MODE(1, n1); ttl = TL };
     ACQUISITION(0, 1, OWN_A, n1, ttl, A_LOSSY, MAXATT1); atomic { acq1 = true; ttl = 0 }
  :: gst[0] == G_HELD || gst[0] == G_LOST -> GUARD_RELEASE(0, 0, OWN_A, n0, A_LOSSY)
  :: gst[1] == G_HELD || gst[1] == G_LOST -> GUARD_RELEASE(0, 1, OWN_A, n1, A_LOSSY)
  :: RENEW(0, n0)
  :: RENEW(1, n1)
  :: acq0 && acq1 && gst[0] != G_HELD && gst[0] != G_LOST && gst[1] != G_HELD && gst[1] != G_LOST ->
       break
  od;
  ndone++
}

proctype OwnerB()
{
  byte ttl = TL, att, res, r, n = 5;
  bool unsure;

  atomic { MODE(2, n) };
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
ltl settles { <> [] (ndone == 2 && bgown[0] + bgown[1] + bgown[2] + bgown[3] + bgown[4] == 0 && writer == 0 && rmask[1] + rmask[2] + intent[1] + intent[2] == 0) }
#endif

init {
  atomic {
    run OwnerA(); run OwnerB();
    run BgRelease(0); run BgRelease(1); run BgRelease(2); run BgRelease(3); run BgRelease(4)
  };
  /* property 2: no hold left */
  atomic {
    ndone == 2 && bgown[0] + bgown[1] + bgown[2] + bgown[3] + bgown[4] == 0 ->
#ifndef OLD_RELEASE
      assert(((wmask | rmask[1] | rmask[2]) & ~abandoned) == 0)
#else
      assert(wmask + rmask[1] + rmask[2] == 0 || abandoned != 0)
#endif
  }
#ifdef LIVE
  ;
  /* Everything returned: idle for ever (see setnx.pml). */
  do :: ndone == 2 od
#endif
}
