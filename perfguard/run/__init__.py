"""A cell's course and a run's, once for the pytest plugin and the ``perfguard`` command:
measuring and judging one cell, and what its outcome means for the run (``cell``)."""
