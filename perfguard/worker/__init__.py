"""Worker processes: one scenario cell measured in a child process of its own.

The parent (``WorkerProcess``) talks to ``python -m perfguard.worker`` over a
small, versioned protocol of newline-delimited JSON on pipes (plain data, never
pickles of user objects), so the child can run other code (a git revision's
worktree) or another Python. See ``perfguard.worker.protocol`` for the format
and ``perfguard.worker.serve`` for the ops.
"""

from __future__ import annotations

from perfguard.worker.client import DEFAULT_TIMEOUT_S, WorkerProcess
from perfguard.worker.protocol import OPS, PROTOCOL_VERSION, describe_exit

__all__ = ["DEFAULT_TIMEOUT_S", "OPS", "PROTOCOL_VERSION", "WorkerProcess", "describe_exit"]
