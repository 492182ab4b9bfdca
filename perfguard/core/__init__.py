"""The core every other part builds on: the exception tree and who owns an exception
(``blame``), the judging policy and every limit (``policy``), the frozen scenario spec, the
one percentile definition and statistics, rootdir-relative paths, atomic file io, sanitised
text and progress events. Imports nothing else of perfguard."""
