/*
 * redlock.pml: the setnx lock on a Redlock quorum of N = 3 nodes, with restarts.
 *
 * Mirrors distlock/src/quorum/mod.rs (acquire fan-out and majority, release_everywhere,
 * release to all nodes), quorum/node.rs (which node casts a vote: the restart guard) and,
 * per node, distlock/src/setnx/{acquire,release}.lua (the table in spec/README.md).
 *
 * Nodes: each holds the lock key (a token and its time left) and counts its uptime (up to
 * DELAY, the restart delay, set to the longest ttl as node.rs asks). One node may restart
 * once, at any moment, without persistence: its key is gone, its uptime starts at 0.
 *
 * Clients, one acquisition each (A token 1, B token 2):
 *   A is connected from the start (every node up for long). When a node restarts, A's
 *     connection to it drops: the node is suspect, casts no vote, until A's monitor reads
 *     INFO again (a step at any later moment) and judges it (Health::judge).
 *   B connects at any moment (a step of its own), perhaps after the restart: the late
 *     client of issue 10 item 3. Its connect reads INFO from every node and judges it.
 *   Acquire (Nodes::acquire): the request goes to every trusted node, in any order; each
 *     runs there or is lost; a majority (2) of grants is a hold, valid for ttl from the
 *     moment it was sent (lock.rs, lease.rs); a late answer gives it back; a failed
 *     attempt is released on every node (release_everywhere). Then the release, on every
 *     node (Nodes::release); each request runs or is lost.
 *
 * Judging a node (Health::judge, node.rs 440-455), from what INFO says:
 *   current            a run_id other than the one known: no vote for DELAY; else no vote
 *                      until the server has been up for DELAY (delay - uptime);
 *   OLD_RESTART_GUARD  (before c322251) only a run_id change seen while connected counts:
 *                      a client that connects after the restart trusts the node at once.
 *
 * Property: mutex (no two guards held at once). Checked at every grant.
 */

#ifndef FAULTS
#define FAULTS 1
#endif
#define N 3
#define QUORUM 2
#define TTL 2
#define DELAY TTL               /* the restart delay: at least the longest ttl */
#define AGECAP (TTL + 1)
#define TOK_A 1
#define TOK_B 2

#include "common.pml"

/* ---- nodes ---- */
byte nkey[N];                   /* the lock key on node i: 0 or a token */
byte nleft[N];                  /* its time left */
byte up[N];                     /* the server's uptime, counted up to DELAY */
bool restarted = false;

/* ---- clients (index 0 = A, 1 = B) ---- */
bool connected[2];
bool suspect[6];                /* [c * N + i]: disconnected from node i, not judged since */
byte dleft[6];                  /* [c * N + i]: time left of the distrust in force */
byte gst[2];
byte gleft[2];
byte age[2];
byte pend[2];                   /* bit i: the client's request to node i is on its way */

#define V(c, i) ((c) * N + (i))
#define trusted(c, i) (!suspect[V(c, i)] && dleft[V(c, i)] == 0)
#define held(c) (gst[c] == G_HELD && gleft[c] > 0)
#define MUTEX (!(held(0) && held(1)))

#define TIMERS (nleft[0] + nleft[1] + nleft[2] + gleft[0] + gleft[1] + age[0] + age[1] + \
                dleft[0] + dleft[1] + dleft[2] + dleft[3] + dleft[4] + dleft[5] > 0 || \
                up[0] < DELAY || up[1] < DELAY || up[2] < DELAY)

inline TICK() {
  i = 0;
  do
  :: i < N ->
       DOWN(nleft[i]);
       if
       :: nleft[i] == 0 -> nkey[i] = 0      /* expired */
       :: else
       fi;
       if
       :: up[i] < DELAY -> up[i]++
       :: else
       fi;
       i++
  :: else -> break
  od;
  i = 0;
  do
  :: i < 6 -> DOWN(dleft[i]); i++
  :: else -> break
  od;
  i = 0;
  DOWN(gleft[0]); DOWN(gleft[1]);
  AGE(age[0]); AGE(age[1])
}
byte i;

#include "clock.pml"

/* One node restarts without persistence: its key is gone, its uptime starts again. The
   clients connected to it see the connection drop (node.rs 485-489): suspect. Node 0:
   the nodes are alike (every request goes to all of them, in any order), so which one
   restarts does not matter. */
active proctype Crash()
{
  byte j;
end:
  if
  :: atomic {
       j = 0;                                   /* node 0: the nodes are alike */
       nkey[j] = 0; nleft[j] = 0; up[j] = 0; restarted = true;
       /* a request on its way to the old server dies with the connection: an error */
       pend[0] = pend[0] & ~(1 << j); pend[1] = pend[1] & ~(1 << j);
       if
       :: connected[0] -> suspect[V(0, j)] = true
       :: else
       fi;
       if
       :: connected[1] -> suspect[V(1, j)] = true
       :: else
       fi;
       j = 0
     }
  fi
}

/* Health::judge after a reconnection (spawn_monitor, node.rs 567-596): the run_id changed
   (the only disconnection here is a restart), so no vote for the full delay; that rule is
   the same before and after c322251. */
proctype Monitor(byte c)
{
  byte j;
end:
  do
  :: atomic {
       (suspect[V(c, 0)] || suspect[V(c, 1)] || suspect[V(c, 2)]) ->
         if
         :: suspect[V(c, 0)] -> j = 0
         :: suspect[V(c, 1)] -> j = 1
         :: suspect[V(c, 2)] -> j = 2
         fi;
         dleft[V(c, j)] = DELAY;                /* node.rs 444: run_id changed: delay */
         suspect[V(c, j)] = false;
         j = 0
     }
  od
}

/* Node::connect (node.rs 520-528): INFO read from every node, judged with no run_id known
   yet: the rest of the delay, counting the uptime (node.rs 445); OLD_RESTART_GUARD: no
   distrust at all. */
inline CONNECT(c) {
  connected[c] = true;
#ifndef OLD_RESTART_GUARD
  j = 0;
  do
  :: j < N -> dleft[V(c, j)] = DELAY - up[j]; j++
  :: else -> break
  od;
  j = 0
#endif
}

/* setnx/acquire.lua on node j (a first attempt: ARGV[3] = 0): 12 SET NX, else busy. */
inline NODE_ACQUIRE(j, tok) {
  if
  :: nkey[j] == 0 -> nkey[j] = tok; nleft[j] = TTL; granted++
  :: else -> busy++
  fi
}

/* setnx/release.lua on node j: 9-12 delete if ours. */
inline NODE_RELEASE(j, tok) {
  if
  :: nkey[j] == tok -> nkey[j] = 0; nleft[j] = 0
  :: else
  fi
}

/* The release to every node (Nodes::release, release_everywhere: all nodes, trusted or
   not), each run or lost. One step: once the guard is released (or the attempt failed)
   nothing this client holds is promised to anyone, so the order of the per-node steps
   changes nothing the properties can see. */
inline FAN_OUT_RELEASE(c, tok) {
  atomic {
    j = 0;
    do
    :: j < N ->
         if
         :: MAYFAIL -> faults++                 /* lost */
         :: NODE_RELEASE(j, tok)
         fi;
         j++
    :: else -> break
    od;
    j = 0; pend[c] = 0
  }
}

proctype Client(byte c)
{
  byte tok = c + 1, granted, busy, j;

  if
  :: c == 0                                     /* A: connected from the start (init) */
  :: c == 1 -> atomic { CONNECT(1) }            /* B: connects now, at any moment */
  fi;
  /* ---- Nodes::acquire (mod.rs 116-181): to every trusted node ---- */
  atomic {
    age[c] = 1;                                 /* lock.rs 164: sent */
    j = 0;
    do
    :: j < N ->
         if
         :: trusted(c, j) -> pend[c] = pend[c] | (1 << j)
         :: else                                /* not asked (mod.rs 83, 357-362) */
         fi;
         j++
    :: else -> break
    od;
    j = 0
  };
  do
  :: atomic {
       pend[c] != 0 ->
         if
         :: pend[c] & 1 -> j = 0
         :: pend[c] & 2 -> j = 1
         :: pend[c] & 4 -> j = 2
         fi;
         pend[c] = pend[c] & ~(1 << j);
         if
         :: MAYFAIL -> faults++                 /* request or reply lost: an error */
         :: NODE_ACQUIRE(j, tok)
         fi;
         j = 0
     }
  :: atomic { pend[c] == 0 -> break }
  od;
  /* ---- the outcome (mod.rs 152-181, lock.rs 172-191) ---- */
  atomic {
    if
    :: granted >= QUORUM && age[c] - 1 + DRIFT < TTL ->
         gst[c] = G_HELD; gleft[c] = TTL - DRIFT - (age[c] - 1);
         assert(MUTEX)                          /* property 1 */
    :: else ->                                  /* not held, or too late: give it back */
         gst[c] = G_NONE
    fi;
    age[c] = 0; busy = 0
  };
  if
  :: gst[c] == G_HELD ->                        /* the guard is held a while, then released */
       atomic { gst[c] = G_RELEASED; gleft[c] = 0 }
  :: else
  fi;
  FAN_OUT_RELEASE(c, tok);
  granted = 0
}

init {
  atomic {
    up[0] = DELAY; up[1] = DELAY; up[2] = DELAY;  /* every node up for long */
    connected[0] = true;                          /* A, judged them: trusted */
    run Client(0); run Client(1); run Monitor(0); run Monitor(1)
  }
}
