"""Past one runner: who measures which cell (``plan``), and one run from the shards'
outputs (``merge``).

A run with ``--perfguard-shard=K/N`` measures the K-th of N cost-balanced subsets of
the collected cells and writes its plan beside its results; ``perfguard merge`` checks
the shards' outputs against each other and writes the one set of files a single run
would have written.
"""
