"""The README's CPU-only build runs as written, with no make: in a scratch
copy of the repository's tracked files, its shell block builds the library
with cargo alone, links the quickstart against it, and the program runs
(it used to link but not start: the SONAME link is made only by make)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = (ROOT / "README.md").read_text().split("**A CPU-only build, without downloading PyTorch**", 1)[1]
BLOCK = re.search(r"^```sh[ \t]*\n(.*?)^```", SECTION, re.S | re.M).group(1)


def test_the_readme_cpu_only_build_links_a_program_that_runs(tmp_path):
    assert "cargo build --release --no-default-features" in BLOCK and "./quickstart" in BLOCK
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    repo = tmp_path / "repo"
    for f in filter(None, (f.decode() for f in files)):
        src = ROOT / f
        if src.is_file() or src.is_symlink():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / f, follow_symlinks=False)
    # Directories keep their times too: build.rs watches one (gloo-decl).
    for d in [p for p in repo.rglob("*") if p.is_dir()]:
        shutil.copystat(ROOT / d.relative_to(repo), d)
    # A cache only: make's libtorch-free build (the same command). Cargo's
    # fingerprints of a workspace's own crate are relative to its root, so the
    # copy is fresh when the sources are the same, and the block's build then
    # only checks it. The SONAME link is make's, which the block must make itself.
    if (ROOT / "target" / "notorch").is_dir():
        shutil.copytree(ROOT / "target" / "notorch", repo / "target", symlinks=True)
        for stale in (repo / "target" / "release").glob("libenkai_tensor.so.*"):
            stale.unlink()
    # No libtorch anywhere on the way: no venv on PATH, no torch variables.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIBTORCH", "VIRTUAL_ENV", "LD_LIBRARY", "ENKAI_"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if "venv" not in p)
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", BLOCK], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, f"README block failed:\n{BLOCK}\n--- stdout:\n{p.stdout}\n--- stderr:\n{p.stderr}"
    assert "live: tensors=0 devices=0" in p.stdout, p.stdout
    ldd = subprocess.run(["ldd", str(repo / "quickstart")], capture_output=True, text=True).stdout
    assert "libenkai_tensor.so.1 => " + str(repo / "target" / "release") in ldd and "torch" not in ldd, ldd
