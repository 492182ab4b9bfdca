"""What a cell's test item carries (perfguard.plugin.items)."""

from __future__ import annotations

import dataclasses

from perfguard.plugin.items import junit_properties
from perfguard.records.accuracyfigures import AccuracyFigures
from tests.helpers.results import scenario


def test_junit_says_when_accuracy_checks_were_not_made() -> None:
    """A degenerate reference leaves accuracy "passed" (nothing failed) but inconclusive:
    JUnit says so, rather than a bare perfguard_accuracy_passed=True."""
    cell = scenario("s.yaml::m")
    why = ("accuracy on output 0 not checked: reference r is degenerate (near zero)",)
    props = dict(junit_properties(dataclasses.replace(cell, accuracy=AccuracyFigures(
        n=4, inconclusive=why)), None))  # fmt: skip
    assert props["perfguard_accuracy_passed"] is True
    assert props["perfguard_accuracy_inconclusive"] is True
    checked = dict(junit_properties(dataclasses.replace(cell, accuracy=AccuracyFigures(n=4)), None))
    assert "perfguard_accuracy_inconclusive" not in checked
