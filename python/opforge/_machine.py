"""What machine a figure was measured on: the CPU model and the instruction sets that pick
opforge's and TensorFlow's kernels. Below every layer that prints a figure (the benchmarks, the
YOLO demo)."""
from __future__ import annotations

import os
from typing import Set, Tuple

def cpu_flags() -> Tuple[str, Set[str]]:
    """The CPU model and the flags of /proc/cpuinfo (its first processor)."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown CPU":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model, flags


def machine() -> str:
    """The CPU model, the vector extensions that matter here, and whether it has AVX512-BF16
    (`avx512_bf16`: bfloat16 dot products in AVX-512) and AMX (`amx_tile` with `amx_bf16`: the
    tile units that oneDNN's bfloat16 matrix products use); figures hold for this CPU. The one
    source of every benchmark's `machine:` line, e.g. `AMD EPYC 9R14, 2 cores, avx avx2 fma
    avx512f avx512_bf16; AVX512-BF16: yes, AMX: no`."""
    model, flags = cpu_flags()
    isa = [name for name in ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
           if name in flags]
    line = f"{model}, {os.cpu_count()} cores, {' '.join(isa) or 'no AVX'}"
    bf16 = "yes" if "avx512_bf16" in flags else "no"
    if "amx_tile" in flags:
        amx = "yes" if "amx_bf16" in flags else "tiles without amx_bf16"
    else:
        amx = "no"
    line += f"; AVX512-BF16: {bf16}, AMX: {amx}"
    caps = [f"{var}={os.environ[var]}" for var in ("OPFORGE_MAX_ISA", "ONEDNN_MAX_CPU_ISA") if os.environ.get(var)]
    if caps:
        line += f" (capped: {' '.join(caps)})"
    return line
