/* Agreeing and shrinking after a lost rank (comm.h), over the connections the survivors still have.
 *
 * An agreement starts a new fault-tolerance epoch on the family's transport (transport/ft_reset.h): every rank
 * that takes part forgets the transport's error and resumes each peer's stream where that peer started the
 * same epoch, so no frame of the aborted collective can match a later receive; peers known lost (earlier
 * agreements, `exclude`, ranks outside the communicator) are cut. Then three steps, over point-to-point frames
 * stamped with a descriptor of their own:
 *  1. every live rank sends (flag, the ranks it knows lost) to every other live rank and combines what comes:
 *     the AND of the flags, the union of the lost sets, plus every peer the transport finds gone meanwhile;
 *  2. consensus with a perfect failure detector (a closed connection, a dead process): the live ranks, in
 *     order, each send their current value to the others, and every rank adopts the value of each such rank
 *     it hears from (one it finds gone instead it skips). The first of them that does not die gives every
 *     rank its value, and the later ones only repeat it: every rank that returns holds the same value, also
 *     when ranks die during the agreement.
 *  3. every live rank sends a last message to every other and waits for theirs before it returns. A rank that
 *     went on -- its next collective failed and aborted, or it started the next agreement -- would hide from a
 *     slower one the messages of steps 1 and 2 it sent before (an abort is read before what is still unread),
 *     and that one would take it for dead; so nobody goes on before every live rank is past step 2. In this
 *     step a peer that is gone (it went on, or died after the value was decided) is only skipped.
 * In steps 1 and 2 a rank that finds a peer gone cuts it, so that the peer finds it gone too and nobody waits for
 * a rank that stopped talking to it: that failure detector is perfect only because no live rank has gone on.
 * The communicators made before a failure stay broken (revoke.c); shrink makes a communicator of the survivors
 * as a view over the same transport (as a split), stamped with a group of its own, so nothing of the old
 * communicator can match its messages. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/ft_state.h"
#include "transport/group_view.h"
#include "transport/ft_reset.h"
#include "transport/idle_wait.h"

#define FT_GROUP_SALT 0x5bd1e995u    /* the agreements' frames: a group no communicator has */
#define SHRINK_GROUP_SALT 0x27d4eb2fu
#define CHECK_EVERY_NS 100000000LL   /* how often a waiting agreement runs the caller's interrupt check */


/* One agreement in progress. Ranks are the family transport's. */
typedef struct agreement {
    pycoll_comm_t *comm;
    pycoll_p2p_t *p2p;
    comm_ft_t *ft;
    const int32_t *members; /* the communicator's, as the transport numbers them */
    int32_t n;
    uint8_t *lost;          /* [size]: what this rank knows lost so far */
    size_t msg_bytes;       /* epoch, flag, then a byte per rank: lost or not */
    int64_t started_ns;
    int64_t next_check_ns;
    int leaving;            /* step 3: a peer gone is skipped, not lost */
} agreement_t;

/* The test seam (pycoll_test_agreement_hook): called before each round of step 2 with its coordinator. Set from
 * whichever thread the test runs on, read by the one agreeing. */
typedef void (*round_hook_t)(int32_t coordinator);
static _Atomic round_hook_t round_hook;

void pycoll_test_agreement_hook(void (*hook)(int32_t coordinator)) { atomic_store(&round_hook, hook); }

/* Peer r is lost to this agreement. In steps 1 and 2 it is cut too, so that it finds this rank gone; in step 3
 * it only finished (or died once the value was decided): cutting it would part two survivors for good. */
static void lose(agreement_t *a, int32_t r)
{
    a->lost[r] = 1;
    if (!a->leaving)
        pycoll_ft_cut(a->p2p, r);
}

/* The transport recorded an error: a peer lost is noted (lose), and the agreement goes on without it (1);
 * anything else (the deadline, an interrupt) ends it (0). In step 3 whatever a peer that went on reports (its
 * abort: a failure, a revoke, a mismatch, a timeout of its next collective) is not this agreement's: the
 * transport marked that peer gone, and the wait skips it. */
static int absorb_error(agreement_t *a)
{
    pycoll_p2p_t *p2p = a->p2p;
    while (p2p->status != PYCOLL_OK) { /* resuming reads what was left unread: it may find another */
        const pycoll_status_t st = p2p->status;
        const int32_t r = p2p->failed_rank;
        const int named = r >= 0 && r < p2p->size && r != p2p->rank;
        if (st == PYCOLL_ERR_PEER_FAILURE && named)
            lose(a, r);
        else if (!a->leaving || (st != PYCOLL_ERR_PEER_FAILURE && st != PYCOLL_ERR_REVOKED &&
                                 st != PYCOLL_ERR_MISMATCH && st != PYCOLL_ERR_TIMEOUT))
            return 0;
        pycoll_ft_resume(p2p);
    }
    return 1;
}

static unsigned char *message(agreement_t *a, int32_t i) { return a->ft->msgs + (size_t)i * a->msg_bytes; }

/* Send `out` to every rank of to[0..n_to) and receive one message from each of from[0..n_from) into the
 * agreement's message i + 1 (i: the rank's index in from), skipping ranks lost before or meanwhile. got[i]:
 * it came. */
static pycoll_status_t exchange(agreement_t *a, const int32_t *to, int n_to, const unsigned char *out,
                                const int32_t *from, int n_from, uint32_t tag, uint8_t *got)
{
    pycoll_p2p_t *p2p = a->p2p;
    comm_ft_t *ft = a->ft;
    const int total = n_to + n_from;
    if (ft->used_reqs + total > ft->n_reqs)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_NOMEM, -1, "agreement: out of requests");
    pycoll_request_t *reqs = ft->reqs + ft->used_reqs;
    ft->used_reqs += total;
    pycoll_request_t **pending = malloc((size_t)(total > 0 ? total : 1) * sizeof *pending);
    if (!pending)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_NOMEM, -1, "agreement: out of memory");
    for (int i = 0; i < total; i++) {
        const int sending = i < n_to;
        const int32_t peer = sending ? to[i] : from[i - n_to];
        reqs[i] = (pycoll_request_t){.buf = sending ? (void *)out : message(a, i - n_to + 1),
                                     .nbytes = (int64_t)a->msg_bytes, .peer = peer, .tag = tag,
                                     .is_send = (uint8_t)sending};
        if (a->lost[peer])
            continue;
        if (p2p->ops->post(p2p, &reqs[i]) != PYCOLL_OK && !absorb_error(a))
            break;
    }
    idle_wait_t idle = idle_wait_start(p2p, pycoll_now_ns());
    while (p2p->status == PYCOLL_OK) {
        int n = 0;
        for (int i = 0; i < total; i++) {
            const int32_t peer = reqs[i].peer;
            if (reqs[i].complete || a->lost[peer])
                continue;
            if (pycoll_ft_peer_gone(p2p, peer)) {
                lose(a, peer); /* gone while another peer's loss was the recorded error */
                continue;
            }
            pending[n++] = &reqs[i];
        }
        if (n == 0)
            break;
        const int moved = p2p->ops->progress(p2p, pending, n, a->started_ns);
        if (p2p->status != PYCOLL_OK) {
            if (absorb_error(a))
                continue;
            break;
        }
        const int64_t now = pycoll_now_ns();
        if (now >= p2p->deadline_ns) {
            pycoll_p2p_fail(p2p, PYCOLL_ERR_TIMEOUT, pending[0]->peer, "rank %d timed out in an agreement "
                            "(agree or shrink) waiting for rank %d", (int)p2p->rank, (int)pending[0]->peer);
            break;
        }
        if (moved) {
            idle_wait_moved(&idle);
            continue;
        }
        if (now >= a->next_check_ns) {
            a->next_check_ns = now + CHECK_EVERY_NS;
            if (idle_wait_interrupted(p2p))
                break;
        }
        idle_wait_pass(&idle, now, p2p->deadline_ns);
    }
    free(pending);
    for (int i = 0; i < n_from; i++) {
        const pycoll_request_t *req = &reqs[n_to + i];
        got[i] = req->complete && !a->lost[req->peer];
        uint64_t epoch;
        memcpy(&epoch, message(a, i + 1), sizeof epoch);
        if (got[i] && epoch != a->ft->epoch) { /* a frame of another agreement: that peer is not in this one */
            got[i] = 0;
            lose(a, req->peer);
        }
    }
    return p2p->status;
}

static void encode(const agreement_t *a, unsigned char *msg, int64_t flag, const uint8_t *lost)
{
    const uint64_t epoch = a->ft->epoch;
    memcpy(msg, &epoch, sizeof epoch);
    memcpy(msg + 8, &flag, sizeof flag);
    memcpy(msg + 16, lost, (size_t)a->p2p->size);
}

/* The other members not known lost, into live[]; how many. */
static int live_peers(const agreement_t *a, int32_t *live)
{
    int n_live = 0;
    for (int32_t i = 0; i < a->n; i++)
        if (a->members[i] != a->p2p->rank && !a->lost[a->members[i]])
            live[n_live++] = a->members[i];
    return n_live;
}

/* The three steps (above). value: this rank's message (flag and lost set) in, the agreed one out. */
static pycoll_status_t agree_steps(agreement_t *a, unsigned char *value)
{
    pycoll_p2p_t *p2p = a->p2p;
    const int32_t me = p2p->rank, size = p2p->size;
    int32_t *live = malloc((size_t)a->n * sizeof *live);
    uint8_t *got = malloc((size_t)a->n + 1);
    if (!live || !got) {
        free(live);
        free(got);
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_NOMEM, -1, "agreement: out of memory");
    }
    int n_live = live_peers(a, live);
    pycoll_status_t st = exchange(a, live, n_live, value, live, n_live, 0, got);
    int64_t flag;
    memcpy(&flag, value + 8, sizeof flag);
    for (int i = 0; st == PYCOLL_OK && i < n_live; i++) {
        if (!got[i])
            continue;
        const unsigned char *m = message(a, i + 1);
        int64_t theirs;
        memcpy(&theirs, m + 8, sizeof theirs);
        flag &= theirs;
        for (int32_t r = 0; r < size; r++)
            value[16 + r] |= m[16 + r];
    }
    memcpy(value + 8, &flag, sizeof flag);
    for (int32_t r = 0; r < size; r++)
        value[16 + r] |= a->lost[r];
    for (int32_t i = 0; st == PYCOLL_OK && i < a->n; i++) {
        const int32_t c = a->members[i];
        if (a->lost[c])
            continue;
        const round_hook_t hook = atomic_load_explicit(&round_hook, memory_order_relaxed);
        if (hook)
            hook(c);
        if (c == me) {
            n_live = live_peers(a, live);
            st = exchange(a, live, n_live, value, NULL, 0, 1u + (uint32_t)c, got);
        } else {
            st = exchange(a, NULL, 0, NULL, &c, 1, 1u + (uint32_t)c, got);
            if (st == PYCOLL_OK && got[0])
                memcpy(value, message(a, 1), a->msg_bytes);
        }
    }
    if (st == PYCOLL_OK) {
        a->leaving = 1;
        n_live = live_peers(a, live);
        st = exchange(a, live, n_live, value, live, n_live, 1u + (uint32_t)size, got);
    }
    free(live);
    free(got);
    return st;
}

/* An agreement over comm's members: the AND of their flags and the union of the ranks found lost (decided[],
 * the family transport's ranks). Holds the family's turn throughout. */
static pycoll_status_t agreement(pycoll_comm_t *comm, const int32_t *exclude, int32_t n_exclude, double timeout_s,
                                 int64_t *flag, uint8_t *decided)
{
    comm_family_t *family = comm->family;
    pycoll_p2p_t *p2p = family->transport;
    const int32_t size = p2p->size, csize = comm->p2p->size;
    comm->error[0] = 0;
    if (comm->finalized || family->closed) {
        snprintf(comm->error, sizeof comm->error, "communicator is closed");
        return PYCOLL_ERR_CLOSED;
    }
    for (int32_t i = 0; i < n_exclude; i++)
        if (exclude[i] < 0 || exclude[i] >= csize || exclude[i] == comm->p2p->rank) {
            snprintf(comm->error, sizeof comm->error, "exclude: %d is not another rank of 0..%d", (int)exclude[i],
                     (int)csize - 1);
            return PYCOLL_ERR_INVALID;
        }
    comm_ft_t *ft = comm_ft_of(family);
    unsigned char *value = NULL;
    uint8_t *lost = calloc((size_t)size, 1);
    int32_t *members = malloc((size_t)csize * sizeof *members);
    const size_t msg_bytes = 16 + (size_t)size;
    const int32_t n_reqs = 6 * size + 4; /* each step posts at most 2 (size - 1) */
    pycoll_request_t *reqs = calloc((size_t)n_reqs, sizeof *reqs);
    unsigned char *msgs = calloc((size_t)size + 2, msg_bytes);
    value = calloc(1, msg_bytes);
    pycoll_status_t st = PYCOLL_ERR_NOMEM;
    if (!ft || !lost || !members || !reqs || !msgs || !value) {
        snprintf(comm->error, sizeof comm->error, "agreement: out of memory");
        goto release;
    }
    char waited[COMM_ERROR_LEN] = "";
    st = progress_take_turn(comm, 1, waited, sizeof waited);
    if (st != PYCOLL_OK) {
        snprintf(comm->error, sizeof comm->error, "%s", waited[0] ? waited : "interrupted while waiting for its turn");
        goto release;
    }
    /* Who takes part: comm's members not known lost; every other rank of the transport is cut. */
    for (int32_t r = 0; r < size; r++)
        lost[r] = 1;
    for (int32_t i = 0; i < csize; i++) {
        members[i] = comm->view ? comm->view->members[i] : i;
        lost[members[i]] = ft->failed[members[i]];
    }
    for (int32_t i = 0; i < n_exclude; i++)
        lost[members[exclude[i]]] = 1;
    const pycoll_status_t before = p2p->status;
    char before_error[COMM_ERROR_LEN];
    snprintf(before_error, sizeof before_error, "%s", p2p->error);
    const int was_revoked = atomic_load(&family->revoked) || before == PYCOLL_ERR_REVOKED;
    const uint32_t epoch = ++ft->epoch;
    const pycoll_coll_desc_t saved = p2p->desc, saved_prev = p2p->prev_desc;
    st = pycoll_ft_reset(p2p, epoch, lost);
    if (st == PYCOLL_ERR_UNSUPPORTED) { /* nothing changed: the communicator is as it was */
        snprintf(comm->error, sizeof comm->error, "agree and shrink are not available over the %s transport (shared "
                 "memory and TCP, alone or together, have them)", p2p->ops->name);
        ft->epoch--;
        progress_end_turn(comm);
        goto release;
    }
    /* The last agreement's requests may sit in the queues of peers lost then until the reset dropped them. */
    free(ft->reqs);
    free(ft->msgs);
    ft->reqs = reqs;
    ft->msgs = msgs;
    ft->n_reqs = n_reqs;
    ft->used_reqs = 0;
    reqs = NULL; /* the family's now */
    msgs = NULL;
    if (st == PYCOLL_OK) {
        atomic_store(&family->revoked, 0);
        p2p->desc = (pycoll_coll_desc_t){.seq = epoch, .root = -1, .coll = PYCOLL_COLL_BARRIER,
                                         .group = FT_GROUP_SALT ^ epoch};
        p2p->prev_desc = (pycoll_coll_desc_t){0};
        p2p->deadline_ns = pycoll_now_ns() + (int64_t)((timeout_s > 0 ? timeout_s : comm->options.timeout_s) * 1e9);
        agreement_t a = {.comm = comm, .p2p = p2p, .ft = ft, .members = members, .n = csize, .lost = lost,
                         .msg_bytes = msg_bytes, .started_ns = pycoll_now_ns()};
        a.next_check_ns = a.started_ns + CHECK_EVERY_NS;
        encode(&a, value, *flag, lost);
        st = agree_steps(&a, value);
        if (st != PYCOLL_OK) {
            snprintf(comm->error, sizeof comm->error, "%s", p2p->error);
            for (int32_t r = 0; r < size; r++) /* the others must not wait for this rank */
                if (r != p2p->rank && !lost[r])
                    pycoll_ft_cut(p2p, r);
        }
    }
    p2p->desc = saved;
    p2p->prev_desc = saved_prev;
    int newly_lost = 0;
    if (st == PYCOLL_OK) {
        memcpy(flag, value + 8, sizeof *flag);
        for (int32_t r = 0; r < size; r++)
            decided[r] = value[16 + r] != 0;
        for (int32_t i = 0; i < csize; i++)
            newly_lost |= decided[members[i]] && !ft->failed[members[i]];
        for (int32_t r = 0; r < size; r++)
            ft->failed[r] |= decided[r];
        if (decided[p2p->rank]) {
            snprintf(comm->error, sizeof comm->error, "rank %d was left out: the other ranks found it gone",
                     (int)p2p->rank);
            st = PYCOLL_ERR_PEER_FAILURE;
        }
    }
    /* The communicators made so far stay broken after a failure or a revoke, or when the agreement left ranks
     * out; one that was healthy and stays whole goes on. */
    if (before != PYCOLL_OK || newly_lost || was_revoked || st != PYCOLL_OK) {
        ft->broken_before = epoch;
        ft->broken_status = was_revoked ? PYCOLL_ERR_REVOKED : PYCOLL_ERR_CLOSED;
        if (before != PYCOLL_OK)
            snprintf(ft->broken_error, sizeof ft->broken_error, "communicator is unusable after an earlier error "
                     "(shrink() makes one of the survivors): %.400s", before_error);
        else
            snprintf(ft->broken_error, sizeof ft->broken_error, "communicator is unusable: %s (shrink() makes one "
                     "of the survivors)", was_revoked ? "it was revoked" : "ranks of it were lost");
    }
    progress_end_turn(comm);
release:
    free(lost);
    free(members);
    free(value);
    free(reqs);
    free(msgs);
    return st;
}

pycoll_status_t pycoll_comm_agree(pycoll_comm_t *comm, int64_t *flag, double timeout_s)
{
    pycoll_status_t entered = comm_enter(comm);
    if (entered != PYCOLL_OK)
        return entered;
    uint8_t *decided = calloc((size_t)comm->family->transport->size, 1);
    if (!decided) {
        snprintf(comm->error, sizeof comm->error, "agree: out of memory");
        return PYCOLL_ERR_NOMEM;
    }
    pycoll_status_t st = agreement(comm, NULL, 0, timeout_s, flag, decided);
    free(decided);
    return st;
}

static uint32_t shrink_group(uint32_t parent_group, uint32_t epoch)
{
    uint32_t h = (parent_group ^ SHRINK_GROUP_SALT) * 16777619u ^ epoch;
    h = (h ^ (h >> 15)) * 2246822519u;
    return h ? h : 1; /* 0 names a root */
}

pycoll_status_t pycoll_comm_shrink(pycoll_comm_t *comm, const int32_t *exclude, int32_t n_exclude,
                                   double timeout_s, pycoll_comm_t **out)
{
    *out = NULL;
    pycoll_status_t entered = comm_enter(comm);
    if (entered != PYCOLL_OK)
        return entered;
    const int32_t csize = comm->p2p->size;
    uint8_t *decided = calloc((size_t)comm->family->transport->size, 1);
    int32_t *members = malloc((size_t)csize * sizeof *members);
    if (!decided || !members) {
        free(decided);
        free(members);
        snprintf(comm->error, sizeof comm->error, "shrink: out of memory");
        return PYCOLL_ERR_NOMEM;
    }
    int64_t flag = 0;
    pycoll_status_t st = agreement(comm, exclude, n_exclude, timeout_s, &flag, decided);
    int32_t n = 0, index = -1;
    for (int32_t r = 0; st == PYCOLL_OK && r < csize; r++) {
        const int32_t root = comm->view ? comm->view->members[r] : r;
        if (decided[root])
            continue;
        if (r == comm->p2p->rank)
            index = n;
        members[n++] = r;
    }
    free(decided);
    if (st != PYCOLL_OK) {
        free(members);
        return st;
    }
    st = comm_view_child(comm, members, n, index, shrink_group(comm->group, comm->family->ft->epoch), out);
    if (st == PYCOLL_OK)
        (*out)->ft_generation = comm->family->ft->epoch;
    return st;
}
