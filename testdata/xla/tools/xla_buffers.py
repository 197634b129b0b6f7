"""Parse XLA's optimized HLO module text, its buffer assignment and its live ranges.

Files come from XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text":
  *cpu_after_optimizations.txt                     the optimized, scheduled module
  *cpu_after_optimizations-buffer-assignment.txt   allocations and the values in each
  *cpu_after_optimizations-live-range.txt          HloLiveRange: schedule + value live ranges

This module is shared by hlo_to_memplan.py (the converter) and xla_peak.py (XLA's own peak
of live bytes on its schedule).
"""
import glob
import os
import re
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------- HLO text

DTYPES = {  # HLO element type -> (memplan dtype, bits)
    "pred": ("bool", 8), "s2": ("i2", 2), "s4": ("i4", 4), "s8": ("i8", 8),
    "s16": ("i16", 16), "s32": ("i32", 32), "s64": ("i64", 64), "u2": ("u2", 2),
    "u4": ("u4", 4), "u8": ("u8", 8), "u16": ("u16", 16), "u32": ("u32", 32),
    "u64": ("u64", 64), "f16": ("f16", 16), "bf16": ("bf16", 16), "f32": ("f32", 32),
    "f64": ("f64", 64), "c64": ("c64", 64), "c128": ("c128", 128),
    "f8e4m3fn": ("f8e4m3fn", 8), "f8e5m2": ("f8e5m2", 8), "f8e4m3fnuz": ("f8e4m3fnuz", 8),
    "f8e5m2fnuz": ("f8e5m2fnuz", 8), "f4e2m1fn": ("f4e2m1", 4), "f8e8m0fnu": ("f8e8m0", 8),
}

COMMENT = re.compile(r"/\*.*?\*/")


@dataclass
class Array:
    etype: str          # HLO element type (f32, pred, ...) or "token"
    dims: list

    @property
    def elements(self):
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def nbytes(self):
        if self.etype == "token":
            return 0
        bits = DTYPES[self.etype][1]
        return (self.elements * bits + 7) // 8

    def __str__(self):
        return f"{self.etype}[{','.join(map(str, self.dims))}]"


# a shape is an Array or a list of shapes (a tuple)


def _match_paren(s, i, open_c="(", close_c=")"):
    """Index just past the bracket closing the one at s[i]."""
    depth = 0
    j = i
    while j < len(s):
        c = s[j]
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise ValueError(f"unbalanced {open_c} in {s[i:i + 80]!r}")


def _split_top(s):
    """Split on commas at bracket depth 0."""
    out, depth, cur = [], 0, []
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        out.append("".join(cur))
    return [x.strip() for x in out]


ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")


def parse_shape(s):
    """Parse a shape at the start of s; return (shape, rest)."""
    s = s.lstrip()
    if s.startswith("("):
        end = _match_paren(s, 0)
        inner = COMMENT.sub("", s[1:end - 1])
        elems = [parse_shape(x)[0] for x in _split_top(inner)] if inner.strip() else []
        return elems, s[end:]
    m = ARRAY_RE.match(s)
    if not m:
        if s.startswith("token[]"):
            return Array("token", []), s[len("token[]"):]
        raise ValueError(f"cannot parse shape at {s[:80]!r}")
    dims = [int(d.lstrip("<=")) for d in m.group(2).split(",") if d.strip()]
    return Array(m.group(1), dims), s[m.end():]


def leaves(shape, prefix=()):
    """(index path, Array) for every array leaf of a shape."""
    if isinstance(shape, list):
        for i, sub in enumerate(shape):
            yield from leaves(sub, prefix + (i,))
    else:
        yield prefix, shape


def subshape(shape, index):
    for i in index:
        shape = shape[i]
    return shape


@dataclass
class Instr:
    name: str
    shape: object
    opcode: str
    operands: list
    attrs: str
    is_root: bool
    seq: int                      # position in the entry computation (its schedule)
    param_no: int = None

    def attr(self, key):
        m = re.search(r"(?:^|, )" + re.escape(key) + r"=([^,]+)", self.attrs)
        return m.group(1).strip() if m else None


INSTR_RE = re.compile(r"^\s*(ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")


def parse_entry(text):
    """The entry computation's instructions, in their (scheduled) order."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("ENTRY "))
    assert "is_scheduled=true" in text.split("\n", 1)[0], "module is not scheduled"
    instrs = []
    for line in lines[start + 1:]:
        if line.startswith("}"):
            break
        m = INSTR_RE.match(line)
        if not m:
            continue
        is_root, name, rest = bool(m.group(1)), m.group(2), m.group(3)
        shape, rest = parse_shape(rest)
        rest = rest.lstrip()
        om = re.match(r"([a-z][\w\-]*)\(", rest)
        if not om:
            raise ValueError(f"cannot parse opcode in {line[:120]!r}")
        opcode = om.group(1)
        p0 = om.end() - 1
        p1 = _match_paren(rest, p0)
        args = COMMENT.sub("", rest[p0 + 1:p1 - 1])
        attrs = rest[p1:].lstrip(", ")
        operands, param_no = [], None
        if opcode == "parameter":
            param_no = int(args)
        elif opcode != "constant":
            for a in _split_top(args):
                toks = [t for t in a.split() if t.startswith("%")]
                if toks:
                    operands.append(toks[-1][1:])
                else:
                    raise ValueError(f"operand without a name in {line[:160]!r}")
        instrs.append(Instr(name, shape, opcode, operands, attrs, is_root, len(instrs),
                            param_no))
    return instrs


# ---------------------------------------------------------------------------------- dumps


def dump_files(dump_dir):
    def one(pat):
        found = sorted(glob.glob(os.path.join(dump_dir, pat)))
        found = [f for f in found if "jit_" in os.path.basename(f)]
        assert len(found) == 1, f"{pat}: {found}"
        return found[0]
    return {
        "hlo": one("*cpu_after_optimizations.txt"),
        "ba": one("*cpu_after_optimizations-buffer-assignment.txt"),
        "lr": one("*cpu_after_optimizations-live-range.txt"),
    }


@dataclass
class Allocation:
    index: int
    size: int
    header: str
    values: list = field(default_factory=list)   # (value key, size, offset)

    @property
    def is_param(self):
        return re.search(r", parameter \d+", self.header) is not None

    @property
    def is_live_out(self):
        return "maybe-live-out" in self.header

    @property
    def is_thread_local(self):
        return "thread-local" in self.header

    @property
    def is_constant(self):
        return "constant" in self.header.split("shape |")[0]

    @property
    def is_temp(self):
        # what CompiledMemoryStats.temp_size_in_bytes sums
        return not (self.is_param or self.is_live_out or self.is_thread_local
                    or self.is_constant)


VALUE_RE = re.compile(r"^ value: <(\d+) (\S+?)(\{[0-9,]*\})? @\d+> \(size=(\d+),offset=(\d+)\)")


def value_key(name, idx):
    """Key of a value: (instruction name, index tuple)."""
    if idx is None or idx == "{}":
        return (name, ())
    inner = idx.strip("{}")
    return (name, tuple(int(x) for x in inner.split(",")) if inner else ())


def parse_buffer_assignment(path):
    allocs = []
    for line in open(path):
        if line.startswith("allocation "):
            m = re.match(r"allocation (\d+): size (\d+)(.*)", line)
            allocs.append(Allocation(int(m.group(1)), int(m.group(2)), m.group(3)))
        elif line.startswith(" value:"):
            m = VALUE_RE.match(line)
            assert m, line
            key = value_key(m.group(2), m.group(3))
            allocs[-1].values.append((key, int(m.group(4)), int(m.group(5))))
        elif line.startswith("Total bytes used") or line.startswith("Used values"):
            break
    return allocs


def parse_live_range(path):
    """(instruction sequence, {value key: (start, end)}, max time)."""
    seq, ranges, section, tmax = [], {}, None, None
    for line in open(path):
        s = line.strip()
        if line.startswith("HloLiveRange"):
            tmax = int(re.search(r"max (\d+)", line).group(1))
        elif s == "InstructionSequence:":
            section = "seq"
        elif s == "BufferLiveRange:":
            section = "ranges"
        elif s.startswith("Live ranges at"):
            break
        elif section == "seq":
            i, name = s.split(":", 1)
            assert int(i) == len(seq)
            seq.append(name)
        elif section == "ranges":
            m = re.match(r"(\S+?)(\{[0-9,]*\}):(\d+)-(\d+)$", s)
            assert m, s
            ranges[value_key(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
    return seq, ranges, tmax


# ---------------------------------------------------------------------------------- dataflow


FORWARDING = {"bitcast", "get-tuple-element", "tuple", "add-dependency",
              "optimization-barrier", "domain"}
CONTROL_FLOW = {"while", "conditional", "call", "async-start", "async-done", "send", "recv"}


def dataflow(instrs):
    """For each instruction, {index path: defining value key} of its array leaves, following
    XLA's dataflow: bitcast / get-tuple-element / tuple (elements) / add-dependency /
    optimization-barrier forward their operand's values; every other instruction defines a
    value per array leaf (plus, for tuples, the index table at {} which we do not model)."""
    by_name = {i.name: i for i in instrs}
    vals = {}
    for ins in instrs:
        if ins.opcode in CONTROL_FLOW:
            raise NotImplementedError(f"entry has control flow: {ins.opcode} {ins.name}")
        if ins.opcode == "bitcast":
            src = vals[ins.operands[0]]
            assert list(src) == [()], f"bitcast of a tuple: {ins.name}"
            a, b = subshape(by_name[ins.operands[0]].shape, ()), ins.shape
            assert a.nbytes == b.nbytes, f"bitcast changes size: {ins.name}"
            vals[ins.name] = dict(src)
        elif ins.opcode == "get-tuple-element":
            k = int(ins.attr("index"))
            src = vals[ins.operands[0]]
            vals[ins.name] = {p[1:]: v for p, v in src.items() if p and p[0] == k}
        elif ins.opcode == "tuple":
            d = {}
            for k, op in enumerate(ins.operands):
                for p, v in vals[op].items():
                    d[(k,) + p] = v
            vals[ins.name] = d
        elif ins.opcode in ("add-dependency",):
            vals[ins.name] = dict(vals[ins.operands[0]])
        elif ins.opcode == "optimization-barrier":
            vals[ins.name] = dict(vals[ins.operands[0]])
        else:
            vals[ins.name] = {p: (ins.name, p) for p, a in leaves(ins.shape)
                              if a.etype != "token"}
    return vals


def load(dump_dir):
    f = dump_files(dump_dir)
    text = open(f["hlo"]).read()
    instrs = parse_entry(text)
    allocs = parse_buffer_assignment(f["ba"])
    seq, ranges, tmax = parse_live_range(f["lr"])
    assert seq == [i.name for i in instrs], "live-range sequence != entry order"
    return instrs, allocs, ranges, tmax
