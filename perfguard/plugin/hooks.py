"""pytest hooks only: options, ini keys, and the hand-off to the run's state.

This module is the ``pytest11`` entry point, so it is imported by every pytest run
of a project that has perfguard installed. It imports only what registering the
options needs; without ``--perfguard`` nothing else of perfguard is ever imported,
collected or run. With it, ``pytest_configure`` loads ``perfguard.plugin.state``,
which registers one ``PerfguardSession`` for the run (it keeps all state).

Option precedence, for every setting: command line > ini key in
``[tool.pytest.ini_options]`` (or pytest.ini/tox.ini/setup.cfg) > built-in default.
"""

from __future__ import annotations

import importlib

import pytest

from perfguard.plugin import hookspecs
from perfguard.plugin.options import add_options, enabled

# Imported by name, on purpose: a top-level import would pull numpy, scipy, jinja2
# and yaml into every pytest run, with or without --perfguard (~1 s). These two are the
# deliberate exceptions to "perfguard's own imports at the top of the module".
STATE_MODULE = "perfguard.plugin.state"
# Loaded the same way, and first: it places a pytest-xdist worker on its cores before
# the state imports numpy (whose BLAS starts its threads on import) or a runtime.
PINNING_MODULE = "perfguard.plugin.pinning"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perfguard: a perfguard model scenario cell")
    if enabled(config):
        importlib.import_module(PINNING_MODULE).configure(config)
        importlib.import_module(STATE_MODULE).configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    if enabled(config):
        importlib.import_module(STATE_MODULE).unconfigure(config)
