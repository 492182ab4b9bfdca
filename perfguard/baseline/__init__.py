"""The baseline archive: per-commit launches under ``baselines/<fingerprint>/``, the file format,
and the git ancestry that finds the nearest baselined commit."""
