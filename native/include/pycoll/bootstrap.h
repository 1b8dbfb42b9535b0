/* Creating a communicator from C alone, NCCL-style: one process makes a unique id, the program passes it to
 * every rank by its own means (a file, MPI, a job scheduler's key-value store...), and every rank calls
 * pycoll_comm_init_rank with it. pycoll's Python init() runs this same code, passing the id through its
 * rendezvous store.
 *
 *     pycoll_unique_id_t id;
 *     if (rank == 0) pycoll_get_unique_id(&id);   // then send id's bytes to the other ranks
 *     pycoll_comm_t *comm;
 *     pycoll_comm_init_rank(&comm, world_size, id, rank, 60.0);
 *     pycoll_comm_all_reduce(comm, x, x, n, PYCOLL_FLOAT32, PYCOLL_SUM, PYCOLL_ALGO_AUTO,
 *                            PYCOLL_ACCURACY_FAST);
 *     pycoll_comm_destroy(comm);
 *
 * The id names a listening address and carries a fresh 32-byte secret: every connection of the job proves
 * it holds that secret (mutual HMAC-SHA256), so treat the id like a password. The process that made the id
 * must itself call pycoll_comm_init_rank with it (as any rank): its call serves the others' registrations
 * (native/bootstrap/init_rank.c says how the ranks meet). An id serves one communicator. */
#ifndef PYCOLL_BOOTSTRAP_H
#define PYCOLL_BOOTSTRAP_H

#include "pycoll/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PYCOLL_UNIQUE_ID_BYTES 128
/* The largest world size pycoll_comm_init_rank accepts. Each rank holds a descriptor per TCP peer and per
 * shared-memory segment of its host, and the rank serving the id one more per rank during set-up, so the
 * process's descriptor limit (RLIMIT_NOFILE) usually binds first: set-up refuses a world size that needs more
 * descriptors than the limit allows (PYCOLL_ERR_INVALID, naming both) before it waits for anyone. */
#define PYCOLL_MAX_WORLD_SIZE 65536

/* Plain bytes: copy it, write it to a file, send it anywhere. */
typedef struct pycoll_unique_id {
    char internal[PYCOLL_UNIQUE_ID_BYTES];
} pycoll_unique_id_t;

/* A new id listening on PYCOLL_SOCKET_IFNAME's address when that is set, else on this host's first interface
 * that is up and not loopback (127.0.0.1 when there is none). */
PYCOLL_API pycoll_status_t pycoll_get_unique_id(pycoll_unique_id_t *id);

/* For tests only: the next n shared-memory segment names this process draws end in `suffix` (32 lowercase
 * hex digits) instead of fresh random bits, so a test can have them taken before they are drawn. n = 0 (or
 * any other suffix) ends it. A job never calls it. */
PYCOLL_API void pycoll_test_force_segment_draws(const char *suffix, int32_t n);

/* The message of the last failed call of this file's functions on this thread ("" after a success). */
PYCOLL_API const char *pycoll_bootstrap_error(void);

/* Joins the job as `rank` of `world_size`, every wait ending by timeout_s: connects to the id's address,
 * registers, learns every rank's address and host, and builds the transports -- shared memory between the
 * ranks of a host, authenticated TCP sockets between hosts. Errors: PYCOLL_ERR_INVALID (bad arguments, an id
 * that is not one, a world size above PYCOLL_MAX_WORLD_SIZE or needing more descriptors than RLIMIT_NOFILE, ranks disagreeing on the world size or claiming one rank twice), PYCOLL_ERR_TIMEOUT (names
 * the ranks that did not come), PYCOLL_ERR_PEER_FAILURE (a rank failed or died during set-up: every rank
 * learns which and why), PYCOLL_ERR_AUTH, PYCOLL_ERR_SYSTEM, PYCOLL_ERR_INTERRUPTED (config's should_stop). The message: pycoll_bootstrap_error(). */
PYCOLL_API pycoll_status_t pycoll_comm_init_rank(pycoll_comm_t **comm, int32_t world_size, pycoll_unique_id_t id,
                                                 int32_t rank, double timeout_s);

/* The same with every choice spelled out (pycoll's Python layer uses this). Versioned: fill it with
 * pycoll_init_config_init, then change what you need. */
#define PYCOLL_INIT_CONFIG_VERSION 1

typedef enum pycoll_transport_choice {
    PYCOLL_TRANSPORT_AUTO = 0, /* shared memory within a host, TCP between hosts */
    PYCOLL_TRANSPORT_TCP = 1,  /* TCP between every pair */
    PYCOLL_TRANSPORT_SHM = 2   /* shared memory only: every rank on one host, else PYCOLL_ERR_INVALID */
} pycoll_transport_choice_t;

typedef struct pycoll_init_config {
    uint32_t version;      /* PYCOLL_INIT_CONFIG_VERSION */
    uint32_t transport;    /* pycoll_transport_choice_t */
    double timeout_s;      /* set-up and every collective */
    const char *ifname;    /* the interface this rank listens on; NULL: PYCOLL_SOCKET_IFNAME, else the route to
                            * the id's address */
    int64_t shm_ring_bytes; /* each shared-memory ring: a power of two >= 4096; 0: 4 MiB */
    int64_t segment_bytes;  /* pycoll_comm_options_t.segment_bytes; 0: default */
    int64_t spin_ns;        /* pycoll_comm_options_t.spin_ns; < 0: 2 ms when the ranks on this machine (every
                             * host of its boot id) each have a core, 200 us while they are fewer than twice
                             * the cores, else 50 us */
    /* Installed as the transport's check_interrupt (p2p.h): how a blocked collective notices e.g. Ctrl-C.
     * NULL: none. */
    int (*check_interrupt)(void *ctx);
    void *interrupt_ctx;
    /* Called on the calling thread at least every 100 ms while set-up waits: nonzero ends it with
     * PYCOLL_ERR_INTERRUPTED (how pycoll's Python layer notices Ctrl-C, and a failure its rendezvous store
     * recorded for the job). NULL: none. */
    int (*should_stop)(void *ctx);
    void *stop_ctx;
} pycoll_init_config_t;

PYCOLL_API void pycoll_init_config_init(pycoll_init_config_t *config);
PYCOLL_API pycoll_status_t pycoll_comm_init_rank_config(pycoll_comm_t **comm, int32_t world_size,
                                                        const pycoll_unique_id_t *id, int32_t rank,
                                                        const pycoll_init_config_t *config);

/* pycoll_comm_grow (pycoll/comm.h) with every choice of the new communicator spelled out (its timeout_s too). */
PYCOLL_API pycoll_status_t pycoll_comm_grow_config(pycoll_comm_t *comm, int32_t world_size,
                                                   const pycoll_unique_id_t *id, const pycoll_init_config_t *config,
                                                   pycoll_comm_t **out);

/* An id listening on the address of `ifname` when given, else on the local address the kernel routes to
 * `toward` (a host name or address) from, else as pycoll_get_unique_id. */
PYCOLL_API pycoll_status_t pycoll_unique_id_create(pycoll_unique_id_t *id, const char *ifname, const char *toward);
/* The id's address as "host:port", into text[len]. */
PYCOLL_API pycoll_status_t pycoll_unique_id_address(const pycoll_unique_id_t *id, char *text, size_t len);

/* This process's host, as the bootstrap compares them: "boot_id:ipc_namespace:net_namespace" (unreadable
 * parts as "?"), or PYCOLL_HOSTID when set (like NCCL_HOSTID: processes of one machine given different values
 * count as different hosts -- how the tests make hosts without network namespaces; giving processes of
 * different machines one value breaks shared memory). Ranks share a host -- and shared memory -- when these
 * are equal. */
PYCOLL_API void pycoll_host_identity(char *text, size_t len);

/* What a communicator made by pycoll_comm_init_rank runs on: "shm", "tcp" or "shm+tcp"; NULL for others. */
PYCOLL_API const char *pycoll_comm_transport(const pycoll_comm_t *comm);
/* The host map in force (pycoll_comm_set_hosts, or found by pycoll_comm_init_rank) into host_of[size]:
 * PYCOLL_OK, or PYCOLL_ERR_INVALID when the communicator has none (every rank on one host). */
PYCOLL_API pycoll_status_t pycoll_comm_get_hosts(const pycoll_comm_t *comm, int32_t *host_of);

#ifdef __cplusplus
}
#endif
#endif
