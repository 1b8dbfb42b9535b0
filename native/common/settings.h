/* The one list of pycoll's environment variables, in the manner of NCCL_PARAM: each line declares a variable
 * (PYCOLL_ + its id), its type, default, allowed choices, least value, whether it must be a power of two, and
 * a one-line doc. settings.c builds the public table (pycoll_settings) from it; C code reads a variable through
 * setting_text / setting_flag by its id, and Python through that table (pycoll/settings.py), so neither side
 * spells a variable's name or default again. */
#ifndef PYCOLL_COMMON_SETTINGS_H
#define PYCOLL_COMMON_SETTINGS_H
#include "pycoll/settings.h"

/* X(id, type, default_value, choices, min, power_of_two, doc) */
#define PYCOLL_SETTING_LIST(X)                                                                                   \
    X(BACKEND, TEXT, "cpu", NULL, 0, 0, "the backend init() uses when given none")                               \
    X(DEVICE, CHOICE, "host", "host|cuda|npu", 0, 0,                                                             \
      "with backend=\"auto\": the memory this rank's arrays are in (host, cuda: NCCL, npu: HCCL); init(device=) " \
      "overrides it")                                                                                            \
    X(ISLANDS_CROSSING, CHOICE, "auto", "auto|hierarchical|host-staged", 0, 0,                                   \
      "with backend=\"auto\": how a fast-mode reduction crosses islands (auto: the cost model's choice by bytes; " \
      "every rank must set it alike)")                                                                           \
    X(ALGORITHM, TEXT, "auto", NULL, 0, 0,                                                                       \
      "what algorithm=\"auto\" means for communicators created afterwards (auto: the cost model's choice)")     \
    X(SOCKET_IFNAME, TEXT, NULL, NULL, 0, 0,                                                                     \
      "the network interface to listen on, or a comma-separated list of up to 4: TCP connection k of a pair "    \
      "joins both ranks' interface k mod n (default: the address that routes to MASTER_ADDR; never 0.0.0.0)")    \
    X(TCP_STREAMS, INT, NULL, NULL, 1, 0,                                                                        \
      "TCP connections per pair of ranks, 1 to 8 (every rank alike; default: one per interface of "             \
      "PYCOLL_SOCKET_IFNAME, so 1 unless it lists several); a message from 256 KiB is split into contiguous "    \
      "parts across them, as NCCL_NSOCKS_PERTHREAD, so that one link fills when one stream cannot")              \
    X(SECRET, TEXT, NULL, NULL, 0, 0,                                                                            \
      "shared secret: store and peer connections authenticate with HMAC challenge-response (pycoll run sets a "  \
      "random one per job)")                                                                                     \
    X(JOB_ID, TEXT, NULL, NULL, 0, 0,                                                                            \
      "the job's id, so that jobs sharing a host and a port keep apart (pycoll run sets a random one per job)")  \
    X(GROW_GENERATION, INT, "1", NULL, 1, 0,                                                                     \
      "which grow of the job a process started by pycoll.join() with no unique id joins: the k-th comm.grow "    \
      "without an id publishes its id as generation k in the rendezvous store (docs/fault_tolerance.md)")        \
    X(STORE_MAX_BYTES, INT, "67108864", NULL, 1, 0,                                                              \
      "the most the rendezvous store on rank 0 holds, keys and values together (TCPStore(max_bytes=))")          \
    X(WAIT_REPORT_S, FLOAT, "30", NULL, 0, 0,                                                                    \
      "seconds between the messages (logger \"pycoll\", WARNING) of a rank kept waiting at init by ranks "       \
      "that have not joined or by a store it cannot reach; the first comes after at most 10 s; 0: none")         \
    X(ALLOW_INSECURE, FLAG, "0", NULL, 0, 0,                                                                     \
      "1 lets rank 0 host a store without a secret on a wildcard address (0.0.0.0, ::); see Security")           \
    X(SHM_RING_BYTES, INT, NULL, NULL, 4096, 1,                                                                  \
      "size of each shared-memory ring, one per ordered pair of local ranks (default 4 MiB); larger messages "   \
      "stream through it")                                                                                       \
    X(SHM_SINGLE_COPY, CHOICE, "auto", "auto|off", 0, 0,                                                         \
      "large shared-memory broadcast, all_to_all and 2-rank all_gather: auto reads a rank's buffer straight "    \
      "from its process (process_vm_readv) where every local rank may; off (on any rank) copies through the "    \
      "shared area")                                                                                             \
    X(SHM_STREAMING, CHOICE, "auto", "auto|on|off", 0, 0,                                                        \
      "shared-memory collectives from 32 KiB: how each rank copies into the shared area (auto: plain or "       \
      "streaming stores, whichever it measures faster at the size; on: always streaming; off: always plain)")    \
    X(RING_SEGMENT_BYTES, INT, NULL, NULL, 1, 0,                                                                 \
      "ring pipeline segment of communicators created afterwards (default 512 KiB; simulate(segment_bytes=) per " \
      "run)")                                                                                                    \
    X(SPIN_US, FLOAT, NULL, NULL, -INFINITY, 0,                                                                  \
      "microseconds a TCP or shared-memory wait polls before sleeping (default 2000 when every rank on this "   \
      "machine has a core, namespace hosts of one machine counted together; 200 when ranks share cores; 50 "   \
      "from twice as many ranks as cores; a polling rank yields the core between polls; a sleeping one is "   \
      "woken by the message, over shared memory by its peer; 0 suits ranks whose cores other work keeps busy)") \
    X(TRACE_BUFFER, INT, "2048", NULL, 0, 0,                                                                   \
      "calls each communicator's flight recorder keeps, the latest (0: none recorded)")                          \
    X(TRACE_DIR, PATH, NULL, NULL, 0, 0,                                                                         \
      "where the flight recorder's dumps go: on a pycoll error, on PYCOLL_TRACE_SIGNAL, on comm.dump_trace()")    \
    X(TRACE_SIGNAL, CHOICE, "SIGUSR2", "SIGUSR2|SIGUSR1|off", 0, 0,                                               \
      "with PYCOLL_TRACE_DIR: the signal that dumps every communicator's record, even of a rank stuck in a wait " \
      "(unless the program has its own handler for it)")                                                        \
    X(TRACE_ON_CLOSE, FLAG, "0", NULL, 0, 0, "1: close() dumps the communicator's record into PYCOLL_TRACE_DIR") \
    X(TUNE_FILE, PATH, NULL, NULL, 0, 0, "the cost model pycoll tune writes (default ~/.cache/pycoll/cost_model.json)") \
    X(SIMD, CHOICE, NULL, "scalar|avx2|avx512", 0, 0,                                                            \
      "force a kernel variant (default: the best this CPU has; one it lacks falls back to that)")                \
    X(HOSTID, TEXT, NULL, NULL, 0, 0,                                                                            \
      "ranks with equal values share a host, as NCCL_HOSTID (default: the boot id and the IPC and network "      \
      "namespaces)")                                                                                             \
    X(NCCL_LIBRARY, PATH, NULL, NULL, 0, 0, "the libnccl the nccl backend loads (default: the nvidia wheel's, then the loader's)") \
    X(CUDART_LIBRARY, PATH, NULL, NULL, 0, 0, "the CUDA runtime library the nccl backend loads")                 \
    X(NVRTC_LIBRARY, PATH, NULL, NULL, 0, 0, "the NVRTC library that compiles pycoll's CUDA kernels")            \
    X(CUDA_DRIVER_LIBRARY, PATH, NULL, NULL, 0, 0, "the CUDA driver library (default: libcuda.so.1)")            \
    X(HCCL_LIBRARY, PATH, NULL, NULL, 0, 0, "the libhccl the hccl backend loads (default: under ASCEND_HOME_PATH)") \
    X(ACL_LIBRARY, PATH, NULL, NULL, 0, 0, "the libascendcl the hccl backend loads (default: under ASCEND_HOME_PATH)")

typedef enum {
#define PYCOLL_SETTING_ID(id, ...) SETTING_##id,
    PYCOLL_SETTING_LIST(PYCOLL_SETTING_ID)
#undef PYCOLL_SETTING_ID
    SETTING_COUNT
} setting_id_t;

/* The variable's value, else its default; NULL when neither (an empty value counts as unset). */
const char *setting_text(setting_id_t id);
/* 1 when a PYCOLL_SETTING_FLAG variable (or its default) is "1". */
int setting_flag(setting_id_t id);

#endif
