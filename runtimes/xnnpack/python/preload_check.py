"""ExecuTorch's XNNPACK from a Python process through ctypes, with or without
LD_PRELOAD=libkeepalloc_preload.so.

    python3 preload_check.py XNNPACK_BACKEND_SO LIBKEEPALLOC_SO adopted|none

ctypes.CDLL loads the runtime with RTLD_LOCAL, as an import would: its XnnpackBackend
constructor calls xnn_initialize(NULL) inside that dlopen. Then an XNNPACK subgraph
(two fully-connected nodes) is created, run twice with its outputs checked against a plain
reference, and deleted, and keepalloc's counters are read from the shared libkeepalloc (the
same object the preload links, found in the process's global scope, so one owner):

* "adopted": the subgraph's allocations went through the owner and live bytes are back to
  zero after the deletes;
* "none": the owner saw no allocation.

Signatures: google/XNNPACK's xnnpack.h of 2025-06 to 2026-08. Exit status 0 when every check
passed, 1 otherwise.
"""

import ctypes
import math
import sys
import time

XNN_DATATYPE_FP32 = 1
XNN_VALUE_FLAG_EXTERNAL_INPUT = 1
XNN_VALUE_FLAG_EXTERNAL_OUTPUT = 2
XNN_INVALID_VALUE_ID = 0xFFFFFFFF


class Stats(ctypes.Structure):
    """keepalloc_stats (keepalloc.h)."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "owners_constructed",
            "init_attempts",
            "init_successes",
            "allocations",
            "deallocations",
            "live_bytes",
            "peak_bytes",
        )
    ]


class ExternalValue(ctypes.Structure):
    """struct xnn_external_value."""

    _fields_ = [("id", ctypes.c_uint32), ("data", ctypes.c_void_p)]


def value(i, seed):
    return ((i * 7 + seed * 13) % 17) / 8.0 - 1.0


def floats(n, seed):
    # XNN_EXTRA_BYTES: XNNPACK may read 16 bytes past an input.
    return (ctypes.c_float * (n + 4))(*[value(i, seed) for i in range(n)])


def reference(x, w, b, n_in, n_out, batch, lo, hi):
    y = []
    for n in range(batch):
        for o in range(n_out):
            dot = b[o] + sum(x[n * n_in + k] * w[o * n_in + k] for k in range(n_in))
            y.append(min(max(dot, lo), hi))
    return y


def check(status, what):
    if status != 0:
        sys.exit(f"FAIL: {what}: status {status}")


def subgraph(xnn):
    batch, n_in, hidden, n_out = 3, 19, 23, 7
    x, w1, b1 = floats(batch * n_in, 1), floats(hidden * n_in, 2), floats(hidden, 3)
    w2, b2 = floats(n_out * hidden, 4), floats(n_out, 5)
    sg = ctypes.c_void_p()
    check(xnn.xnn_create_subgraph(2, 0, ctypes.byref(sg)), "xnn_create_subgraph")

    def tensor(dims, data, external_id, flags):
        out = ctypes.c_uint32()
        d = (ctypes.c_size_t * len(dims))(*dims)
        check(
            xnn.xnn_define_tensor_value(
                sg, XNN_DATATYPE_FP32, len(dims), d, data, external_id, flags, ctypes.byref(out)
            ),
            "xnn_define_tensor_value",
        )
        return out.value

    ix = tensor([batch, n_in], None, 0, XNN_VALUE_FLAG_EXTERNAL_INPUT)
    iw1 = tensor([hidden, n_in], w1, XNN_INVALID_VALUE_ID, 0)
    ib1 = tensor([hidden], b1, XNN_INVALID_VALUE_ID, 0)
    ih = tensor([batch, hidden], None, XNN_INVALID_VALUE_ID, 0)
    iw2 = tensor([n_out, hidden], w2, XNN_INVALID_VALUE_ID, 0)
    ib2 = tensor([n_out], b2, XNN_INVALID_VALUE_ID, 0)
    iy = tensor([batch, n_out], None, 1, XNN_VALUE_FLAG_EXTERNAL_OUTPUT)
    fc = xnn.xnn_define_fully_connected
    fc.argtypes = [ctypes.c_void_p, ctypes.c_float, ctypes.c_float] + [ctypes.c_uint32] * 5
    check(fc(sg, -1.0, 1.0, ix, iw1, ib1, ih, 0), "FC 1")
    check(fc(sg, -math.inf, math.inf, ih, iw2, ib2, iy, 0), "FC 2")
    rt = ctypes.c_void_p()
    check(xnn.xnn_create_runtime_v2(sg, None, 0, ctypes.byref(rt)), "xnn_create_runtime_v2")
    h = reference(x, w1, b1, n_in, hidden, batch, -1.0, 1.0)
    want = reference(h, w2, b2, hidden, n_out, batch, -math.inf, math.inf)
    y = (ctypes.c_float * (batch * n_out))()
    for _ in range(2):
        for i in range(len(y)):
            y[i] = math.nan
        ext = (ExternalValue * 2)(
            ExternalValue(ix, ctypes.cast(x, ctypes.c_void_p)),
            ExternalValue(iy, ctypes.cast(y, ctypes.c_void_p)),
        )
        check(xnn.xnn_reshape_runtime(rt), "xnn_reshape_runtime")
        check(xnn.xnn_setup_runtime_v2(rt, 2, ext), "xnn_setup_runtime_v2")
        check(xnn.xnn_invoke_runtime(rt), "xnn_invoke_runtime")
        for i, (got, exp) in enumerate(zip(y, want)):
            if not abs(got - exp) <= 1e-4 * (1.0 + abs(exp)):
                sys.exit(f"FAIL: subgraph y[{i}] = {got}, want {exp}")
    check(xnn.xnn_delete_runtime(rt), "xnn_delete_runtime")
    check(xnn.xnn_delete_subgraph(sg), "xnn_delete_subgraph")


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("adopted", "none"):
        sys.exit(__doc__)
    runtime, keepalloc, expect = sys.argv[1:]
    start = time.monotonic()
    xnn = ctypes.CDLL(runtime)  # RTLD_LOCAL: the constructor runs inside this dlopen
    # The owner is the libkeepalloc the preload brought into the global scope, whichever file
    # the loader found for it; without the preload, the one named on the command line.
    try:
        k = ctypes.CDLL(None)
        k.keepalloc_get_stats
    except AttributeError:
        k = ctypes.CDLL(keepalloc)
    copy = b"xnnpack@" + runtime.rsplit("/", 1)[-1].encode()

    def stats():
        s = Stats()
        k.keepalloc_get_stats(ctypes.byref(s))
        return s

    before = stats()
    subgraph(xnn)
    after = stats()
    allocations = after.allocations - before.allocations
    frees = after.deallocations - before.deallocations
    adopted = k.keepalloc_library_initialized(copy)
    print(
        f"python ctypes: {allocations} allocations through the owner for the subgraph, "
        f"{frees} frees; live bytes {before.live_bytes} before, {after.live_bytes} after "
        f"the deletes; copy adopted: {adopted}; {time.monotonic() - start:.3f} s"
    )
    if expect == "adopted":
        if allocations == 0 or frees != allocations or after.live_bytes != 0 or not adopted:
            sys.exit("FAIL: with the preload the subgraph allocates through the owner and "
                     "gives every byte back")
    elif after.allocations != 0 or adopted:
        sys.exit("FAIL: without the preload the owner must see no allocation")
    print(f"python ctypes: {'adopted' if expect == 'adopted' else 'no allocation through keepalloc'}, as expected")


main()
