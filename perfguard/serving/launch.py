"""``python -m perfguard.serving.launch COMMAND...``: run a server's command so that it
ends with perfguard: ask the kernel for SIGTERM at the parent's death, then ``exec``.

``perfguard.serving.process.ServerProcess`` starts every server through here; a
perfguard killed outright (SIGKILL, the OOM killer) then still stops its servers.
"""

from __future__ import annotations

import os
import signal
import sys

from perfguard.core.signals import end_with_parent


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m perfguard.serving.launch COMMAND [ARGS...]")
    end_with_parent(signal.SIGTERM)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.exit(f"perfguard: cannot run the server command {argv[0]!r}: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
