/*
 * Model of the settle check (src/api/api_wait.c, settled; docs/design.md,
 * "Settled") against the bodies and queues it reads.  The claim: once the
 * check says the runtime has settled, nothing inside the runtime moves (no
 * task ends, no body resumes) unless a thread outside it spawns a key
 * after the check began.
 *
 * Checked by model/check.sh with spin, as coherence.pml is: `defect`
 * selects a variant (the list is at the end of this file), 0 being the
 * check; pan takes it from the environment's WEFT_DEFECT, spin from
 * -DDEFECT=n.
 *
 * One worker W runs body A, which waits (without a timeout) for task X.
 * X, chosen at the start: 0 depends on a key K nobody has spawned (the
 * outside may spawn it, which makes X ready and queued, where A's wait runs
 * it); 1 runs on a second worker W2 and ends; 2 is queued, and A's wait
 * runs it.  With X of kind 0 or 2 a task U may also sit queued that A's
 * wait cannot run (no worker but W): stuck too, once A's wait has looked at
 * it.  Counters are read one at a time, as the scans read each worker's
 * block; W's frame is written under its sequence count.
 */
#ifndef DEFECT
#define DEFECT 0
#endif
#define WAITING 0
#define READY   1
#define FINAL   2

byte defect = DEFECT;

byte ready, done, ended, pushes, queued; /* the runtime's counts, and the tasks in queues */
byte kind;                               /* X's, as above */
byte xstate = WAITING;
bool xqueued;                            /* X in a queue */
bool xrunning2;                          /* X running on W2 */
byte seq, depth, wdepth;                 /* W: wait_seq, depth, wait_depth */
bool on;                                 /* W: wait_on is X */
byte seen = 255;                         /* W: wait_seen (255: not looked yet) */
byte outside_moves;                      /* spawns of K by the outside */
bool settled_said;                       /* the check said settled, */
byte om_decl;                            /* having begun when outside_moves read this */

/* A move inside the runtime: after the check said settled, only after an
 * outside move made since the check began. */
inline movement() { assert(!settled_said || outside_moves != om_decl) }

inline frame(o, d) { seq++; on = o; wdepth = d; seen = 255; seq++ }

proctype W()
{
    byte p;
    depth = 1;                  /* A runs (made ready at its spawn: init) */
    frame(1, 1);                /* its wait publishes X and the depth */
    do
    :: xstate == FINAL -> break
    :: else ->
        /* help_task: the pushes, then a look for X queued; a push after
         * the read wakes the wait (weft__wake_work, or its look again
         * before it sleeps: wait.c) */
        p = pushes;
        if
        :: atomic { xqueued -> xqueued = 0; queued-- } ->
            depth = 2; movement(); atomic { xstate = FINAL; done++ }; depth = 1
        :: else ->
            if :: defect == 1 -> seen = pushes :: else -> seen = p fi;
end_asleep: /* until X ends or something is pushed (for ever if neither) */
            (xstate == FINAL || pushes != p)
        fi
    od;
    frame(0, 0);
    movement();                 /* A resumes */
    atomic { done++; depth = 0 }
}

proctype W2()
{
    if
    :: kind == 1 -> movement(); atomic { xstate = FINAL; done++; xrunning2 = 0 }
    :: else
    fi
}

proctype Outside()
{
    if
    :: kind == 0 -> atomic { outside_moves++; xstate = READY; ready++; xqueued = 1; queued++; pushes++ }
    :: skip
    fi
}

/* settled(): scan a, the stuck bodies (stuck_on) and the queue, scan b. */
proctype Check()
{
    byte r1, d1, e1, p1, r2, d2, e2, p2, s1, wd1, dp1, seen1, st, stuck, q, om1;
    bool on1, all;
    do
    :: !settled_said ->
end_checking:
        atomic { om1 = outside_moves; r1 = ready }; d1 = done; e1 = ended;
        if :: defect != 2 -> p1 = pushes :: else fi;
        if
        :: r1 != d1 ->
            s1 = seq; on1 = on; wd1 = wdepth; dp1 = depth; st = xstate; seen1 = seen;
            stuck = 0; all = false;
            if
            :: s1 % 2 == 0 && on1 && wd1 > 0 && dp1 == wd1 && st != FINAL && seq == s1 ->
                stuck = wd1; all = (seen1 == p1 || defect == 3)
            :: else
            fi;
            if :: xrunning2 -> all = false :: else fi;  /* W2 runs X: not stuck */
            q = queued;
            if
            :: r1 == d1 + stuck
            :: all && r1 == d1 + stuck + q
            :: else -> goto again
            fi
        :: else
        fi;
        r2 = ready; d2 = done; e2 = ended;
        if :: defect != 2 -> p2 = pushes :: else fi;
        if
        :: r1 == r2 && d1 == d2 && e1 == e2 && p1 == p2 ->
            atomic { settled_said = true; om_decl = om1 };
            /* variant 4: the check does say settled with A stuck and U
             * queued behind it (so the claim is not vacuous) */
            assert(!(defect == 4 && stuck == 1 && q == 1 && kind == 0))
        :: else
        fi;
again:  skip
    :: settled_said -> break
    od
}

init
{
    c_code { if (getenv("WEFT_DEFECT")) now.defect = atoi(getenv("WEFT_DEFECT")); };
    atomic {
        ready = 1;              /* A, spawned */
        if
        :: kind = 0
        :: kind = 1; ready++; xrunning2 = true; xstate = READY
        :: kind = 2; ready++; xqueued = true; queued++; pushes++; xstate = READY
        fi;
        if
        :: kind != 1 -> ready++; queued++; pushes++ /* U */
        :: skip
        fi;
        run W(); run W2(); run Outside(); run Check()
    }
}

/*
 * The variants (WEFT_DEFECT=n for pan, -DDEFECT=n for spin); check.sh
 * requires each to be caught.
 * check.sh: defects 1 2 3 4
 *  1  a wait records the pushes read after its look, not before (a task
 *     pushed in between is taken as looked at)
 *  2  the scans leave out the push count
 *  3  queued tasks count as stuck whether or not the waits looked at them
 *  4  (not a defect) the check never says settled with A stuck and U
 *     queued: must fail, showing that it does
 * The frame's sequence count matters with nested waits (a torn read of an
 * outer frame restored under an inner one), which this model leaves out:
 * W writes one frame before its wait and clears it after.
 */
