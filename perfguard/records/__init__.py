"""Stored records: what a run produces and keeps, each declared once (``declare``) for its
JSON form, its read-time checks and its JSON Schema: a cell's figures (``figures``,
``loadfigures``, ``accuracyfigures``, ``opprofile``), the run's results (``results``) and
``results.json`` on disk (``resultsfile``); compact arrays (``arrays``)."""
