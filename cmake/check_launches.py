"""Fails unless every CUDA kernel (__global__) under cc/ was launched by the CUDA tests on the
SIMT runtime, and run in two orders by its order check at least once: compares the kernels the
sources define with the counts the test binary wrote (OPFORGE_SIMT_LAUNCHES, one file per shard:
source, kernel, launches, launches checked in two orders).

    python cmake/check_launches.py SOURCE_ROOT COUNTS_FILE...

A kernel is named by the source that launches it (cc/... relative, the file that defines it:
opforge's kernels are launched where they are written) and its name.
"""

import pathlib
import re
import sys

KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")


def defined_kernels(root):
    """{(relative file, kernel name)} of the __global__ functions in root/cc (tests excluded)."""
    root = pathlib.Path(root)
    found = set()
    for path in sorted((root / "cc").rglob("*")):
        if path.suffix not in (".cu", ".cuh") or path.name.endswith("_test.cu"):
            continue
        text = path.read_text()
        for name in KERNEL.findall(text):
            found.add((path.relative_to(root).as_posix(), name))
    return found


def launched_kernels(files):
    """{(file, kernel): (launches, launches checked in two orders)} summed over the count files."""
    counts = {}
    for f in files:
        for line in pathlib.Path(f).read_text().splitlines():
            if not line.strip():
                continue
            source, kernel, n, checked = line.split("\t")
            launches, ordered = counts.get((source, kernel), (0, 0))
            counts[(source, kernel)] = (launches + int(n), ordered + int(checked))
    return counts


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    kernels = defined_kernels(argv[1])
    counts = launched_kernels(argv[2:])
    never = sorted(k for k in kernels if counts.get(k, (0, 0))[0] == 0)
    unordered = sorted(k for k in kernels if k not in never and counts[k][1] == 0)
    print(
        f"check_launches: {len(kernels) - len(never)} of {len(kernels)} CUDA kernels launched, "
        f"{sum(counts.get(k, (0, 0))[0] for k in kernels)} launches; "
        f"{len(kernels) - len(never) - len(unordered)} run in two orders "
        f"({sum(counts.get(k, (0, 0))[1] for k in kernels)} launches)"
    )
    for source, kernel in never:
        print(f"  never launched: {kernel} ({source})")
    for source, kernel in unordered:
        print(f"  never run in two orders (the order check): {kernel} ({source})")
    return 1 if never or unordered else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
