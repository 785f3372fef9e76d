"""Reading a child process that runs calls one at a time (`opforge fuzz`, `opforge check`): both
pipes unbuffered, and a hang detected by a clock that runs only while a call is under way."""
from __future__ import annotations

import os
import select
import subprocess
import time
from typing import Callable, Optional, Tuple

# What a line of the child's stdout means for the hang clock.
START = "start"  # a call starts: the clock (re)starts
PROGRESS = "progress"  # the call got further (imports done, say): the clock restarts
DONE = "done"  # the call ended: the clock stops


def pump(proc: subprocess.Popen, timeout: float, on_line: Callable[[str], Optional[str]]) -> Tuple[bool, bytes]:
    """Feeds each stdout line of `proc` to `on_line` (which returns START, PROGRESS, DONE or None)
    and keeps the last 4000 bytes of stderr (read as it comes: a full stderr pipe would block the
    child). Kills the child when a call runs `timeout` seconds without progress. Waits for the
    child; returns (hung, stderr tail)."""
    running, last, hung = False, time.monotonic(), False
    pending, stderr_tail = b"", b""
    streams = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err"}
    while streams:
        ready, _, _ = select.select(list(streams), [], [], 1.0)
        if not ready:
            if running and time.monotonic() - last > timeout:
                proc.kill()
                hung = True
                break
            continue
        for fd in ready:
            data = os.read(fd, 1 << 16)
            if not data:
                del streams[fd]
                continue
            if streams[fd] == "err":
                stderr_tail = (stderr_tail + data)[-4000:]
                continue
            pending += data
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                event = on_line(raw.decode(errors="replace"))
                if event in (START, PROGRESS):
                    running, last = True, time.monotonic()
                elif event == DONE:
                    running = False
    proc.wait()
    return hung, stderr_tail
