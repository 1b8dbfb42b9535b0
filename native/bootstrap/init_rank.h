/* What the steps of pycoll_comm_init_rank share (init_rank.c tells the steps): the state one rank's set-up
 * carries, the sizes of its messages, and each step's entry. Internal to native/bootstrap. */
#ifndef PYCOLL_BOOTSTRAP_INIT_RANK_H
#define PYCOLL_BOOTSTRAP_INIT_RANK_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap/bootstrap_internal.h"
#include "pycoll/comm.h"
#include "transport/tcp_stripes.h"

#define HOST_TEXT_BYTES 96
#define SEGMENT_NAME_BYTES 64
#define MESSAGE_BYTES 384
#define STATUS_BYTES (4 + 4 + MESSAGE_BYTES) /* status, the rank it concerns, message */
#define MAX_PENDING 64 /* handshakes in progress on one listener: a flood cannot grow memory or stall others */
#define SHM_DIR "/dev/shm"

/* The transport the job runs over: the same choice on every rank, made from the table in step 3. */
typedef enum init_transport {
    INIT_TRANSPORT_UNDECIDED = 0, /* set-up ended before step 3 */
    INIT_TRANSPORT_TCP,
    INIT_TRANSPORT_SHM,
    INIT_TRANSPORT_SHM_TCP, /* shared memory within a host, TCP between hosts (the routed transport) */
} init_transport_t;

typedef struct rank_record {
    int32_t rank, world_size;
    uint32_t n_addrs;                       /* one per interface of PYCOLL_SOCKET_IFNAME's list, else 1 */
    boot_addr_t addrs[BOOT_MAX_INTERFACES]; /* where it listens, in the list's order */
    int32_t pid;
    uint64_t pid_ns;
    int64_t ring_bytes;
    uint32_t transport;
    uint32_t streams; /* PYCOLL_TCP_STREAMS: connections per pair of ranks over TCP */
    char host[HOST_TEXT_BYTES];
    char segment[SEGMENT_NAME_BYTES]; /* in the record: "shm" when this rank can use shared memory, else "";
                                       * from step 4 on: its segment's name */
} rank_record_t;

typedef struct boot_state {
    int32_t rank, size;
    double deadline, timeout_s;
    pycoll_init_config_t cfg;
    boot_id_t id;
    boot_auth_t auth;
    boot_addr_t root_addr;
    char root_text[BOOT_ADDR_TEXT_LEN];
    int listen_fds[BOOT_MAX_INTERFACES]; /* this rank's mesh listeners, one per address of its record */
    int n_listen;
    int root_listen_fd; /* the id's listener, on the root */
    int root_fd;        /* a non-root rank's connection to the root */
    int *client_fds;    /* the root's connection to each rank */
    rank_record_t *table;
    int32_t *host_of;
    int32_t n_hosts;
    init_transport_t transport; /* chosen in step 3 (init_find_hosts_and_transport) */
    int seg_fd;
    char seg_path[SEGMENT_NAME_BYTES + 16];
    int shm_unlink_all;     /* the outcome is decided: unlink every segment name of this host on the way out */
    int streams;   /* connections per pair of ranks over TCP (every rank's alike) */
    int *peer_fds; /* TCP sockets, -1 where none: connection k to rank r at [k * size + r], TCP_MAX_STREAMS
                    * rows */
    int *seg_fds;  /* this host's segments, -1 elsewhere */
    int32_t *pids;
    uint8_t *names_seen; /* the root: ranks whose segment name (over TCP alone: ready) came during its mesh */
    int relayed;         /* s->error is another rank's failure, already naming it */
    int32_t refused;     /* the root: registrations it answered with the job's failure (late ones included) */
    const struct late_answer *late_answer; /* the root, after a failed registration: what late ranks hear */
    int dropped;   /* connections to our listeners that failed their handshake */
    char dropped_why[128];
    int32_t max_pending; /* handshakes in progress at once on a listener (0: MAX_PENDING) */
    double handshake_s;  /* how long a connection may take to finish its handshake (0: BOOT_HANDSHAKE_S) */
    /* Told of each dropped connection (c: NULL when it is not one being admitted); may be NULL. */
    void (*on_drop)(void *ctx, const boot_conn_t *c, const char *why);
    void *drop_ctx;
    char *error;
} boot_state_t;

/* ---- shared by every step (init_rank.c) ---- */

/* Formats the failure into s->error; returns status. */
pycoll_status_t init_fail(boot_state_t *s, pycoll_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void init_close_fd(int *fd);
/* "1, 4, 7" (or "none") into out. */
void init_format_ranks(char *out, size_t len, const int32_t *ranks, int n);
uint64_t init_pid_namespace(void);

/* ---- status messages and the root's exchanges with every rank (init_messages.c) ---- */

void init_status_put(uint8_t *p, pycoll_status_t status, int32_t about, const char *message);
/* A status message received: the status it carries, its text into s->error. */
pycoll_status_t init_status_get(boot_state_t *s, const uint8_t *p);
/* The root tells every connected rank the status, best effort (they may be gone). */
void init_broadcast_status(boot_state_t *s, pycoll_status_t status, int32_t about, const char *message);
/* The root hears one status message from every connected rank but those marked in skip (may be NULL), in rank
 * order; each OK message's text goes to on_ok (may be NULL), which may refuse it. On a failure *failed names
 * the rank. */
pycoll_status_t init_hear_every_rank(boot_state_t *s, const uint8_t *skip,
                                     pycoll_status_t (*on_ok)(boot_state_t *s, int32_t rank, const uint8_t *msg),
                                     int32_t *failed);
/* A rank hears from the root: its status, then (where OK) one item of item_bytes per rank, into *items (freed
 * by the caller; NULL on failure). */
pycoll_status_t init_hear_root_table(boot_state_t *s, const char *what, size_t item_bytes, uint8_t **items);
/* The root: an OK status, then one item of item_bytes per rank (item(s, r) writes rank r's), to every rank. */
pycoll_status_t init_send_root_table(boot_state_t *s, size_t item_bytes,
                                     void (*item)(const boot_state_t *s, int32_t rank, uint8_t *out));

/* ---- the listeners and authenticated connections (init_listener.c) ---- */

/* Accepts and advances handshakes on the n_listen listeners until `done` says enough ranks are in (or, with no
 * deadline, until the stop check says so: the rendezvous store's listener). Shared by the root's
 * registration (kind ROOT, records follow) and the mesh (kind PEER). `admit` takes a finished connection:
 * PYCOLL_OK keeps it, another status ends the wait with that failure; it returns 1 in *keep when it took the
 * descriptor. `watch` (n_watch descriptors, -1 for none) are established connections that on_watch reads when
 * they become readable (watch[i] is rank i's, or the root's when n_watch is 1): it returns a failure to end
 * the wait, or sets *stop to stop watching that one. */
typedef pycoll_status_t (*admit_fn)(boot_state_t *s, boot_conn_t *c, int *taken);
typedef int (*done_fn)(const boot_state_t *s);
typedef pycoll_status_t (*watch_fn)(boot_state_t *s, int fd, int32_t who, int *stop);
pycoll_status_t init_serve(boot_state_t *s, const int *listen_fds, int n_listen, int kind, size_t extra,
                           admit_fn admit, done_fn done, const int *watch, int32_t n_watch, watch_fn on_watch,
                           const char *timeout_what);
/* Connects to `to` from local address `from` (NULL: the kernel's choice) and completes the handshake (up to the
 * ACK), trying again while a flooded listener drops it. */
pycoll_status_t init_connect_authenticated(boot_state_t *s, const boot_addr_t *from, const boot_addr_t *to, int kind,
                                           int32_t server_rank, const char *what, int *fd);
/* A connection to our listeners that failed its handshake, and why: counted for the timeout messages. */
void init_note_dropped(boot_state_t *s, const char *why);
/* A dropped-connections clause for timeout messages ("" when none). */
void init_dropped_clause(const boot_state_t *s, char *out, size_t len);

/* ---- steps 1 and 2: this rank's record and listener, registration (init_registration.c) ---- */

pycoll_status_t init_prepare(boot_state_t *s, rank_record_t *mine);
pycoll_status_t init_root_register(boot_state_t *s, const rank_record_t *mine);
pycoll_status_t init_client_register(boot_state_t *s, const rank_record_t *mine);

/* ---- step 3: hosts, transport, the TCP mesh (init_mesh.c) ---- */

pycoll_status_t init_find_hosts_and_transport(boot_state_t *s);
pycoll_status_t init_connect_mesh(boot_state_t *s);

/* ---- step 4: the shared-memory segments (init_segments.c) ---- */

/* A segment name from a rank's status message, checked to be one that rank's segment may have. */
pycoll_status_t init_take_name_from_status(boot_state_t *s, int32_t rank, const uint8_t *msg);
pycoll_status_t init_open_segments(boot_state_t *s);
void init_unlink_segments(boot_state_t *s);

/* ---- the communicator over the chosen transport (init_comm.c) ---- */

pycoll_status_t init_build_comm(boot_state_t *s, pycoll_comm_t **comm);

#endif
