"""Suite files: bounded YAML loading with positions, the suite grammar, matrix expansion into
cells, and ``file:line`` errors with did-you-mean."""
