/*
 * Exhaustive model of the replica coherence protocol of one data handle:
 * the data layer (src/data/data.c) and the parts of the graph layer
 * (src/graph/task.c) and of the devices that order it.  docs/design.md,
 * "Coherence: the replica protocol", is the same state machine in prose,
 * with the table of which name here is which function there.
 *
 * Checked by model/check.sh with spin.  `defect` selects a defect variant
 * (the list is at the end of this file): 0 is the protocol; check.sh
 * compiles the verifier once and runs it once per variant, with the
 * environment's WEFT_DEFECT; `spin -DDEFECT=n` sets it for a simulation
 * or a trail (spin -t -p -DDEFECT=n coherence.pml).
 *
 * One handle, registered in host memory.  Memory nodes: 0 the host (its
 * replica is the user's memory), 1 and 2 two GPUs of one kind.  Up to three
 * tasks, one access each, in the shapes chosen at the start (init).
 */
#ifndef DEFECT
#define DEFECT 0
#endif

#define NT 3            /* tasks */
#define NN 3            /* memory nodes, one replica each: 0 host, 1 and 2 GPUs */
#define NC 3            /* copies per run (at most) */
#define NONE 255

/* Tags (weft__replica.tag, weft__data.cur): the identity of a value.  A
 * task's write has the tag TAG(t).  content[i] is what replica i's memory
 * really holds: the tag of the value written there, GARB for bytes that
 * are no value. */
#define GARB 0          /* WEFT__TAG_GARBAGE */
#define INIT 1          /* the registered value (weft__data_new: cur = 1) */
#define TAG(t) (2 + (t))
#define WR(x) ((x) - 2)
#define ISW(x) ((x) >= 2)

/* Access modes (enum weft_access_mode) */
#define MR 1            /* WEFT_R */
#define MW 2            /* WEFT_W */
#define MC 4            /* WEFT_COMMUTE (with WEFT_RW) */

/* Where a task is (weft__task.state, and where its worker is) */
#define T_WAITING   1   /* WEFT__T_WAITING: edges pending */
#define T_READY     2   /* released (task_ready, claim_early), queued */
#define T_DEFER     3   /* weft__task_start returned START_DEFER: a host fetch in flight */
#define T_ACQUIRE   4   /* run_gate STARTED: weft__task_acquire (may wait) */
#define T_RUNNING   5   /* WEFT__T_RUNNING: acquired, the body runs */
#define T_ENQUEUED  6   /* WEFT__T_ENQUEUED: the body returned; its kernel may be queued */
#define T_CANCELLED 7   /* START_CANCEL: weft__task_cancelled, ops held (start_cancelled) */
#define T_FINAL     8   /* weft__task_complete ran */
#define T_FAILING   9   /* (defect 5 only: successors released, data_end not run yet) */

/* run_gate */
#define G_OPEN    0     /* WEFT__GATE_OPEN */
#define G_STARTED 2     /* WEFT__GATE_STARTED */
#define G_DOOMED  3     /* WEFT__GATE_DOOMED */

/* final states */
#define F_COMPLETED 1
#define F_FAILED    2
#define F_CANCELLED 3

/* weft__wrec.status */
#define W_NONE      0
#define W_OPEN      1   /* WEFT__WREC_OPEN */
#define W_COMMITTED 2
#define W_ABORTED   3

/* a copy */
#define C_FLY 1         /* queued, not run */
#define C_OK  2         /* ran; its event fired clean */
#define C_BAD 3         /* failed, or ran after an error its queue took: its event carries an error */

byte defect = DEFECT;

/* ---- the program (fixed by init) -------------------------------------- */
byte mode[NT], node[NT];        /* its access: mode, and the replica it uses */
byte preds[NT], prop[NT];       /* its edges (bit p: task p), and which carry failure */
bool gpu[NT];                   /* placed on a GPU: a stream of its own */

/* ---- tasks ------------------------------------------------------------ */
byte st[NT], run_gate[NT], final[NT];
byte early[NT];         /* the tasks whose completion events its stream waits for: edges
                           claimed EARLY, and theirs */
byte kq[NT];            /* its kernel: 0 none, 1 queued, 2 ran (or skipped) */
bool result[NT];        /* its body's result (or its acquire's) is an error */
bool op_failed[NT];     /* its kernel failed (weft__task_op_failed) */
bool queue_error[NT];   /* a copy it made or waited for failed */
bool event_error[NT];   /* its completion event fired with its stream's error */
bool pred_failed[NT];
bool skipped[NT];       /* dev_fate SKIPPED (weft__task_skip_work) */
bool prefetched[NT];    /* prefetch_host looked at its host read */
byte rd[NT];            /* what its body or kernel read */
byte ord[NT];           /* its place among the handle's accesses (a commute member's:
                           when it took the exclusion) */
byte waitc[NT];         /* the copies its kernel and its completion wait for (bit c) */
byte hold_from[NT];     /* weft__data_hold.from: the device replica it copies from (0 none) */
/* its write record, weft__wrec (one access: rec.tag is TAG(t)) */
byte rec_status[NT], rec_prev[NT], rec_was[NT];
byte rec_fetched[NT], rec_fetched_tag[NT];    /* (rec_fetched NONE: -1) */
/* the model's record of what really happened, for the invariants */
bool wdone[NT];         /* its work ran (or was skipped): its replica holds what it left */
bool wbad[NT];          /* ... and that is not a whole, good write */
bool sole[NT];          /* its write went over the only landed copy of cur, in place */
byte sprev[NT];         /* cur when it acquired its write */
bool uns[NT];           /* it failed after writing over the only copy of sprev in place:
                           that value is unspecified (weft.h) */
byte acqcnt, acqseq[NT];        /* (defect 2 only) */

/* ---- replicas --------------------------------------------------------- */
byte tag[NN], content[NN];
byte cur;
byte ready[NN];         /* weft__replica.ready: the last copy into it (copy + 1; 0 none) */

/* ---- copies ----------------------------------------------------------- */
byte csrc[NC], cdst[NC], cown[NC], cst[NC], cdep[NC], ctag[NC];
bool cstream[NC];       /* on its owner's stream, after the stream's waits */
byte ncopy;
byte host_fetch, host_fetch_tag, host_fetch_dev;      /* (host_fetch: copy + 1; 0 none) */

byte commute_owner;     /* task + 1; 0 free */
byte nexcl;
bool freed;             /* weft__data_free's copy back ran */

hidden byte k, x, y, c, e, s, h, b, eu;

/* ---- the data layer's predicates (data.c) ----------------------------- */
#define BIT(m, p) (((m) >> (p)) & 1)
#define OPEN_PREV(w, v) (rec_status[w] == W_OPEN && rec_prev[w] == (v))
/* tag_live: cur, or what an open write replaces */
#define TAG_LIVE(v) ((v) != GARB && ((v) == cur || OPEN_PREV(0, v) || OPEN_PREV(1, v) || OPEN_PREV(2, v)))
/* landed: the host always; a device replica once its ready event fired clean */
#define LANDED(j) ((j) == 0 || ready[j] == 0 || cst[ready[j] - 1] == C_OK)
#define HOLDS_TOO(i, j) ((i) != (j) && tag[j] == tag[i] && LANDED(j))
/* last_of_live */
#define LOL(i) (TAG_LIVE(tag[i]) && !HOLDS_TOO(i, 0) && !HOLDS_TOO(i, 1) && !HOLDS_TOO(i, 2))
#define VALID(i) (tag[i] == cur)                /* weft__rep_valid */
#define IN_DONE(g) (!(ready[g] != 0 && cst[ready[g] - 1] == C_FLY))
#define IN_BAD(g) (ready[g] != 0 && cst[ready[g] - 1] == C_BAD)
#define HF_FLY (host_fetch != 0 && cst[host_fetch - 1] == C_FLY)
#define OPEN_TAG(v) (ISW(v) && rec_status[WR(v)] == W_OPEN)
/* weft__data_source_for (and unregister's copy back): a valid replica, one
 * whose last copy in did not fail if there is one */
#define GOOD(i) (VALID(i) && !IN_BAD(i))
#define SOURCE(i, any) (GOOD(i) || (((any) || defect == 13) && VALID(i)))
#define NOGOOD (!GOOD(0) && !GOOD(1) && !GOOD(2))
/* pins: the tasks holding a replica (hold.on, hold.from), the host fetch's source */
#define HOLDING(u) (st[u] == T_RUNNING || st[u] == T_ENQUEUED || st[u] == T_FAILING)
#define TPIN(u, g) (HOLDING(u) && (node[u] == (g) || hold_from[u] == (g)))
#define PINS(g) (TPIN(0, g) + TPIN(1, g) + TPIN(2, g) + (host_fetch != 0 && host_fetch_dev == (g)))
/* wait_overwritable: an acquire that overwrites replica i waits while i
 * holds the last copy of a live value other than cur */
#define MUST_WAIT(t) (defect != 6 && (mode[t] & (MR | MW)) && tag[node[t]] != cur && LOL(node[t]))
#define HOST_READ(t) (node[t] == 0 && (mode[t] & MR))
/* fetch_to_host waits for the host fetch (started there if none) */
#define HF_WAIT(t) (HOST_READ(t) && !VALID(0) && (host_fetch == 0 || HF_FLY))

/* ---- the graph layer's predicates (task.c) ---------------------------- */
#define FIN(p) (st[p] == T_FINAL || (defect == 5 && st[p] == T_FAILING))
/* early_ok: placed on GPUs only, no host access */
#define EARLY_OK(t) (gpu[t] && (node[t] != 0 || defect == 1))
/* release_early: a GPU task whose body returned with success recorded its events */
#define EVENTS(p) (gpu[p] && st[p] == T_ENQUEUED && !result[p])
#define RP(t, p) (!BIT(preds[t], p) || FIN(p) || (EARLY_OK(t) && EVENTS(p)))
#define CAN_RELEASE(t) (RP(t, 0) && RP(t, 1) && RP(t, 2))
/* weft__task_prepare: its stream waits for its early predecessors' events */
#define EV_FIRED(t, p) (!BIT(early[t], p) || kq[p] == 2)
#define STREAM_READY(t) (EV_FIRED(t, 0) && EV_FIRED(t, 1) && EV_FIRED(t, 2))
#define EV_ERR(t, p) (BIT(early[t], p) && event_error[p])
#define STREAM_ERR(t) (EV_ERR(t, 0) || EV_ERR(t, 1) || EV_ERR(t, 2))
/* it holds an op for each early predecessor until that one completes */
#define OP_DONE(t, p) (!(BIT(early[t], p) && BIT(preds[t], p)) || FIN(p))
#define OPS_DONE(t) (OP_DONE(t, 0) && OP_DONE(t, 1) && OP_DONE(t, 2))
#define CFLY(cc) (cst[cc] == C_FLY)
#define WC_FLY(t, cc) (BIT(waitc[t], cc) && CFLY(cc))
#define WC_BAD(t, cc) (BIT(waitc[t], cc) && cst[cc] == C_BAD)
#define COPIES_DONE(t) (!WC_FLY(t, 0) && !WC_FLY(t, 1) && !WC_FLY(t, 2))
#define COPY_FAILED(t) (WC_BAD(t, 0) || WC_BAD(t, 1) || WC_BAD(t, 2))
/* weft__task_skip_work: an early predecessor on a failure-carrying edge
 * failed on its device, itself or through its own (failed_on_device) */
#define FOD0(p) (op_failed[p] || pred_failed[p] || final[p] == F_FAILED || final[p] == F_CANCELLED || skipped[p])
#define EP(t, p) (BIT(early[t], p) && BIT(prop[t], p) && BIT(preds[t], p))
#define EPF0(t) ((EP(t, 0) && FOD0(0)) || (EP(t, 1) && FOD0(1)) || (EP(t, 2) && FOD0(2)))
#define FOD(p) (FOD0(p) || EPF0(p))
#define EPF(t) ((EP(t, 0) && FOD(0)) || (EP(t, 1) && FOD(1)) || (EP(t, 2) && FOD(2)))
/* a failed copy reaches op_error by its report only: seen, or not yet */
#define EPQ(t) ((EP(t, 0) && queue_error[0]) || (EP(t, 1) && queue_error[1]) || (EP(t, 2) && queue_error[2]))
#define UNSV(v) ((uns[0] && sprev[0] == (v)) || (uns[1] && sprev[1] == (v)) || (uns[2] && sprev[2] == (v)))
#define ALLFINAL (st[0] == T_FINAL && st[1] == T_FINAL && st[2] == T_FINAL)

/* ---- copies ----------------------------------------------------------- */
/* Queue a copy of replica a into replica z for task o (NONE: the handle's
 * host fetch), on o's stream if strm.  It runs after the source's ready
 * event (weft__data_wait_ready) and, on a stream, after the stream's
 * waits. */
inline queue_copy(a, z, o, strm) {
    assert(ncopy < NC);
    c = ncopy; ncopy++;
    csrc[c] = a; cdst[c] = z; cown[c] = o; cst[c] = C_FLY; cstream[c] = strm;
    cdep[c] = ready[a]; ctag[c] = tag[a]
}

/* start_host_fetch: from a valid device replica (any: the least loaded),
 * on its device's copy queue, which waits for copies only: the writer of
 * that replica must have ended, or the C refuses (copy_rect_to_host_async:
 * "coherence: ... please report") -- invariant 3. */
inline start_host_fetch() {
    if
    :: SOURCE(1, NOGOOD) -> s = 1
    :: SOURCE(2, NOGOOD) -> s = 2
    fi;
    assert(!OPEN_TAG(tag[s]));
    queue_copy(s, 0, NONE, false);
    host_fetch = c + 1; host_fetch_tag = cur; host_fetch_dev = s
}

/* weft__data_prefetch_host, from prefetch_host */
inline prefetch_host(t) {
    if
    :: HOST_READ(t) && !VALID(0) ->
        prefetched[t] = true;
        if :: host_fetch == 0 -> start_host_fetch() :: else fi
    :: else
    fi
}

/* ---- the invariants' expectation -------------------------------------- */
/* e: the value of the last writer before position lim that completed (the
 * registered value if none); eu: that value is unspecified (a failed writer
 * wrote over its only copy in place: weft.h) */
inline expected(lim) {
    e = INIT; x = 0; k = 0;
    do
    :: k < NT ->
        if
        :: (mode[k] & MW) && final[k] == F_COMPLETED && ord[k] < lim && ord[k] + 1 > x -> x = ord[k] + 1; e = TAG(k)
        :: else
        fi; k++
    :: else -> break
    od;
    eu = false; k = 0;
    do
    :: k < NT -> if :: uns[k] && ord[k] < lim && sprev[k] == e -> eu = true :: else fi; k++
    :: else -> break
    od
}

/* ---- data layer: weft__data_acquire_one (after wait_overwritable) ------ */
inline acquire(t) {
    h = node[t];
    if :: defect == 2 -> acqcnt++ :: else fi;
    if
    :: HOST_READ(t) && !VALID(0) ->                 /* fetch_to_host: its copy has run */
        if
        :: cst[host_fetch - 1] == C_OK ->
            assert(host_fetch_tag == cur);          /* ("only readers ran meanwhile") */
            tag[0] = host_fetch_tag; rec_fetched[t] = 0; rec_fetched_tag[t] = cur
        :: else -> result[t] = true                 /* the acquire fails: the task, unrun */
        fi;
        host_fetch = 0
    :: h != 0 && (mode[t] & MR) && !VALID(h) ->     /* fetch, from source_for(h) */
        if
        :: SOURCE(3 - h, false) -> s = 3 - h
        :: else -> if :: VALID(0) -> s = 0 :: else -> assert(VALID(3 - h)); s = 3 - h fi
        fi;
        queue_copy(s, h, t, true);
        ready[h] = c + 1; tag[h] = cur;
        waitc[t] = waitc[t] | (1 << c);
        rec_fetched[t] = h; rec_fetched_tag[t] = cur; hold_from[t] = s
    :: h != 0 && !((mode[t] & MR) && !VALID(h)) ->  /* no copy: its stream waits for the ready event */
        if
        :: ready[h] != 0 && !(defect == 10 && (mode[t] & MR)) -> waitc[t] = waitc[t] | (1 << (ready[h] - 1))
        :: else
        fi
    :: else
    fi;
    if
    :: (mode[t] & MW) && !result[t] ->              /* the write: a new value, recorded open */
        sole[t] = tag[h] == cur && !(h != 0 && tag[0] == cur && LANDED(0)) &&
                  !(h != 1 && tag[1] == cur && LANDED(1)) && !(h != 2 && tag[2] == cur && LANDED(2));
        sprev[t] = cur;
        rec_status[t] = W_OPEN; rec_prev[t] = cur; rec_was[t] = tag[h];
        tag[h] = TAG(t); cur = TAG(t);
        if :: defect == 2 -> acqseq[t] = acqcnt :: else fi
    :: else
    fi
}

/* ---- data layer: weft__data_end ---------------------------------------- */
inline garbage(i) { tag[i] = GARB; ready[i] = 0 }   /* (ready recorded again: clean) */

inline data_end(t, ok, untouched, cf) {
    if
    :: rec_status[t] != W_OPEN && (ok || (!cf && defect != 14) || rec_fetched[t] == NONE) ->
        skip                                        /* nothing to take back */
    :: else ->
        if
        :: rec_status[t] == W_OPEN && ok -> rec_status[t] = W_COMMITTED
        :: rec_status[t] == W_OPEN && !ok ->
            rec_status[t] = W_ABORTED;
            uns[t] = sole[t] && !skipped[t];        /* (what happened, whatever `untouched` says) */
            if
            :: defect == 2 && acqcnt != acqseq[t] -> skip   /* "undone" only if nobody acquired since */
            :: else ->
                k = 0;                              /* no replica holds the aborted value */
                do
                :: k < NN ->
                    if
                    :: tag[k] == TAG(t) -> if :: untouched -> tag[k] = rec_was[t] :: else -> garbage(k) fi
                    :: else
                    fi; k++
                :: else -> break
                od;
                k = 0;                              /* writes that replaced it replace what it replaced */
                do
                :: k < NT -> if :: OPEN_PREV(k, TAG(t)) -> rec_prev[k] = rec_prev[t] :: else fi; k++
                :: else -> break
                od;
                if
                :: cur == TAG(t) ->                 /* it was the newest: what it replaced is again */
                    cur = rec_prev[t];
                    if
                    :: !(tag[0] == cur || tag[1] == cur || tag[2] == cur) ->
                        /* no replica holds it: what the failed in-place
                         * writer left is all there is (weft.h), in the replica
                         * it wrote if that held the value, else the user's */
                        assert(UNSV(cur));
                        if
                        :: rec_was[t] == cur -> tag[node[t]] = cur
                        :: else -> tag[0] = cur
                        fi
                    :: else
                    fi
                :: else
                fi
            fi
        :: else
        fi;
        if
        :: !ok && (cf || defect == 14) && rec_fetched[t] != NONE && (rec_fetched[t] > 0 || defect == 14) ->
            /* the copy into the replica it fetched may have failed: no value
             * there, unless another task holds it (it took the error too) or
             * it is the last copy of a live value */
            y = rec_fetched[t];
            if
            :: tag[y] == rec_fetched_tag[t] && (defect == 14 || (PINS(y) <= 1 && !LOL(y))) -> garbage(y)
            :: else
            fi
        :: else
        fi;
        rec_fetched[t] = NONE
    fi
}

/* ---- graph layer ------------------------------------------------------ */
/* task_ready, or claim_early for each edge whose predecessor has not
 * completed: its stream will wait for their events (and so for theirs) */
inline release(t) {
    k = 0;
    do
    :: k < NT ->
        if :: BIT(preds[t], k) && !FIN(k) -> early[t] = early[t] | (1 << k) | early[k] :: else fi; k++
    :: else -> break
    od;
    st[t] = T_READY
}

/* what a body or kernel does with replica i; a writer that fails leaves
 * garbage there (or, below, nothing) */
inline effect(t, i, failed) {
    wdone[t] = true;
    if :: mode[t] & MR -> rd[t] = content[i] :: else fi;
    if
    :: mode[t] & MW ->
        if
        :: content[i] = TAG(t)
        :: content[i] = GARB; failed = true; wbad[t] = true
        fi
    :: else ->
        if :: skip :: failed = true fi
    fi
}

/* weft__task_complete: data_end, then the exclusion, then the successors */
inline complete(t) {
    if
    :: st[t] == T_CANCELLED || pred_failed[t] -> final[t] = F_CANCELLED
    :: else -> if :: result[t] || op_failed[t] || queue_error[t] -> final[t] = F_FAILED :: else -> final[t] = F_COMPLETED fi
    fi;
    if
    :: defect == 5 && final[t] != F_COMPLETED && rec_status[t] == W_OPEN -> st[t] = T_FAILING
    :: else ->
        if
        :: defect == 8 -> data_end(t, (final[t] == F_COMPLETED), false, queue_error[t])
        :: defect == 9 -> data_end(t, (final[t] == F_COMPLETED), true, queue_error[t])
        :: else -> data_end(t, (final[t] == F_COMPLETED), skipped[t], queue_error[t])
        fi;
        if
        :: final[t] == F_COMPLETED && (mode[t] & MR) ->
            expected(ord[t]); assert(eu || rd[t] == e)          /* inv 1 */
        :: else
        fi;
        st[t] = T_FINAL
    fi;
    if :: commute_owner == t + 1 -> commute_owner = 0 :: else fi;   /* weft__commute_release */
    k = 0;
    do
    :: k < NT ->
        if
        :: BIT(preds[k], t) && BIT(prop[k], t) && final[t] != F_COMPLETED ->
            if
            :: run_gate[k] == G_OPEN -> run_gate[k] = G_DOOMED       /* weft__task_doom */
            :: run_gate[k] == G_STARTED && BIT(early[k], t) -> pred_failed[k] = true
            :: else
            fi
        :: else
        fi; k++
    :: else -> break
    od
}

proctype task(byte t)
{
    do
    :: atomic { st[t] == T_WAITING && CAN_RELEASE(t) -> release(t) }
    /* weft_task_cancel, before it starts */
    :: atomic { run_gate[t] == G_OPEN && st[t] < T_ACQUIRE -> run_gate[t] = G_DOOMED }
    /* weft__task_start: the commute exclusion, then the host prefetch, then the gate */
    :: atomic { defect == 4 && st[t] == T_READY && run_gate[t] == G_OPEN && !prefetched[t] -> prefetch_host(t) }
    :: atomic { st[t] == T_READY && run_gate[t] == G_OPEN &&
                (!(mode[t] & MC) || commute_owner == 0 || commute_owner == t + 1) ->
        if
        :: (mode[t] & MC) && commute_owner == 0 -> commute_owner = t + 1; nexcl++; ord[t] = nexcl
        :: else
        fi;
        prefetch_host(t);
        if
        :: prefetched[t] && HF_FLY -> st[t] = T_DEFER
        :: else -> run_gate[t] = G_STARTED; st[t] = T_ACQUIRE
        fi }
    :: atomic { st[t] == T_DEFER && !HF_FLY -> st[t] = T_READY }     /* queued again */
    /* START_CANCEL: weft__task_cancelled settles its host prefetch */
    :: atomic { (st[t] == T_READY || st[t] == T_DEFER) && run_gate[t] == G_DOOMED ->
        if
        :: defect == 3 && (mode[t] & MR) && !VALID(0) && host_fetch == 0 -> prefetched[t] = true; start_host_fetch()
        :: else
        fi;
        st[t] = T_CANCELLED }
    :: atomic { st[t] == T_CANCELLED && prefetched[t] && host_fetch != 0 && !VALID(0) && !HF_FLY ->
        if :: cst[host_fetch - 1] == C_OK -> assert(host_fetch_tag == cur); tag[0] = host_fetch_tag :: else fi;
        host_fetch = 0 }
    /* weft__task_acquire */
    :: atomic { st[t] == T_ACQUIRE && !MUST_WAIT(t) && HOST_READ(t) && !VALID(0) && host_fetch == 0 ->
        start_host_fetch() }
    :: atomic { st[t] == T_ACQUIRE && !MUST_WAIT(t) && !HF_WAIT(t) ->
        acquire(t);
        if
        :: result[t] -> st[t] = T_ENQUEUED              /* weft__task_body_returned(rc) */
        :: else -> st[t] = T_RUNNING
        fi }
    /* the body: on the host (a CPU task, or a GPU task's host access) ... */
    :: atomic { st[t] == T_RUNNING && node[t] == 0 ->
        effect(t, 0, result[t]);
        if :: gpu[t] -> kq[t] = 2 :: else fi;       /* (nothing on its stream for this handle) */
        st[t] = T_ENQUEUED }
    /* ... or queueing its kernel (or failing before) */
    :: atomic { st[t] == T_RUNNING && node[t] != 0 ->
        if
        :: kq[t] = 1
        :: kq[t] = 1; result[t] = true
        :: result[t] = true; wdone[t] = true; wbad[t] = true
        fi;
        st[t] = T_ENQUEUED }
    /* the kernel, once its stream's waits and its copies have run */
    :: atomic { kq[t] == 1 && COPIES_DONE(t) && STREAM_READY(t) ->
        if :: STREAM_ERR(t) || COPY_FAILED(t) -> queue_error[t] = true :: else fi;
        if
        :: EPF(t) -> skipped[t] = true
        :: !EPF(t) && EPQ(t) -> skipped[t] = true
        :: !EPF(t) -> skip
        fi;
        if
        :: skipped[t] -> wdone[t] = true; wbad[t] = true
        :: else -> effect(t, node[t], op_failed[t])
        fi;
        kq[t] = 2; event_error[t] = queue_error[t] }
    /* completion: its work has run, its early predecessors have completed */
    :: atomic { st[t] == T_ENQUEUED && kq[t] != 1 && COPIES_DONE(t) && OPS_DONE(t) ->
        if :: COPY_FAILED(t) -> queue_error[t] = true :: else fi;
        complete(t) }
    :: atomic { st[t] == T_CANCELLED && !(prefetched[t] && host_fetch != 0 && !VALID(0)) && OPS_DONE(t) ->
        complete(t) }
    :: atomic { st[t] == T_FAILING ->              /* (defect 5) */
        data_end(t, false, skipped[t], queue_error[t]); st[t] = T_FINAL }
    :: st[t] == T_FINAL -> break
    od
}

/* ---- the devices, eviction, unregister -------------------------------- */
#define DEP_DONE(cc) (cdep[cc] == 0 || !CFLY(cdep[cc] - 1))
#define DEP_BAD(cc) (cdep[cc] != 0 && cst[cdep[cc] - 1] == C_BAD)
#define STRM_OK(cc) (!cstream[cc] || STREAM_READY(cown[cc]))
#define STRM_BAD(cc) (cstream[cc] && STREAM_ERR(cown[cc]))

/* A copy runs: it copies, or fails (garbage there), or runs after an error
 * its queue took (its event carries the error). */
inline land(cc) {
    b = DEP_BAD(cc) || STRM_BAD(cc);
    if
    :: !b ->
        x = ctag[cc];
        /* inv 3: no copy reads a replica that a writer in flight will still
         * change: the writer of the value it copies has run, and the
         * source holds that value (or what that writer left, if it failed) */
        assert(!ISW(x) || wdone[WR(x)]);
        assert(content[csrc[cc]] == x || (ISW(x) && wbad[WR(x)]) || UNSV(x));
        content[cdst[cc]] = content[csrc[cc]]; cst[cc] = C_OK
    :: !b -> content[cdst[cc]] = GARB; cst[cc] = C_BAD
    :: b -> content[cdst[cc]] = content[csrc[cc]]; cst[cc] = C_BAD
    fi;
    if :: cown[cc] != NONE && cst[cc] == C_BAD -> queue_error[cown[cc]] = true :: else fi
}

/* alloc_evicting's victim g: no pin, evictable (its value is not the last
 * copy of a live one, or the host's is not), its last copy in has run
 * (drop_replica waits for it); a last copy goes to the host first, which
 * fails (no step) if its copy in failed, and waits while a host fetch is
 * in flight (which would land over it). */
#define EVICTABLE(g) (!LOL(g) || !LOL(0))
#define EVICT_OK(g) (tag[g] != GARB && IN_DONE(g) && \
                     (defect == 11 || PINS(g) == 0) && \
                     (defect == 7 || (EVICTABLE(g) && !(LOL(g) && (IN_BAD(g) || (HF_FLY && defect != 12))))))

/* drop_replica */
inline evict(g) {
    if
    :: LOL(g) && defect != 7 ->         /* the last copy of a live value: to the host first */
        assert(!OPEN_TAG(tag[g]));      /* inv 3 (copy_rect_to_host_async) */
        content[0] = content[g]; tag[0] = tag[g]
    :: else
    fi;
    tag[g] = GARB; content[g] = GARB; ready[g] = 0
}

/* weft__data_free: a host fetch left behind taken, then the newest value
 * into the user's memory, from a valid device replica (the C takes the
 * first, the model any) */
inline unregister() {
    if
    :: host_fetch != 0 ->
        if :: cst[host_fetch - 1] == C_OK -> tag[0] = host_fetch_tag :: else fi; host_fetch = 0
    :: else
    fi;
    if
    :: !VALID(0) ->
        if :: SOURCE(1, NOGOOD) -> s = 1 :: SOURCE(2, NOGOOD) -> s = 2 :: else -> s = 0 fi;
        if
        :: s != 0 && !IN_BAD(s) ->
            assert(!OPEN_TAG(tag[s]));
            content[0] = content[s]; tag[0] = cur
        :: s != 0 && IN_BAD(s) ->       /* it runs after the error its wait took: reported, not undone */
            content[0] = content[s]
        :: else
        fi
    :: else
    fi
}

#define LIVE_OK (cur != GARB && !(ISW(cur) && rec_status[WR(cur)] == W_ABORTED) && \
                 (tag[0] == cur || tag[1] == cur || tag[2] == cur))

proctype devices()
{
    do
    :: atomic { CFLY(0) && DEP_DONE(0) && STRM_OK(0) -> land(0) }
    :: atomic { CFLY(1) && DEP_DONE(1) && STRM_OK(1) -> land(1) }
    :: atomic { CFLY(2) && DEP_DONE(2) && STRM_OK(2) -> land(2) }
    :: atomic { EVICT_OK(1) -> evict(1) }
    :: atomic { EVICT_OK(2) -> evict(2) }
    :: atomic { !freed && ALLFINAL && !HF_FLY -> unregister(); freed = true }
    :: atomic { freed ->
        expected(255);
        assert(cur == e);               /* inv 2: nothing completed is lost, no failure stays */
        assert(eu || content[0] == e);  /* inv 2: the user's memory holds it */
        break }
    od
}

/* inv 4, in every state while a task may still read */
active proctype monitor()
{
end:
    atomic { !freed && st[0] != 0 && !LIVE_OK -> assert(false) }
}

inline task_is(t, m, n, g, p, f) {
    mode[t] = m; node[t] = n; gpu[t] = g; preds[t] = p; prop[t] = f; st[t] = T_WAITING
}

init {
    c_code { if (getenv("WEFT_DEFECT")) now.defect = atoi(getenv("WEFT_DEFECT")); };
    atomic {
        k = 0;
        do
        :: k < NT -> ord[k] = k; st[k] = T_FINAL; rec_fetched[k] = NONE; k++
        :: else -> break
        od;
        tag[0] = INIT; content[0] = INIT; cur = INIT;
        tag[1] = GARB; tag[2] = GARB; content[1] = GARB; content[2] = GARB;
        /* task_is(task, mode, replica, on a GPU, predecessors, failure-carrying edges) */
        if
        :: /* A: a GPU writer, then a reader: on the other GPU, a CPU task, or
            * a GPU task with a host access; then nothing, a second reader
            * sharing the replica, or an RW after both */
            task_is(0, MW, 1, 1, 0, 0);
            if
            :: task_is(1, MR, 2, 1, 1, 1)
            :: task_is(1, MR, 0, 0, 1, 1)
            :: task_is(1, MR, 0, 1, 1, 1)
            fi;
            if
            :: skip
            :: task_is(2, MR, 2, 1, 1, 1)
            :: task_is(2, MR | MW, 1, 1, 3, 1)
            fi
        :: /* B: writer, writer (W or RW, GPU or CPU), reader */
            task_is(0, MW, 1, 1, 0, 0);
            if
            :: task_is(1, MW, 2, 1, 1, 0)
            :: task_is(1, MW, 0, 0, 1, 0)
            :: task_is(1, MR | MW, 2, 1, 1, 1)
            :: task_is(1, MR | MW, 0, 0, 1, 1)
            fi;
            if
            :: task_is(2, MR, 0, 0, 2, 2)
            :: task_is(2, MR, 1, 1, 2, 2)
            :: task_is(2, MR, 2, 1, 2, 2)
            fi
        :: /* C: a commute pair, a CPU task and a GPU task, after a GPU writer */
            task_is(0, MW, 2, 1, 0, 0);
            task_is(1, MR | MW | MC, 0, 0, 1, 1);
            task_is(2, MR | MW | MC, 1, 1, 1, 1)
        :: /* D: a chain over both GPUs: the last task overwrites the replica
            * that holds the value its predecessor's write replaces */
            task_is(0, MW, 1, 1, 0, 0);
            if
            :: task_is(1, MR | MW, 2, 1, 1, 1)
            :: task_is(1, MW, 2, 1, 1, 0)
            fi;
            if
            :: task_is(2, MR | MW, 1, 1, 2, 2)
            :: task_is(2, MR, 1, 1, 2, 2)
            :: task_is(2, MW, 1, 1, 2, 0)
            fi
        :: /* E: a CPU task writing the user's memory in place, then GPU tasks */
            task_is(0, MR | MW, 0, 0, 0, 0);
            if
            :: task_is(1, MR, 1, 1, 1, 1);
               if :: skip :: task_is(2, MR, 2, 1, 1, 1) fi
            :: task_is(1, MW, 1, 1, 1, 0);
               if :: skip :: task_is(2, MR, 2, 1, 2, 2) fi
            fi
        fi;
        k = 0;
        do
        :: k < NT -> if :: st[k] == T_WAITING -> run task(k) :: else fi; k++
        :: else -> break
        od;
        run devices()
    }
}

/*
 * The defect variants (WEFT_DEFECT=n for pan, -DDEFECT=n for spin); each
 * puts back one class of defect of issue 28, and check.sh requires each to
 * be caught.  What catches it (in the search spin makes) is in the doc.
 * check.sh: defects 1 2 3 4 5 6 7 8 9 10 11 12 13 14
 *  1  early_ok ignores a host access: a GPU task reading on the host is
 *     released early
 *  2  undo by version: an abort undoes only if nobody acquired since
 *  3  a doomed task starts a host fetch (and settles it)
 *  4  the host prefetch before the commute exclusion
 *  5  successors and the exclusion released before data_end ran
 *  6  no wait_overwritable
 *  7  eviction drops the last copy of a live value
 *  8  abort ignores `untouched`: a writer whose work never ran leaves
 *     garbage
 *  9  abort treats every writer as untouched: the tag of the old value
 *     over what a failed writer left
 * 10  a reader that finds its replica valid does not wait for its ready
 *     event
 * 11  eviction of a pinned replica
 * 12  eviction copies a last copy to the host while a host fetch into it
 *     is in flight
 * 13  a copy's source may be a replica whose last copy in failed while a
 *     good one exists
 * 14  a failed reader's end invalidates the replica it fetched whatever
 *     others rely on (no pin, last-copy or failed-copy test)
 */
