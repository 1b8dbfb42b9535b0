# Declarations of libpycoll's C ABI (native/include/pycoll), once, for every Cython module.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "pycoll/pycoll.h" nogil:
    ctypedef enum pycoll_dtype_t:
        PYCOLL_INT8, PYCOLL_UINT8, PYCOLL_INT32, PYCOLL_INT64,
        PYCOLL_FLOAT16, PYCOLL_BFLOAT16, PYCOLL_FLOAT32, PYCOLL_FLOAT64, PYCOLL_COMPLEX64, PYCOLL_COMPLEX128,
        PYCOLL_NUM_DTYPES
    ctypedef enum pycoll_op_t:
        PYCOLL_SUM, PYCOLL_PROD, PYCOLL_MIN, PYCOLL_MAX, PYCOLL_AVG, PYCOLL_NUM_OPS
    ctypedef enum pycoll_status_t:
        PYCOLL_OK, PYCOLL_ERR_INVALID, PYCOLL_ERR_UNSUPPORTED, PYCOLL_ERR_TIMEOUT, PYCOLL_ERR_PEER_FAILURE,
        PYCOLL_ERR_MISMATCH, PYCOLL_ERR_SYSTEM, PYCOLL_ERR_CLOSED, PYCOLL_ERR_NOMEM, PYCOLL_ERR_INTERRUPTED,
        PYCOLL_ERR_BUSY, PYCOLL_ERR_AUTH, PYCOLL_ERR_FORKED, PYCOLL_ERR_REVOKED
    ctypedef enum pycoll_coll_t:
        PYCOLL_COLL_ALL_REDUCE, PYCOLL_COLL_REDUCE_SCATTER, PYCOLL_COLL_ALL_GATHER, PYCOLL_COLL_BROADCAST,
        PYCOLL_COLL_REDUCE, PYCOLL_COLL_BARRIER, PYCOLL_COLL_SEND_RECV, PYCOLL_COLL_ALL_TO_ALL, PYCOLL_COLL_GATHER,
        PYCOLL_COLL_SCATTER, PYCOLL_COLL_ALL_GATHER_V, PYCOLL_COLL_REDUCE_SCATTER_V, PYCOLL_NUM_COLLS
    # The algorithm ids are bound by number only (pycoll._bindings.abi names them from the algorithm table).
    ctypedef enum pycoll_algorithm_t:
        PYCOLL_ALGO_AUTO, PYCOLL_NUM_ALGOS
    ctypedef enum pycoll_accuracy_t:
        PYCOLL_ACCURACY_FAST, PYCOLL_ACCURACY_COMPENSATED, PYCOLL_ACCURACY_REPRODUCIBLE, PYCOLL_NUM_ACCURACIES

    size_t pycoll_dtype_size(pycoll_dtype_t dtype)
    const char *pycoll_dtype_name(pycoll_dtype_t dtype)
    const char *pycoll_op_name(pycoll_op_t op)
    const char *pycoll_status_name(pycoll_status_t status)

    # kernels.h
    pycoll_status_t pycoll_reduce_into(void *dst, const void *src, int64_t count, pycoll_dtype_t dtype,
                                       pycoll_op_t op)
    pycoll_status_t pycoll_reduce(void *out, const void *a, const void *b, int64_t count, pycoll_dtype_t dtype,
                                  pycoll_op_t op)
    pycoll_status_t pycoll_scale_avg(void *buf, int64_t count, pycoll_dtype_t dtype, int64_t divisor)

    # row_norm.h
    ctypedef enum pycoll_norm_kind_t:
        PYCOLL_NORM_LAYER, PYCOLL_NORM_RMS, PYCOLL_NUM_NORM_KINDS
    pycoll_status_t pycoll_norm_rows(void *out, const void *x, const void *residual, const void *weight,
                                     const void *bias, int64_t rows, int64_t hidden, pycoll_dtype_t dtype,
                                     pycoll_norm_kind_t kind, double eps)
    pycoll_dtype_t pycoll_accumulator_dtype(pycoll_dtype_t dtype)
    pycoll_status_t pycoll_compensated_combine(void *dst_sum, void *dst_comp, const void *src_sum,
                                               const void *src_comp, int64_t count, pycoll_dtype_t dtype)
    pycoll_status_t pycoll_compensated_load(void *sum, void *comp, const void *src, int64_t count,
                                            pycoll_dtype_t dtype)
    pycoll_status_t pycoll_compensated_store(void *dst, const void *sum, const void *comp, int64_t count,
                                             pycoll_dtype_t dtype, int64_t divisor)
    const char *pycoll_simd_name()

    # p2p.h
    enum: PYCOLL_P2P_VERSION
    enum: PYCOLL_ERROR_LEN
    ctypedef struct pycoll_coll_desc_t:
        uint64_t seq
        uint64_t history
        int64_t count
        int32_t root
        uint8_t coll
        uint8_t dtype
        uint8_t op
        uint8_t algorithm
        uint8_t accuracy
    ctypedef struct pycoll_p2p_ops_t:
        uint32_t version
        const char *name
        void (*destroy)(void *p2p)   # takes a pycoll_p2p_t *; declared loosely to avoid a forward reference
    ctypedef struct pycoll_p2p_t:
        const pycoll_p2p_ops_t *ops
        int32_t rank
        int32_t size
        int64_t deadline_ns
        pycoll_coll_desc_t desc
        pycoll_status_t status
        int32_t failed_rank
        char error[512]
        int (*check_interrupt)(void *ctx) noexcept nogil
        void *interrupt_ctx
        int (*should_stop)(void *ctx) noexcept nogil
        void *stop_ctx
        int64_t spin_ns
        const void *kernels
    int64_t pycoll_now_ns()
    const char *pycoll_algorithm_name(pycoll_algorithm_t algorithm)
    const char *pycoll_coll_name(pycoll_coll_t coll)
    const char *pycoll_accuracy_name(pycoll_accuracy_t accuracy)

    # algorithms.h
    enum: PYCOLL_COST_MODEL_ALGOS
    enum: PYCOLL_ALGO_TRAIT_NATIVE
    enum: PYCOLL_ALGO_TRAIT_HOSTS
    uint32_t pycoll_algorithm_traits(pycoll_algorithm_t algorithm)
    ctypedef struct pycoll_cost_model_t:
        double alpha_s
        double beta_s_per_byte
        double gamma_s_per_byte
        double latency_scale[PYCOLL_COST_MODEL_ALGOS]
        double bandwidth_scale[PYCOLL_COST_MODEL_ALGOS]
        double inter_alpha_s
        double inter_beta_s_per_byte
    void pycoll_default_cost_model(pycoll_cost_model_t *model)
    void pycoll_all_reduce_cost_terms(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm, int32_t size,
                                      int64_t nbytes, double *latency_s, double *bandwidth_s)
    double pycoll_predict_all_reduce_s(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm,
                                       int32_t size, int64_t nbytes)
    pycoll_algorithm_t pycoll_choose_all_reduce(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes)
    double pycoll_predict_all_reduce_hosts_s(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm,
                                             int32_t size, int32_t hosts, int32_t max_local, int64_t nbytes)
    pycoll_algorithm_t pycoll_choose_all_reduce_hosts(const pycoll_cost_model_t *model, int32_t size, int32_t hosts,
                                                      int32_t max_local, int64_t nbytes, pycoll_algorithm_t native)
    ctypedef struct pycoll_algorithm_info_t:
        int32_t id
        const char *name
    const pycoll_algorithm_info_t *pycoll_coll_algorithms(pycoll_coll_t coll, int32_t *count)
    pycoll_algorithm_t pycoll_decide_algorithm(const pycoll_cost_model_t *model, pycoll_coll_t coll,
                                               pycoll_algorithm_t requested, int32_t size, int64_t nbytes)

    # comm.h
    ctypedef struct pycoll_comm_t:
        pass
    enum: PYCOLL_COMM_OPTIONS_VERSION
    enum: PYCOLL_DEFAULT_SEGMENT_BYTES
    ctypedef struct pycoll_comm_options_t:
        uint32_t version
        double timeout_s
        int64_t segment_bytes
        int64_t spin_ns
    void pycoll_comm_options_init(pycoll_comm_options_t *options)
    pycoll_status_t pycoll_comm_create(pycoll_comm_t **comm, pycoll_p2p_t *p2p, const pycoll_comm_options_t *options,
                                       char *error, size_t error_len)
    pycoll_status_t pycoll_comm_set_options(pycoll_comm_t *comm, const pycoll_comm_options_t *options)
    void pycoll_comm_get_options(const pycoll_comm_t *comm, pycoll_comm_options_t *options)
    pycoll_status_t pycoll_comm_finalize(pycoll_comm_t *comm, double linger_s)
    void pycoll_comm_destroy(pycoll_comm_t *comm)
    uint64_t pycoll_comm_id(const pycoll_comm_t *comm)
    int32_t pycoll_comm_rank(const pycoll_comm_t *comm)
    int32_t pycoll_comm_size(const pycoll_comm_t *comm)
    void pycoll_comm_set_timeout(pycoll_comm_t *comm, double timeout_s)
    void pycoll_comm_set_cost_model(pycoll_comm_t *comm, const pycoll_cost_model_t *model)
    pycoll_status_t pycoll_comm_set_hosts(pycoll_comm_t *comm, const int32_t *host_of)
    const char *pycoll_comm_error(const pycoll_comm_t *comm)
    pycoll_status_t pycoll_comm_dump_trace(pycoll_comm_t *comm, const char *path) nogil
    pycoll_status_t pycoll_comm_trace_path(const pycoll_comm_t *comm, const char *path, char *out, int32_t len)
    int64_t pycoll_comm_trace_json(pycoll_comm_t *comm, char *buf, int64_t len)
    int32_t pycoll_comm_failed_rank(const pycoll_comm_t *comm)
    pycoll_algorithm_t pycoll_comm_last_algorithm(const pycoll_comm_t *comm)
    void pycoll_set_thread_tag(uint32_t tag) nogil
    void pycoll_comm_set_internal(pycoll_comm_t *comm, int internal)
    uint32_t pycoll_thread_tag(int *is_set) nogil
    void pycoll_set_thread_name(const char *name) nogil
    # The per-collective ABI wrappers: the simulator (sim.pyx) and the vendor family (vendor.pyx) call these;
    # NativeComm builds one pycoll_call_t (call.h below).
    pycoll_status_t pycoll_comm_all_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count,
                                           pycoll_dtype_t dtype, pycoll_op_t op, pycoll_algorithm_t algorithm,
                                           pycoll_accuracy_t accuracy)
    pycoll_status_t pycoll_comm_reduce_scatter(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                               int64_t recv_count, pycoll_dtype_t dtype, pycoll_op_t op,
                                               pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy)
    pycoll_status_t pycoll_comm_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count,
                                       pycoll_dtype_t dtype, pycoll_op_t op, int32_t root,
                                       pycoll_accuracy_t accuracy)
    pycoll_status_t pycoll_comm_all_gather(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           int64_t send_count, pycoll_dtype_t dtype)
    pycoll_status_t pycoll_comm_broadcast(pycoll_comm_t *comm, void *buf, int64_t count, pycoll_dtype_t dtype,
                                          int32_t root)
    pycoll_status_t pycoll_comm_barrier(pycoll_comm_t *comm)
    pycoll_status_t pycoll_comm_all_to_all(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count,
                                           pycoll_dtype_t dtype)
    pycoll_status_t pycoll_comm_gather(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count,
                                       pycoll_dtype_t dtype, int32_t root)
    pycoll_status_t pycoll_comm_scatter(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count,
                                        pycoll_dtype_t dtype, int32_t root)
    pycoll_status_t pycoll_comm_all_gather_v(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                             const int64_t *counts, pycoll_dtype_t dtype)
    pycoll_status_t pycoll_comm_reduce_scatter_v(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                 const int64_t *counts, pycoll_dtype_t dtype, pycoll_op_t op,
                                                 pycoll_accuracy_t accuracy)
    int32_t PYCOLL_SPLIT_NONE
    pycoll_status_t pycoll_comm_split(pycoll_comm_t *comm, int32_t color, int32_t key, pycoll_comm_t **child)
    int32_t pycoll_comm_parent_rank(const pycoll_comm_t *comm, int32_t rank)
    pycoll_status_t pycoll_comm_revoke(pycoll_comm_t *comm)
    pycoll_status_t pycoll_comm_agree(pycoll_comm_t *comm, int64_t *flag, double timeout_s)
    pycoll_status_t pycoll_comm_shrink(pycoll_comm_t *comm, const int32_t *exclude, int32_t n_exclude,
                                       double timeout_s, pycoll_comm_t **out)
    int32_t pycoll_comm_failed_ranks(const pycoll_comm_t *comm, int32_t *ranks, int32_t max)
    ctypedef struct pycoll_work_t:
        pass
    int pycoll_work_wait(pycoll_work_t *work, double timeout_s)
    int pycoll_work_test(pycoll_work_t *work)
    pycoll_status_t pycoll_work_status(pycoll_work_t *work)
    const char *pycoll_work_error(pycoll_work_t *work)
    int32_t pycoll_work_failed_rank(pycoll_work_t *work)
    pycoll_algorithm_t pycoll_work_algorithm(pycoll_work_t *work)
    void pycoll_work_free(pycoll_work_t *work)

    # call.h: one call, blocking (work NULL) or not
    enum: PYCOLL_CALL_VERSION
    ctypedef struct pycoll_call_t:
        uint32_t version
        uint32_t size
        pycoll_coll_t collective
        pycoll_dtype_t dtype
        const void *sendbuf
        void *recvbuf
        int64_t send_count
        int64_t recv_count
        const int64_t *counts
        pycoll_op_t op
        pycoll_algorithm_t algorithm
        pycoll_accuracy_t accuracy
        int32_t root
        int32_t dest
        int32_t source
        uint32_t tag
    void pycoll_call_init(pycoll_call_t *call, pycoll_coll_t collective)
    pycoll_status_t pycoll_comm_run(pycoll_comm_t *comm, const pycoll_call_t *call, pycoll_work_t **work)
    pycoll_status_t pycoll_call_check(const pycoll_call_t *call, int32_t rank, int32_t size, char *why,
                                      size_t why_len)

    # transports.h
    pycoll_p2p_t *pycoll_tcp_transport_create(int32_t rank, int32_t size, const int *fds, char *error,
                                              size_t error_len)
    int64_t pycoll_shm_segment_bytes(int32_t size, int64_t ring_bytes)
    pycoll_p2p_t *pycoll_shm_transport_create(int32_t rank, int32_t size, const int *segment_fds,
                                              const int32_t *pids, int64_t ring_bytes, char *error,
                                              size_t error_len)
    pycoll_p2p_t *pycoll_routed_transport_create(int32_t n_children, pycoll_p2p_t *const *children,
                                                 const int32_t *route, char *error, size_t error_len)
    ctypedef pycoll_status_t (*pycoll_sim_rank_fn)(pycoll_p2p_t *p2p, void *arg, int32_t rank)
    pycoll_status_t pycoll_sim_run(int32_t size, double timeout_s, pycoll_sim_rank_fn fn, void *arg,
                                   char *error, size_t error_len)

cdef extern from "pycoll/vendor.h" nogil:
    # One vendor family (NCCL, HCCL, ...): an opaque handle per vendor, read only through these calls.
    enum:
        PYCOLL_VENDOR_MAX_ID_BYTES
    ctypedef struct pycoll_vendor_t:
        pass
    ctypedef struct pycoll_vendor_comm_t:
        pass
    pycoll_vendor_t *pycoll_vendor_find(const char *name)
    pycoll_status_t pycoll_vendor_load(pycoll_vendor_t *vendor, int32_t library, const char *path,
                                       char *error, size_t error_len)
    int32_t pycoll_vendor_library_version(const pycoll_vendor_t *vendor)
    pycoll_status_t pycoll_vendor_unique_id(const pycoll_vendor_t *vendor, void *id, int64_t id_len, char *error,
                                            size_t error_len)
    pycoll_vendor_comm_t *pycoll_vendor_comm_create(const pycoll_vendor_t *vendor, const void *id, int64_t id_len,
                                                    int32_t rank, int32_t size, double timeout_s,
                                                    pycoll_status_t *status, char *error, size_t error_len)
    void pycoll_vendor_comm_destroy(pycoll_vendor_comm_t *comm)
    const char *pycoll_vendor_comm_error(const pycoll_vendor_comm_t *comm)
    int32_t pycoll_vendor_comm_device(const pycoll_vendor_comm_t *comm)
    void pycoll_vendor_comm_set_timeout(pycoll_vendor_comm_t *comm, double timeout_s)
    void pycoll_vendor_comm_request_abort(pycoll_vendor_comm_t *comm, int32_t failed_rank, const char *reason)
    pycoll_status_t pycoll_vendor_all_reduce(pycoll_vendor_comm_t *comm, const void *sendbuf, void *recvbuf,
                                             int64_t count, pycoll_dtype_t dtype, pycoll_op_t op, void *stream)
    pycoll_status_t pycoll_vendor_reduce_scatter(pycoll_vendor_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                 int64_t recv_count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                 void *stream)
    pycoll_status_t pycoll_vendor_all_gather(pycoll_vendor_comm_t *comm, const void *sendbuf, void *recvbuf,
                                             int64_t send_count, pycoll_dtype_t dtype, void *stream)
    pycoll_status_t pycoll_vendor_broadcast(pycoll_vendor_comm_t *comm, void *buf, int64_t count,
                                            pycoll_dtype_t dtype, int32_t root, void *stream)
    pycoll_status_t pycoll_vendor_reduce(pycoll_vendor_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         int64_t count, pycoll_dtype_t dtype, pycoll_op_t op, int32_t root,
                                         void *stream)
    pycoll_status_t pycoll_vendor_barrier(pycoll_vendor_comm_t *comm, void *stream)
    pycoll_status_t pycoll_cuda_kernels_load(int32_t library, const char *path, char *error, size_t error_len)
    int64_t pycoll_cuda_kernel_source(pycoll_dtype_t dtype, char *out, size_t len)
    int32_t PYCOLL_CUDA_COMPILE_PTX
    pycoll_status_t pycoll_cuda_kernels_compile(pycoll_dtype_t dtype, int32_t sm, int32_t flags, void **image,
                                                int64_t *size, char *target, size_t target_len, char *error,
                                                size_t error_len)
    void pycoll_cuda_kernels_free(void *image)
    pycoll_status_t pycoll_cuda_pointer_device(const void *ptr, int32_t *device, char *error, size_t error_len)
    pycoll_status_t pycoll_cuda_kernels_scale(void *buf, int64_t count, pycoll_dtype_t dtype, int64_t divisor,
                                              void *stream, char *error, size_t error_len)
    pycoll_p2p_t *pycoll_vendor_comm_p2p(pycoll_vendor_comm_t *comm, void *stream, const void *buf)
    pycoll_status_t pycoll_vendor_comm_sync(pycoll_vendor_comm_t *comm, void *stream)
    pycoll_status_t pycoll_vendor_send_recv(pycoll_vendor_comm_t *comm, const void *sendbuf, int64_t send_count,
                                            int32_t send_peer, void *recvbuf, int64_t recv_count,
                                            int32_t recv_peer, pycoll_dtype_t dtype, void *stream)

cdef extern from "pycoll/bootstrap.h" nogil:
    enum: PYCOLL_UNIQUE_ID_BYTES
    enum: PYCOLL_MAX_WORLD_SIZE
    ctypedef struct pycoll_unique_id_t:
        char internal[PYCOLL_UNIQUE_ID_BYTES]
    ctypedef enum pycoll_transport_choice_t:
        PYCOLL_TRANSPORT_AUTO, PYCOLL_TRANSPORT_TCP, PYCOLL_TRANSPORT_SHM
    ctypedef struct pycoll_init_config_t:
        uint32_t version
        uint32_t transport
        double timeout_s
        const char *ifname
        int64_t shm_ring_bytes
        int64_t segment_bytes
        int64_t spin_ns
        int (*check_interrupt)(void *ctx) noexcept nogil
        void *interrupt_ctx
        int (*should_stop)(void *ctx) noexcept nogil
        void *stop_ctx
    pycoll_status_t pycoll_get_unique_id(pycoll_unique_id_t *id)
    pycoll_status_t pycoll_unique_id_create(pycoll_unique_id_t *id, const char *ifname, const char *toward)
    pycoll_status_t pycoll_unique_id_address(const pycoll_unique_id_t *id, char *text, size_t len)
    const char *pycoll_bootstrap_error()
    void pycoll_init_config_init(pycoll_init_config_t *config)
    pycoll_status_t pycoll_comm_init_rank_config(pycoll_comm_t **comm, int32_t world_size,
                                                 const pycoll_unique_id_t *id, int32_t rank,
                                                 const pycoll_init_config_t *config)
    pycoll_status_t pycoll_comm_grow_config(pycoll_comm_t *comm, int32_t world_size,
                                            const pycoll_unique_id_t *id, const pycoll_init_config_t *config,
                                            pycoll_comm_t **out)
    void pycoll_host_identity(char *text, size_t len)
    void pycoll_test_force_segment_draws(const char *suffix, int32_t n)
    const char *pycoll_comm_transport(const pycoll_comm_t *comm)
    pycoll_status_t pycoll_comm_get_hosts(const pycoll_comm_t *comm, int32_t *host_of)

cdef extern from "pycoll/settings.h" nogil:
    ctypedef enum pycoll_setting_type_t:
        PYCOLL_SETTING_TEXT, PYCOLL_SETTING_PATH, PYCOLL_SETTING_INT, PYCOLL_SETTING_FLOAT, PYCOLL_SETTING_FLAG,
        PYCOLL_SETTING_CHOICE
    ctypedef struct pycoll_setting_t:
        const char *name
        pycoll_setting_type_t type
        const char *default_value
        const char *choices
        double min
        int32_t power_of_two
        const char *doc
    const pycoll_setting_t *pycoll_settings(int32_t *count)

# The dtype table and settings validation (types.h, settings.h): appended as one block.
cdef extern from "pycoll/types.h" nogil:
    enum:
        PYCOLL_DTYPE_INTEGER, PYCOLL_DTYPE_FLOAT, PYCOLL_DTYPE_COMPLEX, PYCOLL_DTYPE_COMPENSATED,
        PYCOLL_DTYPE_SIGNED
    ctypedef struct pycoll_dtype_info_t:
        pycoll_dtype_t id
        const char *name
        int32_t size
        uint32_t flags
        uint32_t ops
        pycoll_dtype_t accumulator
        int32_t precision
    const pycoll_dtype_info_t *pycoll_dtype_table(int32_t *count)

cdef extern from "pycoll/settings.h" nogil:
    ctypedef struct pycoll_setting_value_t:
        int64_t integer
        double number
    pycoll_status_t pycoll_setting_parse(const pycoll_setting_t *setting, const char *text,
                                         pycoll_setting_value_t *value, char *error, size_t error_len)
    void pycoll_setting_expects(const pycoll_setting_t *setting, char *out, size_t len)
    pycoll_status_t pycoll_settings_check(char *error, size_t error_len)
