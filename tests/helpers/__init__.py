"""Helpers shared by perfguard's tests (never import one test module from another)."""
