"""What opforge's CUDA kernels run on, read from the loaded module (`opforge doctor`).

Three facts a GPU build depends on, each read from the binary rather than from the build's
notes:
- the CUDA runtime the kernels register and launch through: its version and the binary that
  holds it (`OpforgeCudaInfo` in the module asks the runtime it is linked to, and `dladdr` names
  the file that runtime lives in: `_opforge_ops.so` itself, since the static runtime is linked
  privately; a runtime bound from TensorFlow's libtensorflow_framework.so.2 would show there);
- the CUDA version of the driver, and the devices with their compute capabilities;
- the code compiled in: the entries of the module's `.nv_fatbin` ELF section (`sm_90`: machine
  code for that architecture; `compute_75`: PTX, compiled by the driver for newer ones).
"""
from __future__ import annotations

import ctypes
import json
import struct
from typing import Dict, List, Optional

_FATBIN_MAGIC = 0xBA55ED50
_KIND_PTX, _KIND_ELF = 1, 2


def _section(data: bytes, wanted: str) -> Optional[bytes]:
    """The bytes of ELF64 section `wanted` of `data`, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
               for i in range(shnum)]
    names = headers[shstrndx][4]
    for header in headers:
        start = names + header[0]
        if data[start:data.index(b"\0", start)].decode() == wanted:
            return data[header[4]:header[4] + header[5]]
    return None


def fatbin_targets(path) -> List[str]:
    """The GPU targets compiled into the ELF file at `path`, sorted: `sm_NN` for machine code
    (cubin), `compute_NN` for PTX; [] when it holds no CUDA code."""
    with open(path, "rb") as f:
        data = f.read()
    section = _section(data, ".nv_fatbin")
    if not section:
        return []
    targets = set()
    pos = 0
    while pos + 16 <= len(section):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", section, pos)
        if magic != _FATBIN_MAGIC:
            break
        entry, end = pos + header_size, pos + header_size + fat_size
        while entry + 32 <= end:
            kind, _v, entry_header, payload = struct.unpack_from("<HHIQ", section, entry)
            arch = struct.unpack_from("<I", section, entry + 28)[0]
            if kind == _KIND_ELF:
                targets.add(f"sm_{arch}")
            elif kind == _KIND_PTX:
                targets.add(f"compute_{arch}")
            entry += entry_header + payload
        pos = (end + 7) // 8 * 8  # containers are 8-byte aligned
    return sorted(targets, key=lambda t: (int(t.split("_")[1]), t))


def _version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}" if code > 0 else "none"


def module_info(path: str) -> Dict:
    """What the already loaded module at `path` reports about its CUDA runtime, the driver and
    the devices (`gpu_binding` False for a build without GPU kernels), plus `targets`."""
    path = str(path)
    lib = ctypes.CDLL(path)  # the handle of the module TensorFlow loaded, not a second copy
    fn = lib.OpforgeCudaInfo
    fn.argtypes, fn.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
    size = fn(None, 0) + 1
    buf = ctypes.create_string_buffer(size)
    fn(buf, size)
    info = json.loads(buf.value.decode())
    info["targets"] = fatbin_targets(path)
    if info.get("gpu_binding"):
        info["runtime"] = _version(info["runtime_version"])
        info["driver"] = _version(info["driver_version"])
    return info


def runs_on(capability: int, targets: List[str]) -> str:
    """How a device of compute capability `capability` (e.g. 90) runs the compiled `targets`."""
    if f"sm_{capability}" in targets:
        return f"machine code for sm_{capability}"
    same_major = [t for t in targets if t.startswith("sm_")
                  and int(t[3:]) // 10 == capability // 10 and int(t[3:]) <= capability]
    if same_major:
        return f"machine code for {same_major[-1]} (compatible within the major version)"
    ptx = [t for t in targets if t.startswith("compute_") and int(t[8:]) <= capability]
    if ptx:
        return f"PTX {ptx[-1]}, compiled by the driver at the first launch"
    return "NO compatible code: the kernels cannot run on this device"


def describe(path: str) -> List[str]:
    """The doctor's lines about the module's CUDA side."""
    info = module_info(path)
    if not info.get("gpu_binding"):
        return ["GPU kernels:          not in this build"]
    lines = [
        f"CUDA runtime:         {info['runtime']} (the kernels' own, static, in "
        f"{info['runtime_in']})",
        f"CUDA driver:          {info['driver']}"
        + ("" if info["driver_version"] else " (no NVIDIA driver found)"),
        f"compiled GPU code:    {', '.join(info['targets']) or 'none'}",
    ]
    if info["driver_version"] and info["driver_version"] < info["runtime_version"]:
        lines.append(f"WARNING: the driver (CUDA {info['driver']}) is older than the kernels' "
                     f"runtime (CUDA {info['runtime']}): GPU kernels will fail to launch; update "
                     "the driver or rebuild with an older nvcc")
    if info.get("device_error") and info["driver_version"]:
        lines.append(f"devices:              {info['device_error']}")
    for i, device in enumerate(info.get("devices", [])):
        cap = device["capability"]
        lines.append(f"GPU {i}:                {device['name']}, compute capability "
                     f"{cap // 10}.{cap % 10}, {device['memory_bytes'] / 2**30:.0f} GiB: "
                     f"{runs_on(cap, info['targets'])}")
    return lines
