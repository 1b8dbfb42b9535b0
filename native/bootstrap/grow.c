/* Growing a job (pycoll_comm_grow, as ncclCommGrow): the members share one unique id over the communicator they
 * have -- rank 0's -- and meet the new processes in a fresh bootstrap of the larger job (init_rank.c), keeping
 * their ranks; each new process joins that bootstrap with pycoll_comm_join as one of the ranks after them. The
 * grown communicator has connections and segments of its own, so it owes nothing to the old one: a job that
 * shrank after losing a rank grows back from the shrunk communicator, whatever state the old one is in. */
#include <stdarg.h>
#include <string.h>

#include "bootstrap/bootstrap_internal.h"
#include "common/error_format.h"
#include "pycoll/bootstrap.h"

static pycoll_status_t grow_fail(pycoll_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pycoll_vformat_error(boot_error(), BOOT_ERROR_LEN, status, fmt, ap);
    va_end(ap);
    return status;
}

static int is_blank(const pycoll_unique_id_t *id)
{
    for (size_t i = 0; i < sizeof id->internal; i++)
        if (id->internal[i])
            return 0;
    return 1;
}

pycoll_status_t pycoll_comm_grow_config(pycoll_comm_t *comm, int32_t world_size, const pycoll_unique_id_t *id,
                                        const pycoll_init_config_t *config, pycoll_comm_t **out)
{
    boot_error()[0] = 0;
    if (out)
        *out = NULL;
    if (!comm || !out || !config)
        return grow_fail(PYCOLL_ERR_INVALID, "comm, out and config must not be NULL");
    int32_t rank = pycoll_comm_rank(comm), size = pycoll_comm_size(comm);
    if (world_size <= size || world_size > PYCOLL_MAX_WORLD_SIZE)
        return grow_fail(PYCOLL_ERR_INVALID, "world_size must be larger than the communicator's size %d (and at "
                         "most %d), got %d", (int)size, PYCOLL_MAX_WORLD_SIZE, (int)world_size);
    /* Rank 0 sends zeros where it has no id, so that every member refuses alike instead of waiting for a
     * bootstrap that never starts. */
    pycoll_unique_id_t shared;
    memset(&shared, 0, sizeof shared);
    if (rank == 0 && id)
        shared = *id;
    /* The grow's deadline bounds the id's broadcast too: a member that never calls grow is named by then. */
    pycoll_comm_options_t options, bounded;
    pycoll_comm_get_options(comm, &options);
    bounded = options;
    bounded.timeout_s = config->timeout_s;
    pycoll_comm_set_options(comm, &bounded);
    pycoll_status_t st = pycoll_comm_broadcast(comm, shared.internal, PYCOLL_UNIQUE_ID_BYTES, PYCOLL_UINT8, 0);
    pycoll_comm_set_options(comm, &options);
    if (st != PYCOLL_OK)
        return grow_fail(st, "rank %d: receiving rank 0's unique id for the grow over the communicator: %s",
                         (int)rank, pycoll_comm_error(comm));
    if (is_blank(&shared))
        return grow_fail(PYCOLL_ERR_INVALID, "rank 0 of the communicator passed no unique id to grow with: it "
                         "needs one (pycoll_get_unique_id, made by a process that takes part), which the new "
                         "processes pass to pycoll_comm_join");
    return pycoll_comm_init_rank_config(out, world_size, &shared, rank, config);
}

pycoll_status_t pycoll_comm_grow(pycoll_comm_t *comm, int32_t world_size, const pycoll_unique_id_t *id,
                                 double timeout_s, pycoll_comm_t **out)
{
    pycoll_init_config_t config;
    pycoll_init_config_init(&config);
    if (comm) {
        pycoll_comm_options_t options;
        pycoll_comm_get_options(comm, &options);
        config.timeout_s = timeout_s > 0 ? timeout_s : options.timeout_s;
        config.segment_bytes = options.segment_bytes;
    }
    return pycoll_comm_grow_config(comm, world_size, id, &config, out);
}

pycoll_status_t pycoll_comm_join(pycoll_comm_t **out, int32_t world_size, const pycoll_unique_id_t *id,
                                 int32_t rank, double timeout_s)
{
    boot_error()[0] = 0;
    if (out)
        *out = NULL;
    if (!out || !id)
        return grow_fail(PYCOLL_ERR_INVALID, "out and id must not be NULL");
    if (rank < 1 || rank >= world_size)
        return grow_fail(PYCOLL_ERR_INVALID, "rank must be in [1, world_size=%d): a new process joins as one of "
                         "the ranks after the members' (rank 0 is always a member), got %d", (int)world_size,
                         (int)rank);
    pycoll_init_config_t config;
    pycoll_init_config_init(&config);
    config.timeout_s = timeout_s;
    return pycoll_comm_init_rank_config(out, world_size, id, rank, &config);
}
