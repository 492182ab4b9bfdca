"""perfguard: continuous performance-regression testing of ML models, as a pytest plugin."""

from __future__ import annotations

__version__ = "0.1.0"
