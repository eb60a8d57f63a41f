/*
 * client.pml: the client side every single-node model shares: the acquire loop with its
 * Pending guard (lock.rs run(), Pending), the lease arithmetic (lease.rs), renewal
 * (guard.rs extend()) and release with retries, then in the background (guard.rs
 * release(), Drop, release_retrying(), spawn_release()).
 *
 * The including model provides
 *   globals  gst[], gleft[] (per guard); age[], rleft[] (per client); bgown[], bgnonce[],
 *            bgleft[] (background releases); abandoned; MUTEX (property 1)
 *   inlines  ACQUIRE(me, n, ttl, unsure, r)   the acquire script; r: 1 held, 0 busy,
 *                                             2 refused for good (upgrade)
 *            RELEASE(me, n, r)                the release script; r: 1 given back, 0 not
 *            EXTEND(me, n, ttl, rem)          the extend script; rem: lease left, 0 not held
 *            SPAWN_RELEASE(me, n, until)      hands a release to a background task
 *            AFTER_ACQUIRE(me, n, r)          checks in the step that ran the acquire script
 *            UNSURE(b)                        sets `unsure` where the script reads it
 *                                             (setnx: ARGV[3]); else nothing
 * and the calling proctype declares byte att, res, r, rem; bool unsure. A renewal
 * is written by the model (the is_held() check and the extend request in one step), then
 * EXTEND_REPLY. NO_CANCEL leaves out dropped acquire futures.
 *
 * Granularity (see common.pml): a request is sent and run in one step; its reply, with all
 * the bookkeeping the code does before its next await, is the next step. Formal
 * parameters end in _ (spin substitutes them as text).
 */

#ifndef UNSURE
#define UNSURE(b) skip
#endif

#define R_GOT    1
#define R_BUSY   2
#define R_FAIL   3
#define R_CANCEL 4
#define R_REFUSED 5

/* The loop's decision after an attempt (lock.rs 194-223), part of the step that saw the
   outcome: retry while attempts are left, else return; an Err return, or a future dropped,
   while Pending is armed gives the acquisition back (lock.rs 237-255). */
inline DECIDE(me_, n_, ttl_, maxatt_) {
  r = 0;
  if
  :: res == R_GOT -> UNSURE(false); break
  :: res == R_FAIL && att < maxatt_ -> UNSURE(true)      /* retried, unsure (lock.rs 199-202) */
  :: res == R_FAIL -> SPAWN_RELEASE(me_, n_, ttl_); break  /* Err: Pending armed */
  :: res == R_CANCEL -> SPAWN_RELEASE(me_, n_, ttl_); break
  :: res == R_REFUSED -> SPAWN_RELEASE(me_, n_, ttl_); break  /* Err(Upgrade): Pending armed */
  :: res == R_BUSY && att < maxatt_                      /* waits, tries again */
  :: res == R_BUSY -> break                             /* Busy / Timeout: disarmed */
  fi;
  res = 0
}

/* One acquisition (lock.rs run()) into guard g_ by client c_: owner me_, nonce n_ (one per
   acquisition: the setnx token, or the reentrant / read-write nonce), ttl_, at most maxatt_
   attempts. lossy_: its requests and replies may be lost and its caller may drop the
   future. */
inline ACQUISITION(c_, g_, me_, n_, ttl_, lossy_, maxatt_) {
  att = 0;
  do
  :: atomic {                                   /* lock.rs 163-169: sent, Pending armed */
       age[c_] == 0 ->
         att++;
         if
         :: lossy_ && MAYFAIL -> faults++; res = R_FAIL;   /* request lost */
            DECIDE(me_, n_, ttl_, maxatt_)
         :: ACQUIRE(me_, n_, ttl_, unsure, r); age[c_] = 1;  /* the server runs it */
            AFTER_ACQUIRE(me_, n_, r)
         fi
     }
  :: atomic {                                   /* the reply */
       age[c_] > 0 ->
         if
         :: lossy_ && MAYFAIL -> faults++; res = R_FAIL    /* lost */
#ifndef NO_CANCEL
         :: lossy_ -> res = R_CANCEL             /* the future is dropped first */
#endif
         :: r == 1 && age[c_] - 1 + DRIFT < ttl_ ->         /* lock.rs 172-186 */
              gst[g_] = G_HELD;                 /* valid_until(sent, ttl) */
              gleft[g_] = ttl_ - DRIFT - (age[c_] - 1);
              assert(MUTEX);                    /* property 1 */
              res = R_GOT
         :: r == 1 && age[c_] - 1 + DRIFT >= ttl_ ->        /* lock.rs 188-191: too late */
              SPAWN_RELEASE(me_, n_, ttl_);     /* give_back, then on as if busy */
#ifndef OLD_GIVE_BACK                           /* with a new id and unsure reset, so the */
              n_ = n_ + 1;                      /* give-back cannot delete the next hold */
              UNSURE(false);                    /* (finding 1, README.md) */
#endif
              res = R_BUSY
         :: r == 0 -> res = R_BUSY              /* lock.rs 194-196 */
         :: r == 2 -> res = R_REFUSED           /* {-2, 'upgrade'}: lock.rs 204 */
         fi;
         age[c_] = 0;
         DECIDE(me_, n_, ttl_, maxatt_)
     }
  od;
  att = 0
}

/* The reply to a renewal of guard g_ (ttl ettl_) by client c_: guard.rs extend() 149-168,
   lease.rs renewed(). The request went out in the caller's step, with the is_held() check
   (guard.rs 151-154: no await in between). */
inline EXTEND_REPLY(c_, g_, ettl_, lossy_) {
  atomic {
    if
    :: lossy_ && MAYFAIL -> faults++             /* reply lost: Err, guard unchanged */
    :: rem > 0 && gst[g_] == G_HELD && gleft[g_] > 0 ->
#ifdef OLD_EXTEND
         /* lease.rs at 5e3c280: the guard keeps max(valid_until, sent + ttl) */
         if
         :: ettl_ - DRIFT - (age[c_] - 1) > gleft[g_] -> gleft[g_] = ettl_ - DRIFT - (age[c_] - 1)
         :: else
         fi;
#else
         gleft[g_] = rem - DRIFT - (age[c_] - 1); /* the latest sent: sent + remaining - drift */
#endif
         assert(MUTEX)                          /* property 1 */
    :: !(rem > 0 && gst[g_] == G_HELD && gleft[g_] > 0) ->
         gst[g_] = G_LOST                       /* refused or too late: declare_lost */
    fi;
    age[c_] = 0; rem = 0
  }
}

/* guard.rs release() (177-204) of guard g_ by client c_. The guard is consumed and the
   release sent; after a transport failure (request or reply lost) it is sent again while the
   lease lasts (release_retrying, 247-268: `until` is the guard's validity, 179). Once that
   stops, release() returns the error and the guard's Drop (228-241) hands the release to a
   task of its own (spawn_release, 274-290), whose release_retrying sends it once more
   whatever `until` says, and then gives up: the key ends with its lease. Dropping the future
   of release() after the request went out also ends in Drop (NO_CANCEL leaves that out).
   A retry that finds nothing counts as released (260). rleft[c_]: the lease left (the
   release's `until`), counted down only while a failure may still come. */
#define RL_SEND 1
#define RL_RAN  2
inline RL_FAILED(c_, me_, n_) {
  if
  :: rleft[c_] > 0 -> res = RL_SEND              /* the lease lasts: sent again */
  :: else -> SPAWN_RELEASE(me_, n_, 0); res = 0  /* Err; Drop: once more, in a task */
  fi
}
inline RL_SENDING(c_, me_, n_, lossy_) {
  if
  :: lossy_ && MAYFAIL -> faults++; RL_FAILED(c_, me_, n_)    /* request lost */
  :: RELEASE(me_, n_, r); r = 0; res = RL_RAN
  fi
}
inline GUARD_RELEASE(c_, g_, me_, n_, lossy_) {
  atomic {
    rleft[c_] = (lossy_ && MAYFAIL -> gleft[g_] : 0);
    gst[g_] = G_RELEASED; gleft[g_] = 0;
    RL_SENDING(c_, me_, n_, lossy_)
  };
  do
  :: atomic { res == RL_SEND -> RL_SENDING(c_, me_, n_, lossy_) }
  :: atomic { res == RL_RAN ->                  /* the reply */
       if
       :: lossy_ && MAYFAIL -> faults++; RL_FAILED(c_, me_, n_)   /* lost */
#ifndef NO_CANCEL
       :: lossy_ -> SPAWN_RELEASE(me_, n_, rleft[c_]); res = 0    /* future dropped: Drop */
#endif
       :: res = 0
       fi }
  :: atomic { res == 0 -> rleft[c_] = 0; break }
  od
}

/* A release running in a task of its own (guard.rs spawn_release): slot s holds its owner
   (0 = free), nonce, and the time left before it gives up. Sent, and sent again after a
   transport failure while its time lasts. */
proctype BgRelease(byte s)
{
  byte r;
end:
  do
  :: atomic {
       bgown[s] != 0 && MAYFAIL -> faults++;    /* request lost */
       if
       :: bgleft[s] == 0 -> abandoned = abandoned | (1 << bgnonce[s]);
            bgown[s] = 0; bgnonce[s] = 0        /* gives up: its time is over */
       :: else                                  /* sent again */
       fi
     }
  :: atomic {
       bgown[s] != 0 -> RELEASE(bgown[s], bgnonce[s], r); r = 0;
       if
       :: MAYFAIL -> faults++;                  /* reply lost */
          if
          :: bgleft[s] == 0 -> bgown[s] = 0; bgnonce[s] = 0
          :: else                               /* sent again */
          fi
       :: bgown[s] = 0; bgnonce[s] = 0; bgleft[s] = 0   /* answered: done */
       fi
     }
  od
}
