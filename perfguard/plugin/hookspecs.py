"""perfguard's own hooks, for projects to implement in a ``conftest.py`` or a plugin.

Registered through ``pytest_addhooks``; see pytest-xdist's ``newhooks.py`` for
the pattern. Every hook is optional.
"""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=False)
def pytest_perfguard_environment(config: pytest.Config) -> dict[str, str] | None:
    """Return extra environment fields that must match for two runs to be compared.

    They join the comparable part of the environment fingerprint: a baseline
    measured with other values is ``incomparable``, and the report lists the
    field. Use it for what perfguard cannot see, e.g. a container image tag,
    a CPU-pinning policy or a model-server version::

        def pytest_perfguard_environment(config):
            return {"image": os.environ.get("CI_IMAGE", "local")}

    Results of all implementations are merged; on a clash the later wins.
    """
    raise NotImplementedError
