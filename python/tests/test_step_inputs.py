"""CI cases of the step inputs, version and build features (host backend,
numpy + pytest): include/mdr/graph.h (mdr_step_input, mdr_graph_cache_step_inputs,
the layout query) and include/mdr/version.h."""
import ctypes
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import mdr
from mdr import _lib

TINY = dict(hidden_size=64, intermediate_size=128, vocab_size=256, num_attention_heads=2,
            num_key_value_heads=1, head_dim=32)
M = 16
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def host():
    """A host backend, a stream, an arena, and ENG: 64 KiB of device memory
    the engine owns, where the inputs go (a step's zeroing never touches it;
    the arena's scratch, which it clears, is refused as a destination)."""
    global ENG
    b = mdr.Backend.host()
    s = b.stream()
    a = mdr.Arena(b, TINY, max_batch_tokens=M, max_seq_len=256, kv_block_size=16,
                  max_batch_size=4)
    ENG = b.alloc(65536)
    yield b, s, a
    ENG.close(), a.close(), s.close(), b.close()
    ENG = None


ENG = None


def _raises(cls, fn, *a, **k):
    with pytest.raises(cls) as e:
        fn(*a, **k)
    assert type(e.value) is cls or issubclass(type(e.value), cls)
    return e.value


def inputs(dev=None):
    """positions per token, sequence lengths and a 4-wide block table per
    sequence, fixed sampling temperatures; in ENG, and (dev) one more in
    device memory of its own."""
    ins = [mdr.StepInput("positions", "int32", "token", pad=-1, dest=ENG, offset=0),
           mdr.StepInput("seq_lens", "uint32", "sequence", pad=0xAAAA, dest=ENG,
                         offset=1024),
           mdr.StepInput("block_table", "int32", "sequence", width=4, pad=-7,
                         dest=ENG, offset=2048),
           mdr.StepInput("temperature", "float32", "fixed", max_rows=4, pad=1.5,
                         dest=ENG, offset=4096),
           mdr.StepInput("slots", "int64", "token", pad=-2, dest=ENG, offset=8192)]
    if dev is not None:
        ins.append(mdr.StepInput("lora", "uint16", "token", pad=9, dest=dev))
    return ins


def _at(off, dtype, n):
    return ENG.view("uint8").numpy()[off:off + n * np.dtype(dtype).itemsize].view(dtype)


# ---- version and build features -----------------------------------------------------------

def test_version_and_build_features():
    L = _lib.lib
    assert mdr.version() == L.mdr_version_string().decode()
    assert re.fullmatch(r"\d+\.\d+\.\d+", mdr.version())
    n = mdr.version_number()
    assert mdr.version() == "%d.%d.%d" % (n // 10000, n // 100 % 100, n % 100)
    words = mdr.build_features()
    bits = mdr.build_features_bits()
    assert bits == L.mdr_build_features()
    assert words == tuple(L.mdr_build_features_string().decode().split())
    assert words == tuple(w for w, bit in mdr.FEATURES.items() if bits & bit)
    assert bits & ~sum(mdr.FEATURES.values()) == 0
    hdr = open(os.path.join(REPO, "include", "mdr", "version.h")).read()
    want = tuple(int(re.search(r"#define MDR_VERSION_%s (\d+)" % k, hdr).group(1))
                 for k in ("MAJOR", "MINOR", "PATCH"))
    assert mdr.version() == "%d.%d.%d" % want


# ---- the ctypes structs against the header --------------------------------------------------

_STRUCTS = {"mdr_step_input": _lib.StepInputC, "mdr_step_input_info": _lib.StepInputInfoC,
            "mdr_graph_cache_options": _lib.GraphCacheOptionsC, "mdr_graph_stats": _lib.GraphStatsC}


def test_struct_layouts_match_the_header(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "mdr/graph.h"', "int main(void){"]
    for cname, py in _STRUCTS.items():
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (cname, cname))
        for f, _ in py._fields_:
            if f != "_reserved":
                lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (cname, f, cname, f))
    lines.append("return 0;}")
    src = tmp_path / "off.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "off"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), str(src), "-o", str(exe)],
                   check=True)
    got = {}
    for ln in subprocess.run([str(exe)], check=True, capture_output=True,
                             text=True).stdout.splitlines():
        k1, k2, v = ln.split()
        got[k1, k2] = int(v)
    for cname, py in _STRUCTS.items():
        fields = [f for f, _ in py._fields_ if f != "_reserved"]
        for f in fields:
            assert getattr(py, f).offset == got[cname, f], (cname, f)
        last = getattr(py, fields[-1])
        end = last.offset + last.size
        c_size = got[cname, "sizeof"]
        assert (end + 7) // 8 * 8 == c_size, cname  # no C field missing at the end
        if "_reserved" not in dict(py._fields_):
            assert ctypes.sizeof(py) == c_size, cname  # an array element: exact
    assert ctypes.sizeof(_lib.StepInputC) == got["mdr_step_input", "sizeof"]


# ---- staged at their destinations, padded ------------------------------------------------

VALUES = {"positions": [10, 11, 12], "seq_lens": [3, 4],
          "block_table": [[1, 2, 3, 4], [5, 6, 7, 8]], "temperature": [0.5, 1.0, 2.0, 3.0],
          "slots": np.array([1 << 40, 2, 3], dtype=np.int64)}


@pytest.mark.parametrize("mode", ["exact", "ladder", "dynamic"])
def test_inputs_staged_and_padded_every_mode(host, mode):
    b, s, a = host
    dev = b.alloc(2 * M)
    c = mdr.GraphCache(a, s, mode=mode, inputs=inputs(dev), max_sequences=4)
    dev.view("uint16").numpy()[:] = 0x5555  # host backend: device memory is host memory
    ENG.view("uint8").numpy()[:] = 0x33
    vals = dict(VALUES, lora=np.array([100, 200, 300], dtype=np.uint16))
    c.step_inputs([5, 6, 7], vals)
    s.synchronize()
    g = c.graph_tokens(3)
    sb = c.sequence_bound(3)
    assert g == {"exact": 3, "ladder": 4, "dynamic": M}[mode]
    assert sb == {"exact": 3, "ladder": 4, "dynamic": 4}[mode]
    padded = mode != "dynamic"
    tok_rows = g if padded else 3  # rows written: the graph's bound, or exactly the step's
    seq_rows = sb if padded else 2
    assert list(a["token_ids"].numpy()[:3]) == [5, 6, 7]
    pos = _at(0, np.int32, M)
    assert list(pos[:3]) == [10, 11, 12]
    assert all(pos[3:tok_rows] == -1)
    if not padded:
        assert -1 not in pos[3:]
    sl = _at(1024, np.uint32, 4)
    assert list(sl[:2]) == [3, 4] and all(sl[2:seq_rows] == 0xAAAA)
    bt = _at(2048, np.int32, 16).reshape(4, 4)
    assert bt[:2].tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert (bt[2:seq_rows] == -7).all()
    if not padded:
        assert not (bt[2:] == -7).any()
    assert list(_at(4096, np.float32, 4)) == [0.5, 1.0, 2.0, 3.0]  # fixed: every row
    sl64 = _at(8192, np.int64, M)
    assert list(sl64[:3]) == [1 << 40, 2, 3] and all(sl64[3:tok_rows] == -2)
    lo = dev.view("uint16").numpy()
    assert list(lo[:3]) == [100, 200, 300] and all(lo[3:tok_rows] == 9)
    assert all(lo[tok_rows:] == 0x5555)  # past the bound: untouched
    # the step's counts in device memory for the body's kernels
    assert np.frombuffer(b.copy_d2h(c.count_ptr, 4), np.uint32)[0] == 3
    assert np.frombuffer(b.copy_d2h(c.sequences_ptr, 4), np.uint32)[0] == 2
    # a second, larger step overwrites; a sequence count given explicitly
    c.step_inputs(np.array([1, 2, 3, 4, 5], np.uint32),
                  [list(range(5)), [1, 1, 1], np.arange(12).reshape(3, 4), [4, 3, 2, 1],
                   [7] * 5, np.arange(5, dtype=np.uint16)], sequences=3)
    s.synchronize()
    assert list(pos[:5]) == list(range(5)) and list(sl[:3]) == [1, 1, 1]
    assert bt[:3].ravel().tolist() == list(range(12))
    assert np.frombuffer(b.copy_d2h(c.sequences_ptr, 4), np.uint32)[0] == 3
    assert c.stats().steps == 2
    c.close()
    dev.close()


def test_the_same_arrays_step_after_step_are_read_again(host):
    """Arrays of the input's own dtype go to the slot as they are, their
    addresses remembered by identity: changed in place, freed, or past the
    memo's 512 entries, every step stages the values the arrays hold then."""
    b, s, a = host
    c = mdr.GraphCache(a, s, mode="exact",
                       inputs=[mdr.StepInput("positions", "int64", "token", pad=-1,
                                             dest=ENG, offset=0)])
    pos = _at(0, np.int64, 4)
    arr = np.array([10, 11, 12], np.int64)
    for k in range(3):  # the same array, changed in place between steps
        arr[:] = [10 * k, 10 * k + 1, 10 * k + 2]
        c.step_inputs([1, 2, 3], {"positions": arr})
        s.synchronize()
        assert list(pos[:3]) == [10 * k, 10 * k + 1, 10 * k + 2]
    for k in range(600):  # fresh arrays, each dropped after its step: past the memo's size
        c.step_inputs([1, 2], {"positions": np.array([k, -k], np.int64)})
        if k % 97 == 0:
            s.synchronize()
            assert list(pos[:2]) == [k, -k]
    s.synchronize()
    assert list(pos[:2]) == [599, -599]
    view = np.arange(8, dtype=np.int64)[::2]  # not contiguous: copied, never memoised
    c.step_inputs([1, 2, 3, 4], {"positions": view})
    s.synchronize()
    assert list(pos[:4]) == [0, 2, 4, 6]
    wide = np.array([[5, 6]], np.int64)  # 2-D: through the checks, flattened
    c.step_inputs([1, 2], {"positions": wide})
    s.synchronize()
    assert list(pos[:2]) == [5, 6]
    assert len(c._addrs) <= 512
    import sys
    c.step_inputs([1, 2, 3], {"positions": arr})  # remembered again (the 600 above cleared the memo)
    s.synchronize()
    held = sys.getrefcount(arr)
    c.close()
    assert not c._addrs and sys.getrefcount(arr) == held - 1  # closing lets the arrays go


def test_bodies_see_the_inputs_and_the_pointers(host):
    b, s, a = host
    seen = []

    def body_dyn(stream, count_ptr, max_tokens):
        seen.append((count_ptr, max_tokens))

    c = mdr.GraphCache(a, s, mode="dynamic", body=body_dyn, inputs=inputs(), max_sequences=4)
    assert c.sequences_ptr and c.sequences_ptr != c.count_ptr and c.max_sequences == 4
    c.step_inputs([1, 2], {k: v for k, v in VALUES.items()} | {"positions": [0, 1],
                                                                "slots": [0, 1]})
    s.synchronize()
    assert seen and seen[0] == (c.count_ptr, M)
    c.close()


def test_device_ids_and_device_resident_inputs(host):
    b, s, a = host
    src = b.alloc(4 * M)
    src.view("int32").numpy()[:] = np.arange(M) + 100
    ids = b.alloc(4 * M)
    ids.view("uint32").numpy()[:4] = [9, 8, 7, 6]
    lens = b.alloc(64)  # outside the arena: the step's zeroing leaves it alone
    ins = [mdr.StepInput("positions", "int32", "token", pad=-1, dest=ENG, device=src),
           mdr.StepInput("seq_lens", "int32", "sequence", pad=-3, dest=lens, device=True)]
    c = mdr.GraphCache(a, s, mode="exact", inputs=ins, max_sequences=4)
    meta = c.decode_meta()
    assert meta[1].device_src == src.ptr and meta[1].slot_offset == 0
    assert meta[2].device_src == meta[2].dst
    lens.view("int32").numpy()[:4] = [40, 41, 42, 43]
    c.step_inputs(ids, tokens=4, sequences=2)  # ids in device memory, no host values
    s.synchronize()
    assert list(a["token_ids"].numpy()[:4]) == [9, 8, 7, 6]
    assert list(_at(0, np.int32, 4)) == [100, 101, 102, 103]
    assert list(lens.view("int32").numpy()[:4]) == [40, 41, -3, -3]  # only the pad written
    c.step_inputs(None, tokens=4, sequences=1)  # ids already in token_ids
    s.synchronize()
    assert list(a["token_ids"].numpy()[:4]) == [9, 8, 7, 6]
    _raises(mdr.InvalidArgumentError, c.step_inputs, [1], {"positions": [1]})
    # device ids where the step's own launch writes: refused, naming it
    e = _raises(mdr.InvalidArgumentError, c.step_device, a["scratch"], 4)
    assert "overlap scratch" in str(e), str(e)
    e = _raises(mdr.InvalidArgumentError, c.step_device, lens, 4)
    assert "seq_lens" in str(e), str(e)
    c.close(), src.close(), ids.close(), lens.close()


def test_a_device_step_without_inputs_publishes_the_sequences_given(host):
    """An EXACT cache without inputs: a device-id step that gives its
    sequence count publishes that count (its plain device graph would
    publish min(tokens, max_sequences)), and a plain one the default."""
    b, s, a = host
    ids = b.alloc(4 * M)
    ids.view("uint32").numpy()[:6] = [5, 4, 3, 2, 1, 0]
    c = mdr.GraphCache(a, s, mode="exact", max_sequences=4)

    def seqs():
        return np.frombuffer(b.copy_d2h(c.sequences_ptr, 4), np.uint32)[0]
    for t, given in ((6, 2), (6, 4), (3, 1), (6, 2)):
        c.step_inputs(ids, tokens=t, sequences=given)
        s.synchronize()
        assert seqs() == given, (t, given)
        assert list(a["token_ids"].numpy()[:t]) == [5, 4, 3, 2, 1, 0][:t]
        c.step_device(ids, t)
        s.synchronize()
        assert seqs() == min(t, 4)
    c.close(), ids.close()


def test_decode_meta_equals_the_c_query(host):
    b, s, a = host
    dev = b.alloc(2 * M)
    c = mdr.GraphCache(a, s, mode="ladder", inputs=inputs(dev), max_sequences=4,
                       pad_token_id=77)
    L = _lib.lib
    meta = c.decode_meta()
    n = L.mdr_graph_cache_step_input_count(c._h.ptr)
    assert len(meta) == n == 1 + len(inputs(dev))
    shapes = {0: "token", 1: "sequence", 2: "fixed"}
    for i, m in enumerate(meta):
        info = _lib.StepInputInfoC()
        assert L.mdr_graph_cache_step_input_info(c._h.ptr, i, ctypes.byref(info)) == 0
        assert m == mdr.StepInputInfo(i, info.name.decode(), info.elem_bytes, shapes[info.shape],
                                      info.width, info.max_rows, info.row_bytes, info.max_bytes,
                                      info.dst, info.device_src, info.slot_offset, info.pad,
                                      m.dtype)
        assert c.step_input_index(m.name) == i
        assert m.slot_offset % 16 == 0 and m.max_bytes == m.max_rows * m.row_bytes
    ids = meta[0]
    assert (ids.name, ids.elem_bytes, ids.shape, ids.width, ids.max_rows, ids.pad, ids.dst) == (
        "token_ids", 4, "token", 1, M, 77, a["token_ids"].ptr)
    pos = meta[1]
    assert pos.dst == ENG.ptr and pos.pad == 0xFFFFFFFF and pos.dtype == "int32"
    assert meta[2].max_rows == 4 and meta[3].row_bytes == 16 and meta[3].pad == 0xFFFFFFF9
    assert meta[4].pad == np.float32(1.5).view(np.uint32)
    assert meta[6].dst == dev.ptr and meta[6].pad == 9
    assert c.slot_bytes == L.mdr_graph_cache_slot_bytes(c._h.ptr) > meta[-1].slot_offset
    assert c.sequences_ptr == L.mdr_graph_cache_sequences_ptr(c._h.ptr)
    for t in (1, 3, 5, M):
        out = ctypes.c_size_t()
        assert L.mdr_graph_cache_sequence_bound(c._h.ptr, t, ctypes.byref(out)) == 0
        assert c.sequence_bound(t) == out.value
    _raises(mdr.OutOfRangeError, c.step_input_index, "nope")
    _raises(mdr.OutOfRangeError, c.sequence_bound, 0)
    # no inputs declared: the ids alone
    c2 = mdr.GraphCache(a, s)
    assert [m.name for m in c2.decode_meta()] == ["token_ids"]
    assert c2.max_sequences == M
    c2.step_inputs([1, 2, 3])
    s.synchronize()
    assert np.frombuffer(b.copy_d2h(c2.sequences_ptr, 4), np.uint32)[0] == 3
    c2.close(), c.close(), dev.close()


# ---- every bad input raises the right error, naming the field ----------------------------

def test_bad_step_inputs_at_create(host):
    b, s, a = host
    I, R = mdr.InvalidArgumentError, mdr.OutOfRangeError

    def make(*ins, **kw):
        return mdr.GraphCache(a, s, inputs=list(ins), **kw)

    def inp(**k):  # in fp8_act: an arena buffer outside the zero plan, 1024 bytes
        d = dict(name="x", dtype="int32", dest="fp8_act")
        d.update(k)
        return mdr.StepInput(**d)

    cases = [  # (error, what the text names, the inputs, options)
        (I, "name", [inp(name="")], {}),                          # from C
        (I, "token_ids", [inp(name="token_ids")], {}),            # from C
        (I, "duplicates", [inp(), inp(offset=1024)], {}),         # from C
        (I, "name", [inp(name=3)], {}),
        (I, "dtype", [inp(dtype="complex64")], {}),
        (I, "dtype", [inp(dtype=None)], {}),
        (I, "elem_size", [inp(dtype="int32", elem_size=2)], {}),
        (I, "elem_bytes", [inp(dtype=None, elem_size=3)], {}),    # from C
        (I, "shape", [inp(shape="per-token")], {}),
        (I, "max_rows", [inp(max_rows=M + 1)], {}),               # from C
        (I, "max_rows", [inp(shape="sequence", max_rows=5)], dict(max_sequences=4)),
        (I, "max_rows", [inp(shape="fixed")], {}),                # FIXED needs rows
        (I, "offset", [inp(offset=4)], {}),                       # not 16-byte aligned
        (I, "offset", [inp(offset=1024 - 16, width=4)], {}),      # runs past the buffer
        (I, "overlaps scratch, which the cache's zeroing clears", [inp(dest="scratch")], {}),
        (I, "overlaps inputs[0]'s destination", [inp(name="y", dest=ENG),
                                                 inp(dest=ENG, offset=32)], {}),  # from C
        (I, "dest", [inp(dest="no_such_buffer")], {}),
        (I, "dest", [inp(dest=None)], {}),
        (I, "buffer", [inp(dest="token_ids")], {}),               # from C
        (I, "buffer", [inp(dest="lora_xa")], {}),                 # a NULL buffer: from C
        (I, "dest", [inp(dest=1.5)], {}),
        (I, "address", [inp(dest=0)], {}),                        # from C
        (I, "address", [inp(dest=8)], {}),                        # unaligned: from C
        (I, "device", [inp(device="yes")], {}),
        (I, "device_src", [inp(device=24)], {}),                  # from C
        (R, "width", [inp(width=-1)], {}),
        (R, "pad", [inp(dtype="int8", pad=300)], {}),
        (I, "pad", [inp(dtype="float32", pad="x")], {}),
        (I, "overflows", [inp(width=1 << 40)], {}),               # from C
        (I, "max_sequences", [], dict(max_sequences=M + 1)),      # from C
        (I, "inputs[1]", [inp(), "not an input"], {}),
        (I, "n_inputs", [inp(name="i%d" % k, offset=64 * k) for k in range(17)], {}),
    ]
    for err, word, ins, kw in cases:
        e = _raises(err, make, *ins, **kw)
        assert word in str(e), (word, str(e))
    # the input named in the text
    e = _raises(I, make, inp(name="positions", offset=4))
    assert '"positions"' in e.text and "offset" in e.text
    _raises(R, mdr.GraphCache, a, s, inputs=[inp()], max_sequences=-1)


def test_bad_step_inputs_at_step(host):
    b, s, a = host
    I, R = mdr.InvalidArgumentError, mdr.OutOfRangeError
    c = mdr.GraphCache(a, s, mode="exact", inputs=inputs()[:4] + [
        mdr.StepInput("bf", "bfloat16", "token", pad=2.0, dest=ENG, offset=12288)],
        max_sequences=4)
    ok = dict(VALUES)
    del ok["slots"]
    ok["bf"] = [1.0, -2.5, 3.0]
    c.step_inputs([1, 2, 3], ok)
    s.synchronize()
    assert list(_at(12288, np.uint16, 3)) == [0x3F80, 0xC020, 0x4040]
    cases = [  # (error, what the text names, ids, values, keywords)
        (I, "slots", [1, 2, 3], dict(ok, slots=[1, 2, 3]), {}),          # unknown name
        (I, "token_ids", [1, 2, 3], dict(ok, token_ids=[1, 2, 3]), {}),
        (I, "positions", [1, 2, 3], {k: v for k, v in ok.items() if k != "positions"}, {}),
        (I, "positions", [1, 2, 3], dict(ok, positions=[1, 2]), {}),     # too few
        (I, "block_table", [1, 2, 3], dict(ok, block_table=[1, 2, 3, 4, 5]), {}),
        (I, "temperature", [1, 2, 3], dict(ok, temperature=[1.0]), {}),  # fixed: 4 rows
        (R, "positions", [1, 2, 3], dict(ok, positions=[1, 2, 1 << 31]), {}),
        (I, "positions", [1, 2, 3], dict(ok, positions=[1.5, 2, 3]), {}),
        (I, "positions", [1, 2, 3], dict(ok, positions=["a", "b", "c"]), {}),
        (I, "seq_lens", [1, 2, 3], dict(ok, seq_lens=[1.0, 2.0]), {}),
        (R, "seq_lens", [1, 2, 3], dict(ok, seq_lens=[-1, 2]), {}),
        (I, "bf", [1, 2, 3], dict(ok, bf=["x", "y", "z"]), {}),
        (R, "sequences", [1, 2, 3], ok, dict(sequences=0)),
        (R, "sequences", [1, 2], dict(ok, positions=[1, 2], bf=[0, 0]), dict(sequences=3)),
        (R, "sequences", [1] * 6, dict(ok, positions=[0] * 6, bf=[0] * 6,
                                       seq_lens=[1] * 5, block_table=[0] * 20), {}),
        (R, "tokens", [1, 2, 3], ok, dict(tokens=4)),
        (R, "tokens", [], dict(ok, positions=[], bf=[]), {}),
        (I, "values", [1, 2, 3], [1, 2], {}),                           # wrong length
        (I, "values", [1, 2, 3], 5, {}),
        (I, "tokens", None, ok, {}),                                    # device ids: tokens needed
    ]
    for err, word, ids, vals, kw in cases:
        e = _raises(err, c.step_inputs, ids, vals, **kw)
        assert word in str(e), (word, str(e))
    # rows over an input's max_rows: from C, naming it
    c2 = mdr.GraphCache(a, s, inputs=[mdr.StepInput("p", "int32", "token", max_rows=2,
                                                    dest=ENG)])
    e = _raises(R, c2.step_inputs, [1, 2, 3], {"p": [1, 2, 3]})
    assert '"p"' in e.text and "max_rows" in e.text
    # a plain step on a cache with host inputs: refused by C, naming the input
    e = _raises(I, c2.step, [1])
    assert '"p"' in e.text
    assert c.stats().steps == 1  # nothing refused was staged
    c2.close(), c.close()
    _raises(mdr.ClosedError, c.step_inputs, [1], ok)
    _raises(mdr.ClosedError, c.decode_meta)
