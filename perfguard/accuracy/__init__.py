"""Accuracy against a reference: metrics, golden outputs and their gates."""
