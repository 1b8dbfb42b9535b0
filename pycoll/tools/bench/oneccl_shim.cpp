// A C interface over oneCCL's C++ API, so that `pycoll bench --compare oneccl` drives oneCCL from Python
// (ctypes) through the very same sweep code as every other peer. It is no part of pycoll's build: the bench
// compiles it at run time against the headers and library of the environment PYCOLL_BENCH_ONECCL names
// (pycoll/tools/bench/oneccl.py), into a cache directory.
//
// Every function returns 0, or -1 with the message of oneCCL's exception for oneccl_shim_error().
// dtype and op are the indices of pycoll/tools/bench/oneccl.py's DTYPES and OPS, in the order of the tables below.

#include <oneapi/ccl.hpp>

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

const ccl::datatype kDtypes[] = {ccl::datatype::int8,    ccl::datatype::uint8,   ccl::datatype::int32,
                                 ccl::datatype::int64,   ccl::datatype::float16, ccl::datatype::bfloat16,
                                 ccl::datatype::float32, ccl::datatype::float64};
const ccl::reduction kOps[] = {ccl::reduction::sum, ccl::reduction::prod, ccl::reduction::min,
                               ccl::reduction::max};

std::string last_error;
std::shared_ptr<ccl::kvs> kvs;
std::unique_ptr<ccl::communicator> comm;

template <class F>
int guarded(F&& call) {
    try {
        call();
        return 0;
    } catch (const std::exception& e) {
        last_error = e.what();
        return -1;
    }
}

}  // namespace

extern "C" {

const char* oneccl_shim_error(void) { return last_error.c_str(); }

// Rank 0: creates the key-value store the ranks meet through, and writes its address (256 bytes) to address.
int oneccl_shim_main_kvs(char* address, size_t length) {
    return guarded([&] {
        if (length != ccl::kvs::address_max_size) throw std::invalid_argument("address: wrong length");
        ccl::init();
        kvs = ccl::create_main_kvs();
        auto a = kvs->get_address();
        std::memcpy(address, a.data(), a.size());
    });
}

// Every rank: the communicator of size ranks, through rank 0's store at address (rank 0 passes its own).
int oneccl_shim_init(int rank, int size, const char* address, size_t length) {
    return guarded([&] {
        if (length != ccl::kvs::address_max_size) throw std::invalid_argument("address: wrong length");
        if (!kvs) {
            ccl::init();
            ccl::kvs::address_type a;
            std::memcpy(a.data(), address, a.size());
            kvs = ccl::create_kvs(a);
        }
        comm = std::make_unique<ccl::communicator>(ccl::create_communicator(size, rank, kvs));
    });
}

int oneccl_shim_finalize(void) {
    return guarded([] {
        comm.reset();
        kvs.reset();
    });
}

int oneccl_shim_allreduce(const void* send, void* recv, size_t count, int dtype, int op) {
    return guarded([&] { ccl::allreduce(send, recv, count, kDtypes[dtype], kOps[op], *comm).wait(); });
}

int oneccl_shim_reduce_scatter(const void* send, void* recv, size_t recv_count, int dtype, int op) {
    return guarded([&] { ccl::reduce_scatter(send, recv, recv_count, kDtypes[dtype], kOps[op], *comm).wait(); });
}

int oneccl_shim_allgather(const void* send, void* recv, size_t send_count, int dtype) {
    return guarded([&] { ccl::allgather(send, recv, send_count, kDtypes[dtype], *comm).wait(); });
}

int oneccl_shim_broadcast(void* buf, size_t count, int dtype, int root) {
    return guarded([&] { ccl::broadcast(buf, count, kDtypes[dtype], root, *comm).wait(); });
}

int oneccl_shim_reduce(const void* send, void* recv, size_t count, int dtype, int op, int root) {
    return guarded([&] { ccl::reduce(send, recv, count, kDtypes[dtype], kOps[op], root, *comm).wait(); });
}

int oneccl_shim_alltoall(const void* send, void* recv, size_t count, int dtype) {
    return guarded([&] { ccl::alltoall(send, recv, count, kDtypes[dtype], *comm).wait(); });
}

int oneccl_shim_barrier(void) {
    return guarded([] { ccl::barrier(*comm).wait(); });
}

}  // extern "C"
