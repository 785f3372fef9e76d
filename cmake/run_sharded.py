"""Runs a GoogleTest binary in N shards at once (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), one
per core, and prints each shard's output when it ends; fails if any shard fails.

    python cmake/run_sharded.py N BINARY [GTEST_ARGS...] [-- NAME=VALUE ...]
"""

import os
import subprocess
import sys
import time


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    shards = int(argv[1])
    rest = argv[2:]
    env_args = []
    if "--" in rest:
        cut = rest.index("--")
        rest, env_args = rest[:cut], rest[cut + 1 :]
    env = dict(os.environ)
    for assignment in env_args:
        name, _, value = assignment.partition("=")
        env[name] = value
    start = time.monotonic()
    procs = []
    for index in range(shards):
        shard_env = dict(env, GTEST_TOTAL_SHARDS=str(shards), GTEST_SHARD_INDEX=str(index))
        procs.append(
            subprocess.Popen(
                rest, env=shard_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    failed = []
    for index, proc in enumerate(procs):
        out, _ = proc.communicate()
        print(f"--- shard {index + 1} of {shards} (exit {proc.returncode}) ---")
        print(out, end="" if out.endswith("\n") else "\n")
        if proc.returncode != 0:
            failed.append(index + 1)
    took = time.monotonic() - start
    if failed:
        print(f"run_sharded: shard(s) {failed} of {shards} failed ({took:.0f} s)")
        return 1
    print(f"run_sharded: {shards} shards passed ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
