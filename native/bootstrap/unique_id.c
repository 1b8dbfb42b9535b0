/* The unique id: its bytes, the listener behind it, the thread's last error, and this process's host. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/bootstrap_internal.h"
#include "common/error_format.h"
#include "common/settings.h"

/* The id's bytes: "PCID", version u16, 0 u16, the root's address (20 bytes), job (16), secret (32), zeros. */
static const char ID_MAGIC[4] = {'P', 'C', 'I', 'D'};
#define ID_VERSION 1
#define ID_ADDR 8
#define ID_JOB (ID_ADDR + BOOT_ADDR_WIRE_BYTES)
#define ID_SECRET (ID_JOB + BOOT_JOB_BYTES)
#define MAX_LISTENERS 64 /* ids made by one process and not used yet */

static _Thread_local char last_error[BOOT_ERROR_LEN];

char *boot_error(void) { return last_error; }

const char *pycoll_bootstrap_error(void) { return last_error; }

/* The listeners of the ids this process made, until an init_rank of this process claims them. */
static pthread_mutex_t listeners_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint8_t job[BOOT_JOB_BYTES];
    uint8_t secret[BOOT_SECRET_BYTES]; /* an id with this job but another secret is not this one */
    int fd;
} listeners[MAX_LISTENERS];
static int n_listeners;

int boot_claim_listener(const boot_id_t *id)
{
    int fd = -1;
    pthread_mutex_lock(&listeners_lock);
    for (int i = 0; i < n_listeners; i++)
        if (memcmp(listeners[i].job, id->job, BOOT_JOB_BYTES) == 0 &&
            equal_in_constant_time(listeners[i].secret, id->secret, BOOT_SECRET_BYTES)) {
            fd = listeners[i].fd;
            listeners[i] = listeners[--n_listeners];
            break;
        }
    pthread_mutex_unlock(&listeners_lock);
    return fd;
}

pycoll_status_t pycoll_unique_id_create(pycoll_unique_id_t *id, const char *ifname, const char *toward)
{
    char *error = last_error;
    error[0] = 0;
    if (!id)
        return pycoll_format_error(error, BOOT_ERROR_LEN, PYCOLL_ERR_INVALID, "id must not be NULL");
    const char *source = "ifname";
    if (!ifname || !ifname[0]) {
        ifname = setting_text(SETTING_SOCKET_IFNAME);
        source = "PYCOLL_SOCKET_IFNAME";
    }
    boot_addr_t target, *toward_addr = NULL, addr, bound;
    pycoll_status_t st = PYCOLL_OK;
    if (toward && toward[0] && !(ifname && ifname[0])) {
        st = boot_resolve(toward, &target, error, BOOT_ERROR_LEN);
        toward_addr = &target;
    }
    if (st == PYCOLL_OK)
        st = boot_choose_address(ifname, source, toward_addr, &addr, error, BOOT_ERROR_LEN);
    uint8_t job[BOOT_JOB_BYTES], secret[BOOT_SECRET_BYTES];
    if (st == PYCOLL_OK)
        st = boot_random(job, sizeof job, error, BOOT_ERROR_LEN);
    if (st == PYCOLL_OK)
        st = boot_random(secret, sizeof secret, error, BOOT_ERROR_LEN);
    int fd = -1;
    if (st == PYCOLL_OK)
        st = boot_listen(&addr, SOMAXCONN, &fd, &bound, error, BOOT_ERROR_LEN);
    if (st != PYCOLL_OK)
        return st;
    pthread_mutex_lock(&listeners_lock);
    if (n_listeners == MAX_LISTENERS) {
        pthread_mutex_unlock(&listeners_lock);
        close(fd);
        return pycoll_format_error(error, BOOT_ERROR_LEN, PYCOLL_ERR_INVALID,
                                   "this process made %d unique ids that no pycoll_comm_init_rank used yet; "
                                   "each id must be used by one pycoll_comm_init_rank of this process",
                                   MAX_LISTENERS);
    }
    memcpy(listeners[n_listeners].job, job, sizeof job);
    memcpy(listeners[n_listeners].secret, secret, sizeof secret);
    listeners[n_listeners++].fd = fd;
    pthread_mutex_unlock(&listeners_lock);

    uint8_t *p = (uint8_t *)id->internal;
    memset(p, 0, PYCOLL_UNIQUE_ID_BYTES);
    memcpy(p, ID_MAGIC, 4);
    put_u16(p + 4, ID_VERSION);
    boot_addr_put(p + ID_ADDR, &bound);
    memcpy(p + ID_JOB, job, sizeof job);
    memcpy(p + ID_SECRET, secret, sizeof secret);
    return PYCOLL_OK;
}

pycoll_status_t pycoll_get_unique_id(pycoll_unique_id_t *id) { return pycoll_unique_id_create(id, NULL, NULL); }

pycoll_status_t boot_id_decode(const pycoll_unique_id_t *id, boot_id_t *out, char *error, size_t error_len)
{
    const uint8_t *p = (const uint8_t *)id->internal;
    if (memcmp(p, ID_MAGIC, 4) != 0)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID,
                                   "id is not a pycoll unique id (made by pycoll_get_unique_id)");
    if (get_u16(p + 4) != ID_VERSION)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID,
                                   "id is of version %u, this library reads version %d", get_u16(p + 4), ID_VERSION);
    boot_addr_get(p + ID_ADDR, &out->root);
    if ((out->root.family != 4 && out->root.family != 6) || out->root.port == 0)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "id names no address (corrupted?)");
    memcpy(out->job, p + ID_JOB, BOOT_JOB_BYTES);
    memcpy(out->secret, p + ID_SECRET, BOOT_SECRET_BYTES);
    return PYCOLL_OK;
}

pycoll_status_t pycoll_unique_id_address(const pycoll_unique_id_t *id, char *text, size_t len)
{
    boot_id_t decoded;
    pycoll_status_t st = boot_id_decode(id, &decoded, last_error, BOOT_ERROR_LEN);
    if (st == PYCOLL_OK)
        boot_addr_text(&decoded.root, text, len);
    return st;
}

void pycoll_host_identity(char *text, size_t len)
{
    const char *forced = setting_text(SETTING_HOSTID); /* as NCCL_HOSTID: ranks with equal values share a host */
    if (forced && forced[0]) {
        snprintf(text, len, "%s", forced);
        return;
    }
    char boot[64] = "?";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (!fgets(boot, sizeof boot, f))
            strcpy(boot, "?");
        fclose(f);
        boot[strcspn(boot, "\n")] = 0;
    }
    char ns[2][32];
    const char *paths[2] = {"/proc/self/ns/ipc", "/proc/self/ns/net"};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (stat(paths[i], &st) == 0)
            snprintf(ns[i], sizeof ns[i], "%llu", (unsigned long long)st.st_ino);
        else
            strcpy(ns[i], "?");
    }
    snprintf(text, len, "%s:%s:%s", boot, ns[0], ns[1]);
}
