"""Judging: comparison of a run with its baseline, verdict records and the gatekeeper that reads
the archive once per session."""
