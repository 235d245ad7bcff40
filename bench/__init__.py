"""Benchmarks: `python -m bench.run [name ...]` writes bench/results/<name>.json."""
