"""Same-run A/B: the base revision in a temporary worktree, paired statistics with a sequential
stopping rule, and the session flow that interleaves both sides."""
