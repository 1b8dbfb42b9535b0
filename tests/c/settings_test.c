/* A C embedder's bad setting: pycoll_comm_init_rank (one rank) runs under the environment it is given and
 * prints "refused: STATUS: MESSAGE" when it refuses, or "init ok". pycoll_setting_parse is checked directly
 * too. Built and run by tests/communicator/test_settings.py, which compares the message with Python's SettingError. */
#include <stdio.h>
#include <string.h>

#include <pycoll/pycoll.h>

#include "check.h"

static const pycoll_setting_t *find(const char *name)
{
    int32_t n = 0;
    const pycoll_setting_t *table = pycoll_settings(&n);
    for (int32_t i = 0; i < n; i++)
        if (strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}

static void parse_checks(void)
{
    const pycoll_setting_t *ring = find("PYCOLL_SHM_RING_BYTES");
    pycoll_setting_value_t value;
    char error[256];
    CHECK(ring != NULL, "PYCOLL_SHM_RING_BYTES is not in the table");
    if (ring == NULL)
        return;
    CHECK(pycoll_setting_parse(ring, "65536", &value, error, sizeof error) == PYCOLL_OK && value.integer == 65536,
          "65536 is a ring size");
    CHECK(pycoll_setting_parse(ring, "65537", &value, error, sizeof error) == PYCOLL_ERR_INVALID,
          "65537 is no power of two");
    CHECK(strcmp(error, "PYCOLL_SHM_RING_BYTES='65537': expected a whole number of at least 4096 that is a power "
                        "of two") == 0, "error says \"%s\"", error);
}

int main(void)
{
    parse_checks();
    pycoll_unique_id_t id;
    pycoll_status_t st = pycoll_get_unique_id(&id);
    CHECK(st == PYCOLL_OK, "pycoll_get_unique_id: %d %s", (int)st, pycoll_bootstrap_error());
    pycoll_comm_t *comm = NULL;
    if (st == PYCOLL_OK)
        st = pycoll_comm_init_rank(&comm, 1, id, 0, 30.0);
    if (st == PYCOLL_OK) {
        printf("init ok\n");
        pycoll_comm_destroy(comm);
    } else {
        printf("refused: %d: %s\n", (int)st, pycoll_bootstrap_error());
    }
    return failures ? 1 : 0;
}
