"""``python -m perfguard.worker``: serve protocol requests from stdin until ``bye`` or EOF.

The protocol gets private file descriptors before anything else runs: the real
stdout is duplicated for the replies and fd 1 (and ``sys.stdout``) then point at
stderr, and stdin is duplicated for the requests and fd 0 then reads
``/dev/null``. A ``print`` in the user's model, a native library writing to fd
1, or a child process it starts can so never corrupt (or steal from) the
protocol; all of that lands in the worker's stderr, which the parent keeps.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

from perfguard.core.signals import LIFELINE_ENV, watch_parent
from perfguard.worker.serve import Server


def _take_protocol_fds() -> tuple[int, int]:
    """(requests fd, replies fd), private to this process (not inherited by children)."""
    sys.stdout.flush()
    replies = os.dup(1)  # os.dup returns a non-inheritable descriptor
    requests = os.dup(0)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr  # line-buffered: prints arrive before a crash, in order
    return requests, replies


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main() -> int:
    requests_fd, replies_fd = _take_protocol_fds()
    # A segfault in native code leaves a Python traceback in stderr (the parent
    # quotes its tail), then the signal kills the process as it would have. The
    # crashing thread's only: idle threads (the lifeline's) would push it out of the tail.
    faulthandler.enable(file=sys.stderr, all_threads=False)
    if hasattr(faulthandler, "register"):  # the parent's timeout asks for the stacks
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)

    # A parent killed outright (SIGKILL, OOM) ends this worker and its children at once,
    # even mid-request; the variable is not passed on to the processes a model starts.
    watch_parent(os.environ.pop(LIFELINE_ENV, None))
    server = Server()
    try:
        with os.fdopen(requests_fd, "rb") as requests:
            for line in requests:
                if not line.strip():
                    continue
                _write_all(replies_fd, server.handle_line(line))
                if server.stop:
                    break
    except BrokenPipeError:  # the parent is gone: nobody to answer
        return 1
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
