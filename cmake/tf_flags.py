"""Print TensorFlow's build flags as CMake `set()` commands.

Every compile and link flag opforge uses to talk to TensorFlow comes from
`tf.sysconfig`; nothing is guessed. CMake runs this once at configure time.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402


def cmake_list(items):
    return ";".join(i.replace(";", r"\;") for i in items)


includes, defines, other_cflags = [], [], []
cxx_std = "17"
for flag in tf.sysconfig.get_compile_flags():
    if flag.startswith("-I"):
        includes.append(flag[2:])
    elif flag.startswith("-D"):
        defines.append(flag[2:])
    elif flag.lstrip("-").startswith("std=c++"):
        cxx_std = flag.split("c++")[-1]
    else:
        other_cflags.append(flag)

link_dirs, link_libs, other_lflags = [], [], []
for flag in tf.sysconfig.get_link_flags():
    if flag.startswith("-L"):
        link_dirs.append(flag[2:])
    elif flag.startswith("-l"):
        link_libs.append(flag[2:])
    else:
        other_lflags.append(flag)

build_info = dict(tf.sysconfig.get_build_info())
abi = next((d.split("=", 1)[1] for d in defines if d.startswith("_GLIBCXX_USE_CXX11_ABI=")), "")
values = {
    "TF_VERSION": tf.__version__,
    "TF_INCLUDE_DIRS": cmake_list(includes),
    "TF_DEFINES": cmake_list(defines),
    "TF_OTHER_CFLAGS": cmake_list(other_cflags),
    "TF_CXX_STANDARD": cxx_std,
    "TF_LINK_DIRS": cmake_list(link_dirs),
    "TF_LINK_LIBS": cmake_list(link_libs),
    "TF_OTHER_LFLAGS": cmake_list(other_lflags),
    "TF_CXX11_ABI": abi,
    "TF_IS_CUDA_BUILD": "ON" if build_info.get("is_cuda_build") else "OFF",
    "TF_CUDA_VERSION": str(build_info.get("cuda_version", "")),
    "TF_COMPILE_FLAGS_JSON": json.dumps(tf.sysconfig.get_compile_flags()),
    "TF_LINK_FLAGS_JSON": json.dumps(tf.sysconfig.get_link_flags()),
}
out = sys.argv[1]
with open(out, "w") as f:
    for key, value in values.items():
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        f.write(f'set({key} "{escaped}")\n')
