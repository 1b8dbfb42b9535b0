/* The bootstrap's sockets; see sockets.h. */
#include "bootstrap/sockets.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/error_format.h"

#define SOCKET_BUFFER_BYTES (4 << 20) /* the TCP transport's large messages want deep buffers */

double boot_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static _Thread_local int (*stop_check)(void *ctx);
static _Thread_local void *stop_ctx;

void boot_set_stop_check(int (*should_stop)(void *ctx), void *ctx)
{
    stop_check = should_stop;
    stop_ctx = ctx;
}

int boot_should_stop(void) { return stop_check && stop_check(stop_ctx); }

void boot_get_stop_check(int (**should_stop)(void *ctx), void **ctx)
{
    *should_stop = stop_check;
    *ctx = stop_ctx;
}

static socklen_t to_sockaddr(const boot_addr_t *a, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (a->family == 6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(a->port);
        memcpy(&s6->sin6_addr, a->ip, 16);
        return sizeof *s6;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons(a->port);
    memcpy(&s4->sin_addr, a->ip, 4);
    return sizeof *s4;
}

static int from_sockaddr(const struct sockaddr *sa, boot_addr_t *a)
{
    memset(a, 0, sizeof *a);
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        a->family = 4, a->port = ntohs(s4->sin_port);
        memcpy(a->ip, &s4->sin_addr, 4);
        return 1;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        a->family = 6, a->port = ntohs(s6->sin6_port);
        memcpy(a->ip, &s6->sin6_addr, 16);
        return 1;
    }
    return 0;
}

void boot_addr_text(const boot_addr_t *addr, char *text, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    inet_ntop(addr->family == 6 ? AF_INET6 : AF_INET, addr->ip, ip, sizeof ip);
    snprintf(text, len, addr->family == 6 ? "[%s]:%u" : "%s:%u", ip, (unsigned)addr->port);
}

void boot_addr_put(uint8_t *p, const boot_addr_t *addr)
{
    put_u16(p, addr->family);
    put_u16(p + 2, addr->port);
    memcpy(p + 4, addr->ip, 16);
}

void boot_addr_get(const uint8_t *p, boot_addr_t *addr)
{
    addr->family = get_u16(p);
    addr->port = get_u16(p + 2);
    memcpy(addr->ip, p + 4, 16);
}

static int new_socket(int family)
{
    return socket(family == 6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

static void tune(int fd)
{
    int one = 1, bytes = SOCKET_BUFFER_BYTES;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

static pycoll_status_t interface_address(const char *ifname, const char *source, boot_addr_t *out, char *error,
                                         size_t error_len)
{
    struct ifaddrs *all;
    if (getifaddrs(&all) != 0)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "getifaddrs: %s", strerror(errno));
    int found = 0;
    for (int want = 4; want <= 6 && !found; want += 2)
        for (struct ifaddrs *i = all; i && !found; i = i->ifa_next)
            if (i->ifa_addr && strcmp(i->ifa_name, ifname) == 0 &&
                i->ifa_addr->sa_family == (want == 4 ? AF_INET : AF_INET6))
                found = from_sockaddr(i->ifa_addr, out);
    char known[256] = "";
    if (!found)
        for (struct ifaddrs *i = all; i; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && strlen(known) + strlen(i->ifa_name) + 3 < sizeof known) {
                if (known[0])
                    strcat(known, ", ");
                strcat(known, i->ifa_name);
            }
    freeifaddrs(all);
    if (!found)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID,
                                   "network interface '%s' (%s) has no IP address; interfaces with one here: %s",
                                   ifname, source, known[0] ? known : "none");
    out->port = 0;
    return PYCOLL_OK;
}

static int first_external_interface(boot_addr_t *out)
{
    struct ifaddrs *all;
    int found = 0;
    if (getifaddrs(&all) != 0)
        return 0;
    for (struct ifaddrs *i = all; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK))
            found = from_sockaddr(i->ifa_addr, out);
    freeifaddrs(all);
    out->port = 0;
    return found;
}

pycoll_status_t boot_resolve(const char *host, boot_addr_t *out, char *error, size_t error_len)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "address '%s' does not resolve: %s", host,
                                   gai_strerror(rc));
    int ok = 0;
    for (struct addrinfo *r = res; r && !ok; r = r->ai_next)
        ok = from_sockaddr(r->ai_addr, out);
    freeaddrinfo(res);
    if (!ok)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "address '%s' is neither IPv4 nor IPv6",
                                   host);
    out->port = 0;
    return PYCOLL_OK;
}

/* No interface named: the route toward the root, else the first external interface, else loopback. */
static pycoll_status_t route_address(const boot_addr_t *toward, boot_addr_t *out, char *error, size_t error_len)
{
    if (toward == NULL) {
        if (!first_external_interface(out)) {
            memset(out, 0, sizeof *out);
            out->family = 4;
            out->ip[0] = 127, out->ip[3] = 1;
        }
        return PYCOLL_OK;
    }
    /* A UDP connect sends nothing: it only makes the kernel pick the route and its source address. */
    struct sockaddr_storage ss;
    boot_addr_t target = *toward;
    if (target.port == 0)
        target.port = 9;
    socklen_t len = to_sockaddr(&target, &ss);
    int probe = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (probe < 0)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "socket: %s", strerror(errno));
    char text[BOOT_ADDR_TEXT_LEN];
    boot_addr_text(toward, text, sizeof text);
    pycoll_status_t st = PYCOLL_OK;
    if (connect(probe, (struct sockaddr *)&ss, len) != 0) {
        st = pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "no route from this host to %s: %s", text,
                                 strerror(errno));
    } else {
        len = sizeof ss;
        if (getsockname(probe, (struct sockaddr *)&ss, &len) != 0 || !from_sockaddr((struct sockaddr *)&ss, out))
            st = pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "getsockname: %s", strerror(errno));
        out->port = 0;
    }
    close(probe);
    return st;
}

/* One entry of a comma-separated interface list into name (NUL-terminated); the text after it into *rest. */
static pycoll_status_t next_interface(const char *list, const char **rest, const char *source, char *name,
                                      char *error, size_t error_len)
{
    const char *comma = strchr(*rest, ',');
    size_t len = comma ? (size_t)(comma - *rest) : strlen(*rest);
    if (len == 0 || len >= IF_NAMESIZE)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "%s='%s': each interface name must be 1 to "
                                   "%d bytes, got '%.*s'", source, list, IF_NAMESIZE - 1, (int)len, *rest);
    memcpy(name, *rest, len);
    name[len] = 0;
    *rest = comma ? comma + 1 : NULL;
    return PYCOLL_OK;
}

pycoll_status_t boot_choose_addresses(const char *ifnames, const char *ifname_source, const boot_addr_t *toward,
                                      boot_addr_t out[BOOT_MAX_INTERFACES], int *n, char *error, size_t error_len)
{
    *n = 0;
    if (!ifnames || !ifnames[0]) {
        *n = 1;
        return route_address(toward, out, error, error_len);
    }
    char names[BOOT_MAX_INTERFACES][IF_NAMESIZE];
    for (const char *rest = ifnames; rest; (*n)++) {
        if (*n == BOOT_MAX_INTERFACES)
            return pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "%s='%s' names more than %d interfaces",
                                       ifname_source, ifnames, BOOT_MAX_INTERFACES);
        pycoll_status_t st = next_interface(ifnames, &rest, ifname_source, names[*n], error, error_len);
        for (int i = 0; st == PYCOLL_OK && i < *n; i++)
            if (strcmp(names[i], names[*n]) == 0)
                st = pycoll_format_error(error, error_len, PYCOLL_ERR_INVALID, "%s='%s' names interface '%s' twice",
                                         ifname_source, ifnames, names[i]);
        if (st != PYCOLL_OK)
            return st;
    }
    pycoll_status_t st = PYCOLL_OK; /* the list's form checked first: its interfaces looked up after */
    for (int i = 0; st == PYCOLL_OK && i < *n; i++)
        st = interface_address(names[i], ifname_source, &out[i], error, error_len);
    return st;
}

pycoll_status_t boot_choose_address(const char *ifname, const char *ifname_source, const boot_addr_t *toward,
                                    boot_addr_t *out, char *error, size_t error_len)
{
    boot_addr_t all[BOOT_MAX_INTERFACES];
    int n;
    pycoll_status_t st = boot_choose_addresses(ifname, ifname_source, toward, all, &n, error, error_len);
    if (st == PYCOLL_OK)
        *out = all[0];
    return st;
}

pycoll_status_t boot_listen(const boot_addr_t *addr, int backlog, int *fd, boot_addr_t *bound, char *error,
                            size_t error_len)
{
    struct sockaddr_storage ss;
    boot_addr_t want = *addr;
    want.port = 0;
    socklen_t len = to_sockaddr(&want, &ss);
    char text[BOOT_ADDR_TEXT_LEN];
    boot_addr_text(&want, text, sizeof text);
    *fd = new_socket(want.family);
    if (*fd < 0)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "socket: %s", strerror(errno));
    if (bind(*fd, (struct sockaddr *)&ss, len) != 0 || listen(*fd, backlog) != 0) {
        int err = errno;
        close(*fd);
        *fd = -1;
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "cannot listen on %s: %s", text,
                                   strerror(err));
    }
    len = sizeof ss;
    getsockname(*fd, (struct sockaddr *)&ss, &len);
    from_sockaddr((struct sockaddr *)&ss, bound);
    return PYCOLL_OK;
}

/* Waits until fd is ready for `events`: 1 ready, 0 the deadline passed, -1 the stop check fired. */
static int wait_ready(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - boot_now();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)((left < BOOT_CHECK_S ? left : BOOT_CHECK_S) * 1000) + 1);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return 1; /* let the call that follows report the error */
        if (boot_should_stop())
            return -1;
    }
}

static pycoll_status_t stopped(char *error, size_t error_len)
{
    return pycoll_format_error(error, error_len, PYCOLL_ERR_INTERRUPTED, "set-up interrupted by the caller");
}

/* Whether a connected socket's two ends are one address: with nobody listening on a port of this host, the kernel
 * may give a socket dialling that port the same port as its own, and the simultaneous open then connects the
 * socket to itself. That is "nobody listens yet" (and left open it would hold the port the listener is about to
 * bind). */
static int connected_to_itself(int fd)
{
    struct sockaddr_storage a, b;
    socklen_t alen = sizeof a, blen = sizeof b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (getsockname(fd, (struct sockaddr *)&a, &alen) != 0 || getpeername(fd, (struct sockaddr *)&b, &blen) != 0)
        return 0;
    return alen == blen && memcmp(&a, &b, alen) == 0;
}

pycoll_status_t boot_connect(const boot_addr_t *from, const boot_addr_t *to, double deadline, const char *what,
                             int *fd, char *error, size_t error_len)
{
    struct sockaddr_storage ss, local;
    socklen_t len = to_sockaddr(to, &ss), local_len = 0;
    if (from) {
        boot_addr_t any_port = *from;
        any_port.port = 0;
        local_len = to_sockaddr(&any_port, &local);
    }
    double backoff = 0.005;
    int last = 0;
    do {
        *fd = new_socket(to->family);
        if (*fd < 0)
            return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "socket: %s", strerror(errno));
        if (from && bind(*fd, (struct sockaddr *)&local, local_len) != 0) {
            int err = errno;
            char text[BOOT_ADDR_TEXT_LEN];
            boot_addr_text(from, text, sizeof text);
            close(*fd);
            *fd = -1;
            return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "cannot connect to %s from %s: %s", what,
                                       text, strerror(err));
        }
        int rc = connect(*fd, (struct sockaddr *)&ss, len), ready = 0;
        if (rc != 0 && errno == EINPROGRESS && (ready = wait_ready(*fd, POLLOUT, deadline)) > 0) {
            socklen_t elen = sizeof last;
            getsockopt(*fd, SOL_SOCKET, SO_ERROR, &last, &elen);
            rc = last == 0 ? 0 : -1;
        } else if (rc != 0) {
            last = errno == EINPROGRESS ? ETIMEDOUT : errno;
        }
        if (rc == 0 && connected_to_itself(*fd)) {
            /* Closed with a reset, not into TIME_WAIT, which would keep the listener off that port a minute. */
            struct linger reset = {.l_onoff = 1, .l_linger = 0};
            setsockopt(*fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
            rc = -1;
            last = ECONNREFUSED;
        }
        if (rc == 0) {
            tune(*fd);
            return PYCOLL_OK;
        }
        close(*fd);
        *fd = -1;
        if (ready < 0 || boot_should_stop())
            return stopped(error, error_len);
        if (last != ECONNREFUSED && last != ENETUNREACH && last != EHOSTUNREACH && last != ETIMEDOUT &&
            last != ECONNRESET && last != EAGAIN)
            return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "cannot connect to %s: %s", what,
                                       strerror(last));
        struct timespec nap = {.tv_sec = 0, .tv_nsec = (long)(backoff * 1e9)};
        nanosleep(&nap, NULL);
        backoff = backoff * 2 > 0.1 ? 0.1 : backoff * 2;
    } while (boot_now() < deadline);
    return pycoll_format_error(error, error_len, PYCOLL_ERR_TIMEOUT, "%s did not accept a connection in time "
                               "(last error: %s)", what, last ? strerror(last) : "none");
}

int boot_accept(int listen_fd)
{
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0)
        tune(fd);
    return fd;
}

pycoll_status_t boot_send_all(int fd, const void *data, size_t n, double deadline, const char *what, char *error,
                              size_t error_len)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k, n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return pycoll_format_error(error, error_len, PYCOLL_ERR_PEER_FAILURE, "%s closed the connection (%s)",
                                       what, strerror(errno));
        int ready = wait_ready(fd, POLLOUT, deadline);
        if (ready < 0)
            return stopped(error, error_len);
        if (ready == 0)
            return pycoll_format_error(error, error_len, PYCOLL_ERR_TIMEOUT, "%s did not read in time", what);
    }
    return PYCOLL_OK;
}

int boot_recv_some(int fd, uint8_t *buf, size_t *have, size_t need)
{
    while (*have < need) {
        ssize_t k = recv(fd, buf + *have, need - *have, 0);
        if (k > 0) {
            *have += (size_t)k;
            continue;
        }
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (k < 0 && errno == EINTR)
            continue;
        return -1;
    }
    return 1;
}

pycoll_status_t boot_recv_all(int fd, void *data, size_t n, double deadline, const char *what, char *error,
                              size_t error_len)
{
    size_t have = 0;
    for (;;) {
        int r = boot_recv_some(fd, data, &have, n);
        if (r > 0)
            return PYCOLL_OK;
        if (r < 0)
            return pycoll_format_error(error, error_len, PYCOLL_ERR_PEER_FAILURE,
                                       "%s closed the connection (it failed or exited)", what);
        int ready = wait_ready(fd, POLLIN, deadline);
        if (ready < 0)
            return stopped(error, error_len);
        if (ready == 0)
            return pycoll_format_error(error, error_len, PYCOLL_ERR_TIMEOUT, "%s sent nothing in time", what);
    }
}
