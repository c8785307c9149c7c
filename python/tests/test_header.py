"""The ctypes declarations match every function of include/enkai_tensor.h."""

import re
from pathlib import Path

from enkai_tensor._lib import SIGNATURES

HEADER = Path(__file__).resolve().parents[2] / "include" / "enkai_tensor.h"
C_TYPES = {"int64_t": "c_long", "int": "c_int", "double": "c_double", "uint64_t": "c_ulong", "size_t": "c_ulong",
           "void": None}


def test_every_header_function_is_declared():
    text = HEADER.read_text()
    decls = dict(re.findall(r"^[\w ]+?\**\s*\**(enkai_\w+)\(([^)]*)\);", text, re.M))
    protos = re.findall(r"^([\w ]+?\**)\s*\**(enkai_\w+)\(([^)]*)\);", text, re.M)
    assert protos, "no prototypes parsed"
    names = {name for _, name, _ in protos}
    assert names == set(SIGNATURES), (names ^ set(SIGNATURES))
    for ret, name, args in protos:
        restype, argtypes = SIGNATURES[name]
        n_args = 0 if args.strip() in ("", "void") else len(args.split(","))
        assert len(argtypes) == n_args, name
        ret = ret.strip()
        if ret in C_TYPES and C_TYPES[ret]:
            assert restype.__name__ == C_TYPES[ret], (name, ret, restype)
    assert decls


def test_the_fuzzer_calls_every_header_function():
    """capi-tests/fuzz.c must drive every exported function (issue 12)."""
    protos = set(re.findall(r"^[\w ]+?\**\s*\**(enkai_\w+)\(", HEADER.read_text(), re.M))
    fuzz = (HEADER.parents[1] / "capi-tests" / "fuzz.c").read_text()
    called = set(re.findall(r"\b(enkai_\w+)\(", fuzz)) | set(re.findall(r"\b(enkai_\w+)\b(?=[,}])", fuzz))
    assert protos <= called, sorted(protos - called)
