"""`make install` into a scratch prefix, then a C program built the two ways a
project would consume it: `cc $(pkg-config --cflags --libs enkai_tensor)` and
a CMake project with `find_package(enkai_tensor)`. Nothing sets
LD_LIBRARY_PATH: the installed library finds libtorch through its RUNPATH."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples-c" / "quickstart.c"
HPP = ROOT / "include" / "enkai_tensor.hpp"


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "ENKAI_TENSOR_PATH")}
    env.update(extra)
    return env


def _run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert p.returncode == 0, f"{cmd} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p.stdout


def _quickstart_ran(out):
    # The example prints a product and ends with every counter back at 0.
    assert "a @ b shape [2,2]" in out, out
    assert out.strip().endswith("live: tensors=0 devices=0 opts=0 scalers=0"), out


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("install") / "prefix"
    _run(["make", "-s", "install", f"PREFIX={p}"], cwd=ROOT, env=_env())
    return p


def test_install_lays_out_a_versioned_library_headers_and_package_files(prefix):
    lib = prefix / "lib"
    real = sorted(lib.glob("libenkai_tensor.so.*.*.*"))
    assert len(real) == 1, list(lib.iterdir())
    version = real[0].name.removeprefix("libenkai_tensor.so.")
    major = version.split(".")[0]
    assert os.readlink(lib / f"libenkai_tensor.so.{major}") == real[0].name
    assert os.readlink(lib / "libenkai_tensor.so") == f"libenkai_tensor.so.{major}"
    assert f"Library soname: [libenkai_tensor.so.{major}]" in _run(["readelf", "-d", str(real[0])])
    assert (prefix / "include" / "enkai_tensor.h").read_bytes() == (ROOT / "include" / "enkai_tensor.h").read_bytes()
    if HPP.exists():
        assert (prefix / "include" / "enkai_tensor.hpp").is_file()
    pc = (lib / "pkgconfig" / "enkai_tensor.pc").read_text()
    assert f"prefix={prefix}\n" in pc and f"Version: {version}\n" in pc
    assert (lib / "cmake" / "enkai_tensor" / "enkai_tensorConfig.cmake").is_file()
    # libtorch resolves with no LD_LIBRARY_PATH.
    ldd = _run(["ldd", str(real[0])], env=_env())
    assert "not found" not in ldd and "libtorch_cpu.so" in ldd, ldd


def test_a_c_program_builds_with_pkg_config_and_runs(prefix, tmp_path):
    env = _env(PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = _run(["pkg-config", "--cflags", "--libs", "enkai_tensor"], env=env).split()
    libdir = _run(["pkg-config", "--variable=libdir", "enkai_tensor"], env=env).strip()
    assert libdir == str(prefix / "lib")
    app = tmp_path / "app"
    # The rpath stands in for ldconfig, which would find a library under /usr/local.
    _run(["cc", "-std=c11", str(QUICKSTART), *flags, f"-Wl,-rpath,{libdir}", "-o", str(app)], env=env)
    ldd = _run(["ldd", str(app)], env=_env())
    assert f"libenkai_tensor.so.1 => {libdir}/libenkai_tensor.so.1" in ldd, ldd
    _quickstart_ran(_run([str(app)], env=_env(), cwd=tmp_path))


def _cmake_project(src, sources, cxx=False):
    src.mkdir()
    langs = "C CXX" if cxx else "C"
    lines = [
        "cmake_minimum_required(VERSION 3.16)",
        f"project(app LANGUAGES {langs})",
        "find_package(enkai_tensor 1.0 REQUIRED)",
    ]
    for name, path in sources.items():
        shutil.copy(path, src / path.name)
        lines += [f"add_executable({name} {path.name})", f"target_link_libraries({name} PRIVATE enkai_tensor::enkai_tensor)"]
        if path.suffix == ".cpp":
            lines.append(f"target_compile_features({name} PRIVATE cxx_std_17)")
    (src / "CMakeLists.txt").write_text("\n".join(lines) + "\n")


def test_a_cmake_project_finds_the_package_even_after_the_prefix_moves(prefix, tmp_path):
    cmake = shutil.which("cmake")
    assert cmake, "cmake is missing: scripts/setup.sh installs it into the venv"
    # Installed trees get copied around (packaging, containers): the package
    # finds itself relative to its own file.
    moved = tmp_path / "moved"
    shutil.copytree(prefix, moved, symlinks=True)
    sources = {"app": QUICKSTART}
    example = ROOT / "examples-cpp" / "train_mlp.cpp"
    if HPP.exists() and example.exists():
        sources["app_cpp"] = example
    _cmake_project(tmp_path / "src", sources, cxx=len(sources) > 1)
    build = tmp_path / "build"
    _run([cmake, "-S", str(tmp_path / "src"), "-B", str(build), f"-DCMAKE_PREFIX_PATH={moved}"], env=_env())
    _run([cmake, "--build", str(build)], env=_env())
    assert f"{moved}/lib/libenkai_tensor.so.1" in _run(["ldd", str(build / "app")], env=_env())
    _quickstart_ran(_run([str(build / "app")], env=_env(), cwd=tmp_path))
    if "app_cpp" in sources:
        _run([str(build / "app_cpp")], env=_env(), cwd=tmp_path)


def test_cmake_refuses_another_major_version(prefix, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(app LANGUAGES C)\nfind_package(enkai_tensor 2 REQUIRED)\n"
    )
    p = subprocess.run(
        [shutil.which("cmake"), "-S", str(src), "-B", str(tmp_path / "b"), f"-DCMAKE_PREFIX_PATH={prefix}"],
        capture_output=True, text=True, timeout=300, env=_env(),
    )
    assert p.returncode != 0 and "enkai_tensor" in p.stderr
