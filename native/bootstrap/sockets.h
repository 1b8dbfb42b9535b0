/* The bootstrap's sockets: where a rank listens (an interface, or the route toward the root), and blocking
 * sends and receives that end at a deadline. Every socket is non-blocking and close-on-exec; a wait is a poll
 * bounded by the deadline, never a blocking call. */
#ifndef PYCOLL_BOOTSTRAP_SOCKETS_H
#define PYCOLL_BOOTSTRAP_SOCKETS_H

#include <stddef.h>
#include <stdint.h>

#include "pycoll/types.h"

#define BOOT_ADDR_TEXT_LEN 64
#define BOOT_MAX_INTERFACES 4 /* in a comma-separated interface list (PYCOLL_SOCKET_IFNAME) */

/* An IPv4 or IPv6 address and port as the unique id and the rank table carry it (port in host order). */
typedef struct boot_addr {
    uint16_t family; /* 4 or 6; 0: none */
    uint16_t port;
    uint8_t ip[16];  /* IPv4 in the first 4 bytes */
} boot_addr_t;

double boot_now(void); /* CLOCK_MONOTONIC seconds */

/* The caller's reason to stop waiting (pycoll_init_config_t.should_stop), for this thread's waits: every wait
 * checks it at least every BOOT_CHECK_S and ends with PYCOLL_ERR_INTERRUPTED when it returns nonzero. */
#define BOOT_CHECK_S 0.1
void boot_set_stop_check(int (*should_stop)(void *ctx), void *ctx);
int boot_should_stop(void);
void boot_get_stop_check(int (**should_stop)(void *ctx), void **ctx); /* to restore it after another wait */
void boot_addr_text(const boot_addr_t *addr, char *text, size_t len); /* "1.2.3.4:5" or "[::1]:5" */

/* The addresses this rank should listen on: where `ifnames` is given, a comma-separated list of up to
 * BOOT_MAX_INTERFACES interfaces, the IPv4 (else IPv6) address of each, in the list's order; else one, the
 * local address the kernel routes to `toward` from (127.0.0.1 when toward is this host), else (no toward) the
 * first interface that is up and not loopback, and 127.0.0.1 when there is none. *n gets how many.
 * `ifname_source` names where ifnames came from, for the error message, which names the interface. */
pycoll_status_t boot_choose_addresses(const char *ifnames, const char *ifname_source, const boot_addr_t *toward,
                                      boot_addr_t out[BOOT_MAX_INTERFACES], int *n, char *error, size_t error_len);
/* The first of boot_choose_addresses's (every interface of the list checked). */
pycoll_status_t boot_choose_address(const char *ifname, const char *ifname_source, const boot_addr_t *toward,
                                    boot_addr_t *out, char *error, size_t error_len);
/* `host` (a name or a literal address) resolved, port 0. */
pycoll_status_t boot_resolve(const char *host, boot_addr_t *out, char *error, size_t error_len);

/* A listening socket on addr's IP and an ephemeral port, never the wildcard; *bound gets the port. */
pycoll_status_t boot_listen(const boot_addr_t *addr, int backlog, int *fd, boot_addr_t *bound, char *error,
                            size_t error_len);
/* Connects to `to` from local address `from` (its port ignored; NULL: the kernel's choice), retrying a refused
 * or unreachable address until the deadline (the peer may not listen yet). what: who is at `to` and where
 * ("rank 3 (10.0.0.2:4000)"), for the messages: they add nothing to it. */
pycoll_status_t boot_connect(const boot_addr_t *from, const boot_addr_t *to, double deadline, const char *what,
                             int *fd, char *error, size_t error_len);
/* An accepted connection (non-blocking, close-on-exec), or -1 when none is pending. */
int boot_accept(int listen_fd);

/* Sends / receives exactly n bytes before the deadline. A closed connection is PYCOLL_ERR_PEER_FAILURE, the
 * deadline PYCOLL_ERR_TIMEOUT, the stop check PYCOLL_ERR_INTERRUPTED; `what` names the peer in the message. */
pycoll_status_t boot_send_all(int fd, const void *data, size_t n, double deadline, const char *what, char *error,
                              size_t error_len);
pycoll_status_t boot_recv_all(int fd, void *data, size_t n, double deadline, const char *what, char *error,
                              size_t error_len);
/* Reads what is there without waiting, into buf[*have..need): 1 complete, 0 more to come, -1 closed or failed. */
int boot_recv_some(int fd, uint8_t *buf, size_t *have, size_t need);

/* Big-endian fields of the wire messages. */
static inline void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v; }
static inline void put_u32(uint8_t *p, uint32_t v) { put_u16(p, (uint16_t)(v >> 16)), put_u16(p + 2, (uint16_t)v); }
static inline void put_u64(uint8_t *p, uint64_t v) { put_u32(p, (uint32_t)(v >> 32)), put_u32(p + 4, (uint32_t)v); }
static inline uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t get_u32(const uint8_t *p) { return (uint32_t)get_u16(p) << 16 | get_u16(p + 2); }
static inline uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) << 32 | get_u32(p + 4); }

#define BOOT_ADDR_WIRE_BYTES 20
void boot_addr_put(uint8_t *p, const boot_addr_t *addr);
void boot_addr_get(const uint8_t *p, boot_addr_t *addr);

#endif
