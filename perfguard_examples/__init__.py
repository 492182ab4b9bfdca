"""Example models for perfguard's example suite; all load offline."""
