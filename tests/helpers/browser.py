"""Chromium for a closed network."""

from __future__ import annotations

# Flags for a closed network: no background traffic to Google's services.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
