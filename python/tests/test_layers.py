"""The layers point one way, as src/lib.rs says: ffi → core → the backend
contract → the backends, with the vocabulary they all share (the op table,
shape and dtype rules, the op kinds, the optimizer's and scaler's rules, the
model and rendezvous types) below them. No backend names a module above it,
and the vocabulary names no backend. Test modules are exempt."""

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
CORE = {"ffi", "tensor", "ops", "opcall", "autograd", "amp", "optim", "lm", "checkpoint", "dist", "dlpack",
        "registry", "handles", "threads"}


def _names(path):
    text = path.read_text().split("#[cfg(test)]", 1)[0]
    code = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
    return set(re.findall(r"\bcrate::(\w+)", code))


def _below():
    files = list((SRC / "backend").rglob("*.rs"))
    vocab = list((SRC / "vocab").rglob("*.rs"))
    leaves = [SRC / f for f in ("dtype.rs", "device.rs", "error.rs", "json.rs", "spinlock.rs")]
    return files, vocab + leaves


def test_no_backend_imports_a_module_above_it():
    backends, _ = _below()
    assert backends
    bad = {str(f.relative_to(SRC)): sorted(_names(f) & CORE) for f in backends if _names(f) & CORE}
    assert not bad, bad


def test_the_shared_vocabulary_names_no_backend_and_nothing_above():
    _, shared = _below()
    bad = {str(f.relative_to(SRC)): sorted(_names(f) & (CORE | {"backend"})) for f in shared
           if _names(f) & (CORE | {"backend"})}
    assert not bad, bad
