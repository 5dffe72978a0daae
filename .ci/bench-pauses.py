"""Fails unless every timed batch of a multi-threaded bench run came after a pause.

Reads the JSON of `cargo xtask bench --threads T --op all --json PATH`. Before each batch the
bench waits until no other thread of the process is runnable, so that a pool's worker still
spinning after the previous library's batch does not share a core with the next one. The
low-precision comparison once skipped that wait, and oneDNN's OpenMP worker then halved
keepalloc's two-thread figures in some runs. This reads the pauses the run recorded, so it
judges what the bench did, not what its code says.
"""

import json
import math
import sys


def batches(run):
    """Yields (where, pause_ms) for every timed batch in the run."""
    for shape in run.get("shapes", []):
        label = f"f32 {shape['m']}x{shape['k']}x{shape['n']}"
        for lib, cell in shape["results"].items():
            for pause in cell.get("round_pause_ms", []):
                yield f"{label} {lib}", pause
    for op in (run.get("low_precision") or {}).get("ops", []):
        for row in op["rows"]:
            label = f"{op['op']} {'x'.join(map(str, row['shape']))}"
            for lib, cell in row["gops"].items():
                for pause in cell.get("round_pause_ms", []):
                    yield f"{label} {lib}", pause


def main(path):
    run = json.load(open(path))
    seen = {"f32": 0, "low precision": 0}
    bad = []
    for where, pause in batches(run):
        seen["f32" if where.startswith("f32 ") else "low precision"] += 1
        if pause is None or math.isnan(pause) or pause <= 0:
            bad.append(f"{where}: pause {pause}")
    missing = [part for part, n in seen.items() if n == 0]
    if missing or bad:
        for part in missing:
            print(f"bench-pauses: no {part} batch in {path}")
        for line in bad[:10]:
            print(f"bench-pauses: batch without a pause: {line}")
        print(f"bench-pauses: FAILED ({len(bad)} of {sum(seen.values())} batches)")
        return 1
    print(f"bench-pauses: every one of {sum(seen.values())} batches came after a pause "
          f"({seen['f32']} f32, {seen['low precision']} low-precision)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
