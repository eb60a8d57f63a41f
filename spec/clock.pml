/*
 * clock.pml: the Clock process (see common.pml). Included by each model after it defined
 * TICK() (one tick: count every time value down or up) and TIMERS (true while some time
 * value would change: ticks that change nothing are left out, so a run where every client
 * is stuck ends in a state spin can report).
 */

active proctype Clock()
{
end:
  do
  :: d_step { TIMERS -> TICK() }
  od
}
