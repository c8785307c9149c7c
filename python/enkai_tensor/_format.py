"""`repr(tensor)` the way PyTorch prints (torch/_tensor_str.py, default print
options): 4 digits, scientific notation when the magnitudes call for it,
integer-valued floats as `1.`, lines wrapped at 80 columns, and tensors over
1000 elements summarized to 3 items at each edge of every dimension.

Works on nested Python lists, so it needs neither numpy nor torch; the caller
fetches only the summarized corners of a large tensor."""

import math
from typing import Any, List, Sequence

PRECISION = 4
THRESHOLD = 1000
EDGEITEMS = 3
LINEWIDTH = 80


def _flat(x: Any, out: List[Any]) -> List[Any]:
    if isinstance(x, list):
        for v in x:
            _flat(v, out)
    else:
        out.append(x)
    return out


class _Formatter:
    def __init__(self, values: Sequence[Any], floating: bool):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        if not floating:
            for v in values:
                self.max_width = max(self.max_width, len(str(v)))
            return
        finite = [v for v in values if math.isfinite(v) and v != 0]
        if not finite:
            return
        absolute = [abs(v) for v in finite]
        lo, hi = min(absolute), max(absolute)
        self.int_mode = all(v == math.ceil(v) for v in finite)
        if self.int_mode:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8
            if not self.sci_mode:
                self.max_width = max(self.max_width, *(len(f"{v:.0f}") + 1 for v in finite))
                return
        else:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        spec = f".{PRECISION}e" if self.sci_mode else f".{PRECISION}f"
        self.max_width = max(self.max_width, *(len(format(v, spec)) for v in finite))

    def format(self, v: Any) -> str:
        if not self.floating:
            s = str(v)
        elif self.sci_mode:
            s = format(v, f"{self.max_width}.{PRECISION}e")
        elif self.int_mode:
            s = f"{v:.0f}"
            if math.isfinite(v):
                s += "."
        else:
            s = format(v, f".{PRECISION}f")
        return " " * (self.max_width - len(s)) + s


def _vector(data: List[Any], cut: bool, indent: int, fmt: _Formatter) -> str:
    per_line = max(1, int(math.floor((LINEWIDTH - indent) / (fmt.max_width + 2))))
    items = [fmt.format(v) for v in data]
    if cut:
        items = items[:EDGEITEMS] + [" ..."] + items[EDGEITEMS:]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(data: Any, cuts: Sequence[bool], indent: int, fmt: _Formatter) -> str:
    if not cuts:
        return fmt.format(data)
    if len(cuts) == 1:
        return _vector(data, cuts[0], indent, fmt)
    parts = [_nested(x, cuts[1:], indent + 1, fmt) for x in data]
    if cuts[0]:
        parts = parts[:EDGEITEMS] + ["..."] + parts[EDGEITEMS:]
    return "[" + ("," + "\n" * (len(cuts) - 1) + " " * (indent + 1)).join(parts) + "]"


def values_str(data: Any, cuts: Sequence[bool], numel: int, floating: bool, indent: int) -> str:
    """The values part of torch's repr. `data` is the tensor as nested lists,
    already cut to its corners in the dims where `cuts` is true."""
    if numel == 0:
        return "[]"
    return _nested(data, cuts, indent, _Formatter(_flat(data, []), floating))


class _ComplexFormatter:
    """torch's complex style: the real parts and the imaginary parts each
    formatted as floats are, joined as `a+bj`."""

    def __init__(self, values: Sequence[complex]):
        self.re = _Formatter([v.real for v in values], True)
        self.im = _Formatter([abs(v.imag) for v in values], True)
        self.max_width = self.re.max_width + self.im.max_width + 2

    def format(self, v: complex) -> str:
        sign = "-" if math.copysign(1.0, v.imag) < 0 and not math.isnan(v.imag) else "+"
        return self.re.format(v.real) + sign + self.im.format(abs(v.imag)).lstrip() + "j"


def values_str_complex(data: Any, cuts: Sequence[bool], numel: int, indent: int) -> str:
    """`values_str` for complex values."""
    if numel == 0:
        return "[]"
    return _nested(data, cuts, indent, _ComplexFormatter(_flat(data, [])))  # type: ignore[arg-type]


def tensor_repr(values: str, suffixes: Sequence[str], indent: int) -> str:
    """`tensor(<values>, <suffixes>)`, a suffix moving to its own line when it
    would pass the line width (torch's `_add_suffixes`)."""
    out = ["tensor(", values]
    last = len(values) - values.rfind("\n") + 1
    for s in suffixes:
        if last + len(s) + 2 > LINEWIDTH:
            out.append(",\n" + " " * indent + s)
            last = indent + len(s)
        else:
            out.append(", " + s)
            last += len(s) + 2
    out.append(")")
    return "".join(out)
