"""The core every other part builds on: the exception tree, the frozen scenario spec, result
records (``results``; their typed parts in ``figures``, ``loadfigures`` and
``accuracyfigures``), the one percentile definition and statistics, rootdir-relative paths,
atomic file io and the compressed-array codec. Imports nothing else of perfguard."""
