"""Measurement: warm-up and the timed loop, load generation and its figures, GPU watch, the CPU
canary and peak memory. Produces ``ScenarioResult`` records."""
