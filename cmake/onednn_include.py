"""Prints the folder that holds oneDNN's C API headers (oneapi/dnnl/dnnl.h) as PyPI's
onednn-devel-cpu-gomp installed them (under the environment's or a build overlay's include/),
or this Python's prefix/include when that package is not installed."""
import sys

try:
    import importlib.metadata as metadata

    dist = metadata.distribution("onednn-devel-cpu-gomp")
    for f in dist.files or ():
        if str(f).replace("\\", "/").endswith("oneapi/dnnl/dnnl.h"):
            print(dist.locate_file(f).resolve().parents[2])
            sys.exit(0)
except Exception:  # not installed: fall through
    pass
print(f"{sys.prefix}/include")
