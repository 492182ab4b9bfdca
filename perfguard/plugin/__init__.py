"""The pytest plugin: hooks (``perfguard.plugin.hooks`` is the ``pytest11`` entry point), the
run's state, scenario items and the hook specifications."""
