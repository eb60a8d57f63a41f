/*
 * setnx.pml: the setnx lock on one Redis node.
 *
 * Mirrors distlock/src/setnx/{acquire,extend,release}.lua and the client code that drives
 * them: the acquire loop and its Pending guard (lock.rs run(), Pending), the lease
 * arithmetic (lease.rs), release with retries and in the background (guard.rs). The table
 * in spec/README.md maps every atomic step to its script lines.
 *
 * NC clients, one lock. Each client makes one acquisition: it draws a fresh token (the
 * owner), picks a ttl (TS or TL), attempts up to MAXATT times, may renew once (ttl TS or
 * TL), and releases. The caller may drop the acquire future at any point where it is
 * pending (Pending armed: lock.rs 166, 175, 195).
 *
 * Properties (assertions, see common.pml for why at these steps):
 *   mutex   two guards never both say held (with RESTART: until the restart wiped the
 *           server; without persistence one node cannot promise more, fencing can)
 *   fence   each token handed to a guard is above every token handed before
 *   final   once every call returned and every background release finished, no key is
 *           left (except one whose release gave up when its lease had run out on the
 *           client's clock, guard.rs 247-268: it expires by itself)
 *
 * Variants (-D):
 *   RESTART        the server may restart once without persistence (lock and counter
 *                  gone, the clock goes on)
 *   OLD_EXTEND     extend as before e9490dc: PEXPIRE ttl (may shorten), answer 1, the guard
 *                  keeps max(its validity, sent + ttl)                   -> mutex fails
 *   FAILOVER       with RESTART: the "restart" is a failover to a replica that lagged: the
 *                  lock was not replicated and the counter is one increment behind
 *   OLD_FENCE      a new counter starts at 1 (INCR alone)                -> fence fails
 *   OLD_FLOOR      the floor only for a new counter (INCR gave 1), as before the fence
 *                  floor on every acquisition; with FAILOVER             -> fence fails
 *   OLD_GIVE_BACK  finding 1 (spec/README.md), fixed in lock.rs: after giving back a grant
 *                  that came too late, the next attempts keep the same token -> mutex fails
 */

#ifndef NC
#define NC 2
#endif
#ifndef MAXATT
#define MAXATT 2                /* attempts per acquisition */
#endif
#ifndef WATT
#define WATT MAXATT             /* ... of a witness (ONE_FULL) */
#endif
#define TS 1                    /* short ttl */
#define TL 2                    /* long ttl */
#define AGECAP (TL + 1)
#define NBG (2 * NC)            /* background release slots: 2 per client */

#include "common.pml"

/* Every client does everything a caller can: retry, renew, drop the acquire future, and
   its requests and replies may be lost. ONE_FULL keeps that to client 0, the others only
   acquire, hold and release (witnesses): a smaller run. */
#ifdef ONE_FULL
#define FULL(c) (c == 0)
#else
#define FULL(c) true
#endif
#define MAYFAIL_C(c) (MAYFAIL && FULL(c))
/* With RESTART the question is the fencing counter: renewals and dropped futures issue no
   token and are left out there, to keep the run short. */
#ifdef RESTART
#define MORE(c) false
#else
#define MORE(c) FULL(c)
#endif

/* ---- server ---- */
byte key = 0;                   /* the lock key: 0 = absent, else the holder's token */
byte kleft = 0;                 /* its time to live */
int  ctr = 0;                   /* the fencing counter; 0 = absent */
bool restarted = false;

/* ---- clients (globals so that a tick can age them) ----
   Tokens: client c's acquisition is 2c+1 (2c+2 after a give-back): a
   byte, not 128 random bits, but as unique. */
byte gst[NC];                   /* guard state (common.pml G_*) */
byte gleft[NC];                 /* guard validity left: held while > 0 */
byte age[NC];                   /* 0: nothing in flight; else 1 + ticks since the send */
byte rleft[NC];                 /* its release's lease left (client.pml) */
byte bgown[NBG];                /* background release: owner (0 = slot free) */
byte bgnonce[NBG];              /* ... its token */
byte bgleft[NBG];               /* ... and time left before it gives up (guard.rs 261, 285) */

/* ---- ghosts ---- */
int  maxtok = 0;                /* largest fencing token issued so far */
int  ktok = 0;                  /* the token issued to the tenure of the current key */
int  abandoned = 0;             /* bit t: a release of token t gave up, its lease over */
byte ndone = 0;                 /* clients whose calls all returned */

#define held(c) (gst[c] == G_HELD && gleft[c] > 0)
#if NC == 2
#define MUTEX (restarted || !(held(0) && held(1)))
#else
#define MUTEX (restarted || (!(held(0) && held(1)) && !(held(0) && held(2)) && !(held(1) && held(2))))
#endif

#define TIMERS (kleft > 0 || timers_on)

/* timers_on: some client or background time value is running (set by TICK and by the
   steps that start one: a state with all of them 0 and no key needs no tick). */
#define timers_on (gleft[0] + gleft[1] + age[0] + age[1] + rleft[0] + rleft[1] + \
                   bgleft[0] + bgleft[1] + bgleft[2] + bgleft[3] + MORE_TIMERS > 0)
#if NC > 2
#define MORE_TIMERS (gleft[2] + age[2] + rleft[2] + bgleft[4] + bgleft[5])
#else
#define MORE_TIMERS 0
#endif

inline TICK() {
  DOWN(kleft);
  if
  :: kleft == 0 -> key = 0; ktok = 0  /* expired */
  :: else
  fi;
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

byte i;                         /* loop index of TICK (back to 0 after it: no state of its own) */

#include "clock.pml"

#ifdef RESTART
/* A restart without persistence: every key is gone, lock and counter; the clock is not. */
active proctype Crash()
{
end:
  if
#ifdef FAILOVER
  :: atomic { key = 0; kleft = 0; ktok = 0; ctr = (ctr > 0 -> ctr - 1 : 0); restarted = true }
#else
  :: atomic { key = 0; kleft = 0; ktok = 0; ctr = 0; restarted = true }
#endif
  fi
}
#endif

/* INCR, and the token is never below the server clock (the fence floor, acquire.lua).
   The model's `us` stands for the floor (the clock's millisecond in us): tokens stay at or
   below it, so it is above every token issued before.
   OLD_FENCE: INCR alone (acquire.lua 11 at 5e3c280). OLD_FLOOR: the clock only for a new
   counter (INCR gave 1), as at 9b4a670. */
inline MINT() {
  TICK_US;
  ctr++;
#ifndef OLD_FENCE
  if
#ifdef OLD_FLOOR
  :: ctr == 1 -> ctr = us
#else
  :: ctr < us -> ctr = us
#endif
  :: else
  fi;
#endif
  assert(ctr > maxtok);                         /* property 3: above every token before */
  maxtok = ctr;
  ktok = ctr
}

/* acquire.lua. r: 1 held, 0 busy. The token it answers is the counter: `ktok` (ghost)
   keeps the one issued to the current tenure. */
inline ACQUIRE(me, tok, ttl, unsure, r) {
  if
  :: key == 0 ->                                /* 12: SET NX PX */
       key = tok; kleft = ttl;
       MINT(); r = 1                            /* 13-28 */
  :: else ->
       if
       :: unsure && key == tok ->               /* 47: our token, an earlier try took it */
            if
            :: kleft < ttl -> kleft = ttl       /* 50-52: never shortened */
            :: else
            fi;
            r = 1;                              /* 53: GET of the counter */
            assert(ctr == ktok)                 /* property 3: the tenure's own token */
       :: else -> r = 0                         /* 30-32, 55: busy */
       fi
  fi
}

/* extend.lua. rem: the lease left after it (0: not ours). */
inline EXTEND(me, tok, ttl, rem) {
  if
  :: key == tok ->                              /* 7 */
#ifdef OLD_EXTEND
       kleft = ttl; rem = 1                     /* extend.lua 4-5 at 5e3c280: PEXPIRE ttl */
#else
       if
       :: kleft < ttl -> kleft = ttl; rem = ttl /* 8-12 */
       :: else -> rem = kleft                   /* 14 */
       fi
#endif
  :: else -> rem = 0                            /* 16 */
  fi
}

/* release.lua */
inline RELEASE(me, tok, r) {
  if
  :: key == tok -> key = 0; kleft = 0; ktok = 0; r = 1   /* 9-12 */
  :: else -> r = 0                              /* 14 */
  fi
}

/* Hands a release to a background task (guard.rs spawn_release): client c's slots are
   2c and 2c+1. Its time: until the lease it may have taken ends (lock.rs 243). */
inline SPAWN_RELEASE(me, tok, until) {
  if
  :: bgown[2 * (me) - 2] == 0 -> bgown[2 * (me) - 2] = me; bgnonce[2 * (me) - 2] = tok;
       bgleft[2 * (me) - 2] = (MAYFAIL -> until : 0)
  :: else -> assert(bgown[2 * (me) - 1] == 0); bgown[2 * (me) - 1] = me; bgnonce[2 * (me) - 1] = tok;
       bgleft[2 * (me) - 1] = (MAYFAIL -> until : 0)
  fi
}

#define AFTER_ACQUIRE(me, n, r) skip
#define UNSURE(b) unsure = b             /* acquire.lua reads ARGV[3] */

#include "client.pml"

/* Client c (owner c + 1): one acquisition with a token of its own (2c+1; 2c+2 after a
   give-back), ttl TS or TL; if held, maybe one renewal (client 0); then
   the release. */
proctype Client(byte c)
{
  byte id, ttl, att, res, r, rem, ettl;
  bool unsure;

  atomic {
    id = 2 * c + 1;
    if
    :: ttl = TS
    :: ttl = TL
    fi
  };
  ACQUISITION(c, c, c + 1, id, ttl, FULL(c), (FULL(c) -> MAXATT : WATT));
  if
  :: gst[c] == G_HELD ->
       /* guard.rs extend(): maybe once */
       if
       :: skip
       :: atomic {
            MORE(c) && held(c) ->
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
       fi;
       GUARD_RELEASE(c, c, c + 1, id, FULL(c))
  :: else
  fi;
  atomic { id = 0; ttl = 0; unsure = false; ndone++ }
}

#if NC > 2
#define BG_IDLE (bgown[0] + bgown[1] + bgown[2] + bgown[3] + bgown[4] + bgown[5] == 0)
#else
#define BG_IDLE (bgown[0] + bgown[1] + bgown[2] + bgown[3] == 0)
#endif

#ifdef LIVE
/* property 2 as liveness, under weak fairness (pan -a -f): every run ends with every call
   returned, every background release finished and no key left (one abandoned by a release
   that gave up expires with its lease). */
ltl settles { <> [] (ndone == NC && BG_IDLE && key == 0) }
#endif

init {
  atomic {
    run Client(0); run Client(1);
#if NC > 2
    run Client(2); run BgRelease(4); run BgRelease(5);
#endif
    run BgRelease(0); run BgRelease(1); run BgRelease(2); run BgRelease(3)
  };
  /* property 2: nothing left behind */
  atomic {
    ndone == NC && BG_IDLE -> assert(key == 0 || (abandoned & (1 << key)) != 0)
  }
#ifdef LIVE
  ;
  /* Everything returned: idle for ever, so the run the claim judges is infinite (spin's
     fair-cycle search does not stutter-extend a run that stops). */
  do :: ndone == NC od
#endif
}
