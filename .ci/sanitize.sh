#!/usr/bin/env bash
# Build pycoll with AddressSanitizer + UndefinedBehaviorSanitizer (PYCOLL_SANITIZE=ON) into its own venv and
# build folder, then run the kernel and algorithm tests under it. Exits non-zero on any sanitizer report (ASan aborts the
# process; UBSan is built with -fno-sanitize-recover) or test failure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-asan"

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q "scikit-build-core>=0.10" "cython>=3.0" numpy pytest pytest-timeout hypothesis ml_dtypes
# The real NVRTC, which compiles pycoll's CUDA kernels in the CUDA tests below (they skip without it).
"$venv/bin/pip" install -q nvidia-cuda-nvrtc-cu12 || echo "sanitize.sh: NVRTC not installable; the NVRTC tests skip"
"$venv/bin/pip" install --no-build-isolation -q -Ccmake.define.PYCOLL_SANITIZE=ON -Cbuild-dir=build/asan "$root"

# Python is not instrumented, so the ASan runtime must be loaded first; Python leaks by design.
libasan="$(gcc -print-file-name=libasan.so)"
[ -f "$libasan" ] || { echo "sanitize.sh: libasan.so not found (gcc -print-file-name)" >&2; exit 2; }
export LD_PRELOAD="$libasan"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:exitcode=86"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

# From tests/, so the sanitized install is imported rather than the source folder.
cd "$root/tests"
# The kernels, the algorithms over the in-process transport (threads: every schedule, every dtype; the
# hierarchical one over simulated hosts, through its group views), the TCP and shared-memory transports, alone
# and together (per-pair transports on faked hosts), and the shared-memory collectives with real processes
# (faults, mismatches, the checked close), the progress thread of non-blocking collectives
# (native/comm/progress.c), subgroups and point-to-point messages with real processes, and the vendor plugins'
# C code against the strict fake libraries, and pycoll.jax's XLA FFI handlers on hand-built call frames
# (jaxlib itself aborts at import under the ASan runtime, so the jitted tests skip here), and the C bootstrap
# (native/bootstrap: registration, floods, forged secrets, failures every rank hears of), shared-memory faults
# (peers that leave quietly, corrupt and fuzzed shared fields: the checks must hold without a stray access), the
# shared-memory single copies (their results, fallback, and addresses a rank does not have), and
# pycoll's CUDA kernels' compile path (the real NVRTC), context handling and device scratch (a fake CUDA driver);
# and close() bounded while a collective is in flight and no other rank closes;
# and the C ABI's start_ calls and messages from a C program (tests/c/entry_points_test.c);
# and threads taking turns, overlapping buffers, point-to-point cycles; and what a peer reports (its own failure,
# forged aborts and state frames naming ranks outside the job); a fork()ed child's calls refused before they touch
# anything, segment names drawn again when taken, a duplicate rank and another job's id refused at the listener,
# compensated sums of special values across every algorithm, complex data over every algorithm, and revoke, agree
# and shrink after killed ranks (from Python, also across faked hosts over shm+tcp, and from a C program), a job
# grown with new processes, islands shrunk through the fake NCCL's shrink, the vendor streams and events, the
# vendor exchange of gather, scatter and all-to-all, the watchdog's device, the vendor schedules' steps in stream
# order, and the waits that sleep on the TCP transport's events.
"$venv/bin/python" -m pytest -q -p no:cacheprovider \
  kernels/test_kernels*.py \
  algorithms/test_algorithms_sim.py algorithms/test_hierarchical_sim.py algorithms/test_collectives_more.py \
  algorithms/test_overlap.py algorithms/test_compensated_specials.py algorithms/test_complex_collectives.py \
  transports/test_comm_tcp.py transports/test_comm_shm.py transports/test_comm_routed.py \
  transports/test_routed_transport.py transports/test_shm_collectives.py transports/test_shm_faults.py \
  transports/test_shm_single_copy.py transports/test_hosts.py transports/test_bootstrap_segments.py \
  transports/test_segment_names.py transports/test_idle_wait_events.py \
  communicator/test_async.py communicator/test_work.py communicator/test_buckets.py communicator/test_split.py \
  communicator/test_point_to_point.py communicator/test_close.py communicator/test_threads.py \
  communicator/test_cycles.py communicator/test_peer_reports.py communicator/test_fork.py \
  communicator/test_init_conflicts.py communicator/test_elastic.py communicator/test_elastic_routed.py \
  communicator/test_c_fault_tolerance.py communicator/test_grow.py \
  communicator/test_c_entry_points.py communicator/test_flight_recorder.py communicator/test_c_trace.py \
  vendors/test_vendor_strict.py vendors/test_cuda_nvrtc.py vendors/test_cuda_context.py \
  vendors/test_cuda_devices.py vendors/test_vendor_p2p_groups.py vendors/test_vendor_async.py vendors/test_vendor_streams.py \
  vendors/test_hccl_p2p.py vendors/test_cuda_scratch.py vendors/test_islands_shrink.py \
  vendors/test_vendor_exchange.py vendors/test_vendor_thread_device.py vendors/test_vendor_stream_steps.py \
  integrations/test_jax_ffi.py \
  rendezvous/test_bootstrap.py \
  "$@"
