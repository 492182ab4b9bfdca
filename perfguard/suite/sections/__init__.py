"""The parsers of a suite's sections (``models:``, ``accuracy:``, ``load:``, ``gpu:``), one per
module, each called by :mod:`perfguard.suite.loader`."""
