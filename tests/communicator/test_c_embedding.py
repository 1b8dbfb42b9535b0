"""pycoll from C alone: examples/c_allreduce.c built with `pycoll config --cflags --libs`, with pkg-config and
with CMake's find_package(pycoll) against the installed headers and library, run as 3 processes that pass the
unique id through a file; the headers also compile as C++."""

import os
import shutil
import subprocess

import pytest
from c_programs import CC, EXAMPLE, pycoll_cli, pycoll_config, run_ranks

import pycoll

pytestmark = pytest.mark.timeout(120)

CXX = shutil.which("c++") or shutil.which("g++")


def test_config_prints_the_installed_paths():
    assert pycoll_config("--cflags") == [f"-I{pycoll.get_include()}"]
    assert os.path.isfile(os.path.join(pycoll.get_include(), "pycoll", "pycoll.h"))
    assert os.path.isfile(os.path.join(pycoll.get_include(), "pycoll", "bootstrap.h"))
    assert os.path.isfile(pycoll.get_library())
    assert "-lpycoll" in pycoll_config("--libs")
    assert pycoll_cli("config").returncode == 2


def test_three_c_processes_all_reduce_through_the_c_bootstrap(example, tmp_path):
    results = run_ranks(example, 3, tmp_path / "job.id")
    for rank, (code, out) in enumerate(results):
        assert code == 0, results
        assert f"rank {rank}/3 over shm: all_reduce of 1048576 float32 = 6, as expected" in out, results


def test_three_c_processes_over_tcp_hosts(example, tmp_path):
    """PYCOLL_HOSTID makes each process its own host: the bootstrap connects the TCP mesh."""
    procs = []
    for r in range(3):
        env = dict(os.environ, PYCOLL_SOCKET_IFNAME="lo", PYCOLL_HOSTID=f"host-{r}")
        procs.append(subprocess.Popen([str(example), str(r), "3", str(tmp_path / "job.id")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = [(p.wait(timeout=90), p.stdout.read()) for p in procs]
    for rank, (code, out) in enumerate(results):
        assert code == 0 and f"rank {rank}/3 over tcp:" in out and "as expected" in out, results


def test_a_missing_c_rank_is_a_timeout_naming_it(example, tmp_path):
    env = dict(os.environ, PYCOLL_SOCKET_IFNAME="lo", TIMEOUT_S="2")
    id_path = tmp_path / "job.id"
    # World of 3 but only ranks 0 and 1 start.
    procs = [subprocess.Popen([str(example), str(r), "3", str(id_path)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    out = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 1 for p in procs), out
    assert "rank 2 of 3 did not register with the bootstrap root (rank 0" in out[0], out
    assert "within 2 s" in out[1], out  # rank 1 hears the root's reason


def test_config_help_is_plain_text():
    result = pycoll_cli("config", "--help")
    assert result.returncode == 0
    assert "`" not in result.stdout.replace("$(pycoll config", ""), result.stdout  # no reStructuredText markup
    for option in ("--pkg-config-path", "--cmake-dir", "find_package(pycoll CONFIG)", "pycoll::pycoll"):
        assert option in result.stdout


def _two_ranks_of(binary, tmp_path):
    results = run_ranks(binary, 2, tmp_path / "job.id")
    for rank, (code, out) in enumerate(results):
        assert code == 0 and f"rank {rank}/2 over shm:" in out and "as expected" in out, results


def test_pkg_config_builds_the_example(tmp_path):
    if CC is None or shutil.which("pkg-config") is None:
        pytest.skip("needs a C compiler and pkg-config")
    [pc_dir] = pycoll_config("--pkg-config-path")
    env = dict(os.environ, PKG_CONFIG_PATH=pc_dir)

    def pkgpycoll_config(*args):
        result = subprocess.run(["pkg-config", *args, "pycoll"], env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()
    assert pkgpycoll_config("--modversion") == [pycoll.__version__]
    binary = tmp_path / "c_allreduce"
    subprocess.run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", EXAMPLE, "-o", str(binary),
                    *pkgpycoll_config("--cflags", "--libs")], check=True, capture_output=True, text=True)
    _two_ranks_of(binary, tmp_path)


def test_cmake_package_builds_the_example(tmp_path):
    cmake = shutil.which("cmake")
    if CC is None or cmake is None:
        pytest.skip("needs a C compiler and cmake")
    [cmake_dir] = pycoll_config("--cmake-dir")
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(f"""cmake_minimum_required(VERSION 3.18)
project(uses_pycoll LANGUAGES C)
find_package(pycoll {pycoll.__version__} CONFIG REQUIRED)
add_executable(c_allreduce "{EXAMPLE}")
set_target_properties(c_allreduce PROPERTIES C_STANDARD 11)
target_compile_options(c_allreduce PRIVATE -Wall -Wextra -Werror)
target_link_libraries(c_allreduce PRIVATE pycoll::pycoll)
""")
    build = tmp_path / "build"
    for command in ([cmake, "-S", str(project), "-B", str(build), f"-Dpycoll_DIR={cmake_dir}"],
                    [cmake, "--build", str(build)]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=100)
        assert result.returncode == 0, result.stdout + result.stderr
    _two_ranks_of(build / "c_allreduce", tmp_path)
    # A version the installed package cannot satisfy is refused by its version file.
    (project / "CMakeLists.txt").write_text((project / "CMakeLists.txt").read_text().replace(
        f"find_package(pycoll {pycoll.__version__}", "find_package(pycoll 99.0"))
    result = subprocess.run([cmake, "-S", str(project), "-B", str(tmp_path / "build99"), f"-Dpycoll_DIR={cmake_dir}"],
                            capture_output=True, text=True, timeout=100)
    assert result.returncode != 0 and "99.0" in result.stderr, result.stderr


def test_the_headers_compile_as_cxx():
    if CXX is None:
        pytest.skip("no C++ compiler on PATH")
    source = "#include <pycoll/pycoll.h>\nint main() { pycoll_unique_id_t id; return (int)sizeof id - 128; }\n"
    result = subprocess.run([CXX, "-x", "c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-",
                             *pycoll_config("--cflags")], input=source, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
