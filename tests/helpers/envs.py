"""Environments for test runs that are written to disk and read back.

perfguard refuses a stored environment whose fingerprint is not the hash of its
``comparable`` fields (``Environment.check``), so a stored test run cannot carry a
made-up fingerprint: it names its environment, and the fingerprint follows.
"""

from __future__ import annotations

from perfguard.records.results import Environment


def stored_env(name: str = "test", **recorded: str) -> Environment:
    """A consistent environment: comparable ``{"cpu": name}``, ``recorded`` as given."""
    return Environment.of({"cpu": name}, recorded)


def fp(name: str = "test") -> str:
    """The fingerprint of :func:`stored_env` ``(name)``."""
    return stored_env(name).fingerprint
