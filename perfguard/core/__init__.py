"""The core every other part builds on: the exception tree, the frozen scenario spec, result
records, the one percentile definition and statistics, atomic file io and the compressed-array
codec. Imports nothing else of perfguard."""
