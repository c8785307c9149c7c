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


def test_the_schema_is_as_the_header_documents_it():
    """enkai_op_schema()'s JSON has exactly the fields its header comment lists,
    for every overload and parameter, and the typed functions named after a
    table op are the ones the generic-entry test compares with it."""
    import enkai_tensor as et

    text = HEADER.read_text()
    doc = text[text.index("Every op of `enkai_op` as JSON"):text.index("enkai_op_schema(void);")]
    doc = " ".join(line.strip(" */") for line in doc.splitlines())
    entry = doc[doc.index("`{") + 2:doc.index("}`")]
    params = entry[entry.index("[{") + 2:entry.index("}]")]
    top = set(re.findall(r'"(\w+)"', entry.replace(params, "")))
    top_optional = set(re.findall(r'"(\w+)"\?', entry.replace(params, "")))
    param_keys = set(re.findall(r'"(\w+)"', params))
    optional = set(re.findall(r'"(\w+)"\?', params))
    schema = et.op_schema()
    assert schema and top and param_keys
    for e in schema:
        assert top - top_optional <= set(e) <= top, (e["name"], set(e) ^ top)
        for p in e["params"]:
            assert param_keys - optional <= set(p) <= param_keys, (e["name"], p)
    # The header's typed functions that share a table op's name.
    names = {e["name"] for e in schema}
    typed = {n for n in re.findall(r"^[\w ]+?\**\s*\**enkai_tensor_(\w+)\(", text, re.M) if n in names}
    tested = set(re.findall(r'et\.op\("(\w+)"[^\n]*enkai_tensor_\1\(', (HEADER.parents[1] / "python" / "tests" / "test_op_table.py").read_text()))
    assert typed and typed <= tested, sorted(typed - tested)
