"""Interoperation with pytest-benchmark: its fixture bridged into perfguard results, and its JSON
format written from ours."""
