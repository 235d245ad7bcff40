"""Totals of a fuzz run from its `KT_FUZZ_LOG` file (one JSON line per program).

    python -m tests.fuzz.report .fuzz/last.jsonl

Prints programs by construct class and outcome, then each failing program
(mismatch, internal error, oracle failure) with its message. Exits 1 when
any program failed, so `make fuzz` fails too.
"""

from __future__ import annotations

import collections
import json
import sys

from tests.fuzz.check import FAILURES, KINDS


def main(path: str) -> int:
    with open(path) as f:
        entries = [json.loads(line) for line in f if line.strip()]
    counts = collections.Counter((e["construct"], e["kind"]) for e in entries)
    constructs = sorted({c for c, _ in counts})
    print(f"{'construct':<16}{'programs':>9}" + "".join(f"{k:>10}" for k in KINDS))
    for c in constructs:
        row = [counts[(c, k)] for k in KINDS]
        print(f"{c:<16}{sum(row):>9}" + "".join(f"{n:>10}" for n in row))
    totals = [sum(counts[(c, k)] for c in constructs) for k in KINDS]
    print(f"{'total':<16}{len(entries):>9}" + "".join(f"{n:>10}" for n in totals))
    failed = [e for e in entries if e["kind"] in FAILURES]
    for e in failed:
        print(f"\n{e['construct']} / {e['kind']} / {e['check']}: {e['message']}\n{e['source']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
