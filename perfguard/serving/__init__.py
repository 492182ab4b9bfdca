"""Served models' plumbing: the server process a cell starts and stops, and the HTTP
client of the OpenAI-compatible API (``perfguard.backends.served`` puts them together)."""
