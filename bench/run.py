"""Run benchmark modules and write their results as JSON.

    python -m bench.run            # every bench/*.py with a `run()` function
    python -m bench.run loops      # just bench/loops.py

Each module's `run() -> dict` returns its measurements; they are written to
bench/results/<module>.json (or under `$KT_BENCH_RESULTS`: the GPU runs write
bench/results/gpu/); a module's `summary(results)`, if any, is printed.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = Path(os.environ.get("KT_BENCH_RESULTS", BENCH_DIR / "results"))
NOT_BENCHMARKS = {"__init__", "run"}


def available() -> list[str]:
    """Modules under bench/ that define a top-level `run()`."""
    return sorted(
        p.stem
        for p in BENCH_DIR.glob("*.py")
        if p.stem not in NOT_BENCHMARKS and "\ndef run(" in p.read_text()
    )


def run_module(name: str) -> Path:
    module = importlib.import_module(f"bench.{name}")
    results = module.run()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    if hasattr(module, "summary"):
        print(module.summary(results))
    print(f"wrote {path}")
    return path


def main(argv: list[str]) -> None:
    names = argv or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        raise SystemExit(f"unknown benchmarks {unknown}; available: {available()}")
    for name in names:
        run_module(name)


if __name__ == "__main__":
    main(sys.argv[1:])
