"""pycoll's own declarations of NVIDIA's APIs (backends/nccl/nccl_api.h, backends/cuda/cuda_api.h, the symbol
tables of nccl_vendor.c) checked at compile time against the real headers from the package index: nccl.h
(nvidia-nccl-cu12), cuda.h and cuda_runtime_api.h (nvidia-cuda-runtime-cu12, with the crt/ headers they include
from nvidia-cuda-nvcc-cu12), nvrtc.h (nvidia-cuda-nvrtc-cu12).

- values and layout (a C11 file, compiled and run): every enumerator pycoll declares equals the real one, the
  enums have the real size, pycoll's ncclConfig_t head has the real offsets and sizes, and its initializer holds
  what NCCL_CONFIG_INITIALIZER holds; the result names are in the real order; cudaPointerAttributes' head and
  the CUDA constants match.
- signatures (C++17, static_assert): for every symbol pycoll dlsyms, the real function's type and the type of
  the pointer pycoll calls it through agree parameter by parameter in ABI class (integer or enum of the same
  size, pointer to the same kind of pointee, struct by value of the same size). C's own type compatibility
  cannot serve: pycoll's vendor struct takes enums as int, which C calls a different type, though the ABI
  passes them alike.
Each file is generated from pycoll's sources, so a declaration added there is checked without editing this test.
"""

import re
import subprocess

import pytest
from nvidia_wheels import compiler, wheel_dir
from repo_paths import ROOT

NCCL_API = ROOT / "backends" / "nccl" / "nccl_api.h"
NCCL_VENDOR = ROOT / "backends" / "nccl" / "nccl_vendor.c"
VENDOR_COMMON = ROOT / "backends" / "common" / "vendor_common.h"
VENDOR_OPS = ROOT / "backends" / "common" / "vendor_ops.h"
CUDA_API = ROOT / "backends" / "cuda" / "cuda_api.h"


def _strip_comments(text):
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _nccl_api():
    return _strip_comments(NCCL_API.read_text())


def _renamed_nccl_api():
    """nccl_api.h included beside the real nccl.h: each of its nccl* names becomes pycoll_check_<name>."""
    names = sorted(set(re.findall(r"\bnccl\w*", _nccl_api())))
    lines = [f"#define {n} pycoll_check_{n}" for n in names]
    lines.append(f'#include "{NCCL_API}"')
    lines += [f"#undef {n}" for n in names]
    return "\n".join(lines)


def _enums():
    """{enum type: [enumerator names]} of nccl_api.h."""
    out = {}
    for body, name in re.findall(r"typedef enum\s*\{(.*?)\}\s*(\w+);", _nccl_api(), re.S):
        out[name] = [item.split("=")[0].strip() for item in body.split(",") if item.strip()]
    return out


def _config_members():
    body = re.search(r"typedef struct\s*\{([^{}]*)\}\s*pycoll_nccl_config_t;", _nccl_api()).group(1)
    return re.findall(r"(\w+)\s*;", body)


def _symbol_slots(table):
    """(symbol, slot) of one symbol table of nccl_vendor.c, VENDOR_SHARED_SYMBOLS expanded."""
    source = _strip_comments(NCCL_VENDOR.read_text())
    body = re.search(rf"{table}\[\]\s*=\s*\{{(.*?)\n\}};", source, re.S).group(1)
    pairs = re.findall(r'"(\w+)",\s*VENDOR_SLOT\(([\w.]+)\)', body)
    shared = re.search(r'VENDOR_SHARED_SYMBOLS\("(\w+)",\s*V,\s*(\w+)\)', body)
    if shared:
        prefix, broadcast_slot = shared.groups()
        # VENDOR_SHARED_SYMBOLS(prefix, V, broadcast_slot) names some symbols itself and passes its own slots
        # (destroy_slot: V.destroy) to VENDOR_COLLECTIVE_SYMBOLS for the rest.
        common = _strip_comments(VENDOR_COMMON.read_text())
        macros = "".join(re.search(rf"#define {name}\(.*?\n\n", common, re.S).group(0)
                         for name in ("VENDOR_SHARED_SYMBOLS", "VENDOR_COLLECTIVE_SYMBOLS"))
        passed = re.search(r"VENDOR_COLLECTIVE_SYMBOLS\(prefix,\s*V,\s*([\w.]+),\s*broadcast_slot\)", macros)
        slots = {"broadcast_slot": broadcast_slot, "destroy_slot": passed.group(1) if passed else "V.destroy"}
        for name, slot in re.findall(r'prefix "(\w+)",\s*VENDOR_SLOT\(([\w.]+)\)', macros):
            pairs.append((prefix + name, slots.get(slot, slot)))
    assert pairs, table
    return pairs


def _slot_type(slot):
    """The C++ type of the pointer pycoll calls a symbol through."""
    if slot.startswith("V."):
        return f"decltype(pycoll_vendor_t::{slot[2:]})"
    return f"pycoll_nccl_fn_{slot}"


@pytest.fixture(scope="module")
def includes(tmp_path_factory):
    # nccl.h includes cuda_fp16.h, cuda_bf16.h and (C++) cuda_fp8.h, for nothing it declares; they need CCCL's
    # headers besides, so empty ones stand in, found first.
    shim = tmp_path_factory.mktemp("shim")
    for name in ("cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"):
        (shim / name).write_text("/* empty: nothing pycoll checks is declared here */\n")
    nccl = wheel_dir("nccl", "include")
    runtime = wheel_dir("runtime", "include")
    nvrtc = wheel_dir("nvrtc", "include")
    crt = wheel_dir("nvcc", "include")
    return ["-I", str(shim), "-I", str(nccl), "-I", str(runtime), "-I", str(nvrtc), "-I", str(crt), "-I",
            str(ROOT / "native" / "include")]


def _build(tmp_path, name, text, includes, language):
    src = tmp_path / name
    src.write_text(text)
    out = tmp_path / (name + ".out")
    std = ["-std=c11"] if language == "c" else ["-std=c++17"]
    done = subprocess.run([compiler(language), *std, "-Wall", "-Wextra", "-Werror", "-Wno-unused-local-typedefs",
                           *includes, "-o", str(out), str(src)], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, f"{name} does not compile against the real headers:\n{done.stderr[-6000:]}"
    return out


def test_nccl_values_layout_and_initializer_match_the_real_nccl_h(tmp_path, includes):
    checks = []
    for enum, names in _enums().items():
        checks.append(f'_Static_assert(sizeof(pycoll_check_{enum}) == sizeof({enum}), "sizeof {enum}");')
        checks += [f'_Static_assert((int)pycoll_check_{n} == (int){n}, "{n}: pycoll and nccl.h differ");'
                   for n in names]
    checks.append('_Static_assert(sizeof(pycoll_check_ncclUniqueId) == sizeof(ncclUniqueId), "ncclUniqueId");')
    checks.append('_Static_assert(sizeof(pycoll_check_ncclComm_t) == sizeof(ncclComm_t), "ncclComm_t");')
    members = _config_members()
    for m in members:
        checks.append(f"_Static_assert(offsetof(pycoll_nccl_config_t, {m}) == offsetof(ncclConfig_t, {m}), "
                      f'"ncclConfig_t.{m}: offset");')
        checks.append(f"_Static_assert(sizeof(((pycoll_nccl_config_t *)0)->{m}) == "
                      f'sizeof(((ncclConfig_t *)0)->{m}), "ncclConfig_t.{m}: size");')
    checks += [
        '_Static_assert(sizeof(pycoll_nccl_config_t) <= sizeof(ncclConfig_t), "config head");',
        '_Static_assert(PYCOLL_NCCL_CONFIG_MAGIC == NCCL_API_MAGIC, "magic");',
        '_Static_assert(PYCOLL_NCCL_CONFIG_UNDEF == NCCL_CONFIG_UNDEF_INT, "undef");',
        '_Static_assert(PYCOLL_NCCL_CONFIG_VERSION >= NCCL_VERSION(2, 14, 0), "a config without blocking");',
        '_Static_assert(PYCOLL_NCCL_CONFIG_VERSION <= NCCL_VERSION_CODE, "a config newer than this NCCL");',
        '_Static_assert(PYCOLL_CUDA_SUCCESS == cudaSuccess, "cudaSuccess");',
        '_Static_assert(PYCOLL_CUDA_ERROR_NOT_READY == cudaErrorNotReady, "cudaErrorNotReady");',
        '_Static_assert(PYCOLL_CUDA_MEMORY_TYPE_DEVICE == cudaMemoryTypeDevice, "cudaMemoryTypeDevice");',
        '_Static_assert(sizeof(struct cudaPointerAttributes) <= sizeof(pycoll_cuda_pointer_attributes_t), '
        '"cudaPointerAttributes outgrew pycoll\'s room");',
    ]
    for mine, real in (("type", "type"), ("device", "device"), ("device_pointer", "devicePointer"),
                       ("host_pointer", "hostPointer")):
        checks.append(f"_Static_assert(offsetof(pycoll_cuda_pointer_attributes_t, head.{mine}) == "
                      f'offsetof(struct cudaPointerAttributes, {real}), "cudaPointerAttributes.{real}");')
    source = _strip_comments(NCCL_VENDOR.read_text())
    names = re.search(r"result_names\[\]\s*=\s*\{(.*?)\};", source, re.S).group(1)
    for i, n in enumerate(re.findall(r'"(\w+)"', names)):
        checks.append(f'_Static_assert({n} == {i}, "result_names[{i}] is {n}");')
    # NCCL_CONFIG_INITIALIZER's values for every member of the head, except the size (pycoll's own) and the
    # version (the oldest pycoll needs), compared at run time (C cannot compare structs at compile time).
    runtime = [f'    if (memcmp(&mine.{m}, &real.{m}, sizeof mine.{m})) {{ puts("initializer: {m}"); bad = 1; }}'
               for m in members if m not in ("size", "version")]
    runtime.append('    if (mine.size != sizeof mine) { puts("initializer: size"); bad = 1; }')
    text = "\n".join([
        "#include <stddef.h>", "#include <stdio.h>", "#include <string.h>", "#include <nccl.h>",
        _renamed_nccl_api(), *checks,
        "int main(void)", "{", "    pycoll_nccl_config_t mine = PYCOLL_NCCL_CONFIG_INITIALIZER;",
        "    ncclConfig_t real = NCCL_CONFIG_INITIALIZER;", "    int bad = 0;", *runtime, "    return bad;", "}", ""])
    out = _build(tmp_path, "nccl_values.c", text, includes, "c")
    done = subprocess.run([str(out)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout


# Each type to its ABI class: integers and enums by size, floats by size, structs and unions passed by value by
# size, pointers by what they point to (any struct, union or void: one opaque kind).
ABI_CLASSES = r"""
#include <cstddef>
#include <tuple>
#include <type_traits>
struct opaque {};
template <std::size_t N> struct integer {};
template <std::size_t N> struct floating {};
template <std::size_t N> struct by_value {};
template <class T> struct pointer {};
template <class T, class = void> struct abi { using type = by_value<sizeof(T)>; };
template <> struct abi<void> { using type = void; };
template <class T> struct abi<T, std::enable_if_t<std::is_integral<T>::value || std::is_enum<T>::value>> {
    using type = integer<sizeof(T)>; };
template <class T> struct abi<T, std::enable_if_t<std::is_floating_point<T>::value>> {
    using type = floating<sizeof(T)>; };
template <class T, class = void> struct pointee { using type = typename abi<T>::type; };
template <class T> struct pointee<T, std::enable_if_t<std::is_class<T>::value || std::is_union<T>::value ||
                                                      std::is_void<T>::value>> { using type = opaque; };
template <class T> struct abi<T *, void> { using type = pointer<typename pointee<std::remove_cv_t<T>>::type>; };
template <class F> struct signature;
template <class R, class... A> struct signature<R (*)(A...)> {
    using type = std::tuple<typename abi<R>::type, typename abi<A>::type...>; };
template <class Real, class Mine> constexpr bool same_abi() {
    return std::is_same<typename signature<Real>::type, typename signature<Mine>::type>::value; }
#define SAME_ABI(symbol, mine) static_assert(same_abi<decltype(&symbol), mine>(), #symbol ": pycoll's type differs")
"""


def test_nccl_signatures_match_the_real_nccl_h(tmp_path, includes):
    checks = [f"SAME_ABI({symbol}, {_slot_type(slot)});" for symbol, slot in _symbol_slots("nccl_symbols")]
    assert any("ncclCommInitRankConfig" in c for c in checks) and any("ncclAllReduce" in c for c in checks)
    text = "\n".join([ABI_CLASSES, "#include <nccl.h>", f'#include "{VENDOR_OPS}"', _renamed_nccl_api(),
                      *checks, "int main() { return 0; }", ""])
    _build(tmp_path, "nccl_signatures.cc", text, includes, "c++")


def _optional_nccl_symbols():
    """(symbol, slot) of the NCCL symbols nccl_vendor.c looks up after loading (ncclCommShrink, ...)."""
    source = _strip_comments(NCCL_VENDOR.read_text())
    return re.findall(r'&(\w+) = vendor_optional_symbol\(&pycoll_nccl_vendor\.libraries\[0\], "(\w+)"\)', source)


def test_nccl_fault_tolerance_declarations_match_the_real_nccl_h(tmp_path, includes):
    """ncclCommShrink, ncclCommRevoke and ncclCommGrow, which pycoll looks up after loading, as pycoll calls them,
    and the flags it passes, against the real nccl.h."""
    found = {symbol: slot for slot, symbol in _optional_nccl_symbols()}
    assert set(found) == {"ncclCommShrink", "ncclCommRevoke", "ncclCommGrow"}, found
    checks = [f"SAME_ABI({symbol}, {_slot_type(slot)});" for symbol, slot in found.items()]
    checks += [f'static_assert(PYCOLL_{name} == {name}, "{name}");'
               for name in ("NCCL_SHRINK_DEFAULT", "NCCL_SHRINK_ABORT", "NCCL_REVOKE_DEFAULT")]
    text = "\n".join([ABI_CLASSES, "#include <nccl.h>", f'#include "{VENDOR_OPS}"', _renamed_nccl_api(),
                      *checks, "int main() { return 0; }", ""])
    _build(tmp_path, "nccl_fault_tolerance.cc", text, includes, "c++")


def test_cuda_runtime_driver_and_nvrtc_declarations_match_the_real_headers(tmp_path, includes):
    checks = [f"SAME_ABI({symbol}, {_slot_type(slot)});" for symbol, slot in _symbol_slots("cudart_symbols")]
    text = "\n".join([
        ABI_CLASSES, "#include <cuda_runtime_api.h>", "#include <cuda.h>", "#include <nvrtc.h>",
        f'#include "{VENDOR_OPS}"', _renamed_nccl_api(), f'#include "{CUDA_API}"', *checks,
        "#define CHECK(field, symbol, ret, params) SAME_ABI(symbol, ret(*) params);",
        "PYCOLL_NVRTC_FUNCTIONS(CHECK)", "PYCOLL_CUDA_DRIVER_FUNCTIONS(CHECK)",
        "PYCOLL_CUDA_DRIVER_OPTIONAL_FUNCTIONS(CHECK)",
        'static_assert(PYCOLL_CUDA_SUCCESS_RESULT == CUDA_SUCCESS, "CUDA_SUCCESS");',
        'static_assert(PYCOLL_CU_ERROR_NOT_READY == CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY");',
        "static_assert(PYCOLL_CU_DEVICE_ATTRIBUTE_CC_MAJOR == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "
        '"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR");',
        "static_assert(PYCOLL_CU_DEVICE_ATTRIBUTE_CC_MINOR == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "
        '"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR");',
        "static_assert(PYCOLL_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "
        '"CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL");',
        "int main() { return 0; }", ""])
    _build(tmp_path, "cuda_signatures.cc", text, includes, "c++")


def test_the_checks_catch_a_wrong_declaration(tmp_path, includes):
    """The ABI comparison is not vacuous: a count as int, a missing parameter and a wrong enumerator fail."""
    text = "\n".join([ABI_CLASSES, "#include <nccl.h>",
                      "SAME_ABI(ncclAllReduce, int (*)(const void *, void *, int, int, int, void *, void *));",
                      "SAME_ABI(ncclSend, int (*)(const void *, size_t, int, int, void *));",
                      'static_assert(ncclMax == 3, "ncclMax");', "int main() { return 0; }", ""])
    src = tmp_path / "wrong.cc"
    src.write_text(text)
    done = subprocess.run([compiler("c++"), "-std=c++17", "-fsyntax-only", *includes, str(src)],
                          capture_output=True, text=True, timeout=100)
    assert done.returncode != 0
    for what in ("ncclAllReduce: pycoll's type differs", "ncclSend: pycoll's type differs", "ncclMax"):
        assert what in done.stderr, done.stderr[-3000:]
