"""Run MindSpore's own test files against real MindSpore or k_transform.mindspore.

The runner for issue 30's measurement. It holds none of MindSpore's test code:
point it at a directory of MindSpore test files (for example
`tests/st/compiler/gradient` and `tests/st/compiler/control` exported from a
MindSpore checkout) and it will

1. copy every file into a fresh temporary directory, keeping sub-folders;
2. in the default mode rewrite only the import statements, so that
   `import mindspore...` and `from mindspore... import` name
   `k_transform.mindspore...` instead (the name the test binds is unchanged);
   with `--mindspore` the files stay byte-identical;
3. provide a stub `tests.mark_utils.arg_mark` (MindSpore's test-infrastructure
   decorator): it adds the platform marks to the test and seeds numpy, and
   nothing else, the same stub in both modes;
4. run pytest once per file in a subprocess with a per-file timeout, selecting
   only tests marked for the CPU (`cpu_linux` through `arg_mark`, or the older
   `platform_x86_cpu`), and record every test's outcome as it finishes through
   a small pytest plugin, so a file that times out keeps what it had run;
5. write a JSON of per-test outcomes and a summary.

`--compare MS.json KT.json` prints the counts and groups k_transform's
failures among the tests MindSpore passes by error message.

    python tools/ms_suite.py /tmp/ms_st --mindspore --out /tmp/ms.json
    python tools/ms_suite.py /tmp/ms_st --kt-root /tmp/kt_head --out /tmp/kt.json
    python tools/ms_suite.py /tmp/ms_st --compare /tmp/ms.json /tmp/kt.json

`--all-platforms` runs every test, whatever its platform marks. Two
diagnostics show what the first failures hide; their counts are not the
criterion: `--lenient` (a name k_transform.mindspore lacks resolves to the
top-level name or to a placeholder that raises when used; unknown
`set_context` settings are dropped) and `--tensor-shim` (test bodies too:
`x.asnumpy()` -> `x.__array__()`, `isinstance(x, Tensor)` -> `jax.Array`).
docs/mindspore_suite.md has the results and how to export the tests.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KT_PYTHON = REPO / ".venv" / "bin" / "python"
MS_PYTHON = Path("/tmp/msvenv_h30/bin/python")
CPU_MARKS = "cpu_linux or platform_x86_cpu"
PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "py.py", "pygments")

# --------------------------------------------------------------------------
# Import rewriting
# --------------------------------------------------------------------------

_FROM_RE = re.compile(r"^(\s*from\s+)(mindspore)(\.[\w.]+)?(\s+import\b)")
_IMPORT_RE = re.compile(r"^(\s*)import\s+(.*?)(\s*#.*)?$")


def _rewrite_import_item(item: str) -> tuple[str, bool]:
    """One `a.b as c` of an import statement; True if `mindspore` must be bound."""
    parts = item.split()
    name = parts[0]
    if name != "mindspore" and not name.startswith("mindspore."):
        return item, False
    new = "k_transform." + name
    if len(parts) == 3 and parts[1] == "as":
        return f"{new} as {parts[2]}", False
    if name == "mindspore":
        return f"{new} as mindspore", False
    return new, True


def rewrite_line(line: str) -> str:
    """Rewrite one source line's mindspore import, keeping the line count."""
    match = _FROM_RE.match(line)
    if match:
        head, _, tail, imp = match.groups()
        return f"{head}k_transform.mindspore{tail or ''}{imp}{line[match.end() :]}"
    match = _IMPORT_RE.match(line)
    if not match or "mindspore" not in match.group(2):
        return line
    indent, body, comment = match.group(1), match.group(2), match.group(3) or ""
    if "(" in body or ";" in body:
        return line
    items, bind = [], False
    for item in body.split(","):
        new, needs = _rewrite_import_item(item.strip())
        items.append(new)
        bind = bind or needs
    extra = "; from k_transform import mindspore" if bind else ""
    return f"{indent}import {', '.join(items)}{extra}{comment}"


def rewrite_source(text: str) -> str:
    return "\n".join(rewrite_line(line) for line in text.split("\n"))


_ASNUMPY_RE = re.compile(r"\.asnumpy\(\)")
_ISINSTANCE_TENSOR_RE = re.compile(r"isinstance\(([^,()]+), *Tensor\)")


def tensor_shim(text: str) -> str:
    """Diagnostic only (--tensor-shim): `.asnumpy()` and `isinstance(x, Tensor)` on JAX arrays.

    k_transform's Tensor is a JAX array, not a class: this rewrites test
    bodies (not only imports) to show what fails behind those two gaps.
    """
    text = _ASNUMPY_RE.sub(".__array__()", text)
    return _ISINSTANCE_TENSOR_RE.sub(r'isinstance(\1, __import__("jax").Array)', text)


# --------------------------------------------------------------------------
# The temporary tree: copied tests, the infrastructure stub, the plugin
# --------------------------------------------------------------------------

MARK_UTILS_STUB = '''"""Stub of MindSpore's test marks: platform marks and a numpy seed, no more."""
import numpy as np
import pytest


def arg_mark(plat_marks, level_mark=None, card_mark=None, essential_mark=None):
    def decorator(func):
        for mark in plat_marks:
            func = getattr(pytest.mark, mark)(func)
        np.random.seed(12345)
        return func

    return decorator
'''

PLUGIN = '''"""Streams each test's outcome to $MS_SUITE_RESULTS as one JSON line."""
import json
import os
import re

_OUT = os.environ["MS_SUITE_RESULTS"]
_LOC = re.compile(r"^(\\S+?\\.py):(\\d+):", re.M)


def _write(record):
    with open(_OUT, "a") as fh:
        fh.write(json.dumps(record) + "\\n")


def pytest_collection_finish(session):
    _write({"kind": "collected", "ids": [item.nodeid for item in session.items]})


def pytest_collectreport(report):
    if report.failed:
        _write({"kind": "collect_error", "id": report.nodeid,
                "text": report.longreprtext[-4000:]})


def pytest_runtest_logreport(report):
    record = {"kind": "test", "id": report.nodeid, "when": report.when,
              "outcome": report.outcome, "duration": round(report.duration, 3)}
    if report.failed or report.skipped:
        crash = getattr(report.longrepr, "reprcrash", None)
        record["message"] = crash.message if crash else str(report.longrepr)[-1000:]
        record["crash"] = f"{crash.path}:{crash.lineno}" if crash else ""
        text = report.longreprtext
        record["locations"] = [f"{p}:{n}" for p, n in _LOC.findall(text)]
        record["text"] = text[-3000:]
    _write(record)
'''


LENIENT_CONFTEST = '''"""Diagnostic only (--lenient): see what fails once every import succeeds.

A name a k_transform.mindspore module lacks is the top-level name of that
name if there is one (MindSpore's `mindspore.common.tensor.Tensor` is
`mindspore.Tensor`), else a placeholder that raises when it is called or
read from; a module it lacks is an empty module of such names; a
set_context setting it lacks is dropped. The failures that
remain are the ones the missing names were hiding.
"""
import importlib.abc
import importlib.machinery
import sys
import types

PREFIX = "k_transform.mindspore"


class Missing:
    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"[lenient] k_transform lacks {self._name}")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Missing(f"{self._name}.{attr}")

    def __mro_entries__(self, bases):
        raise NotImplementedError(f"[lenient] k_transform lacks {self._name} (as a base class)")


def _lenient_getattr(module_name):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        top = sys.modules[PREFIX].__dict__
        if module_name != PREFIX and name in top:  # mindspore.common.tensor.Tensor is ms.Tensor
            return top[name]
        return Missing(f"{module_name.removeprefix('k_transform.')}.{name}")
    return __getattr__


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _lenient_getattr(spec.name)
        return module

    def exec_module(self, module):
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(PREFIX + "."):
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        return None


import k_transform.mindspore  # noqa: E402

for _name, _module in list(sys.modules.items()):
    if _name.startswith(PREFIX) and isinstance(_module, types.ModuleType):
        _module.__getattr__ = _lenient_getattr(_name)
sys.meta_path.append(_Finder())

_context = sys.modules[PREFIX + ".context"]
_set_context = _context.set_context


def set_context(**kwargs):
    for key, value in kwargs.items():
        try:
            _set_context(**{key: value})
        except (ValueError, TypeError, KeyError) as err:
            print(f"[lenient] set_context dropped {key}: {err}")


_context.set_context = set_context
k_transform.mindspore.set_context = set_context
'''


def _pytest_shim(tmp: Path) -> Path:
    """Links to this interpreter's pytest packages, for a venv that lacks pytest."""
    import pytest  # noqa: F401  (the shim needs pytest installed here)

    site = Path(sys.modules["pytest"].__file__).resolve().parent.parent
    shim = tmp / "_pytest_shim"
    shim.mkdir()
    for name in PYTEST_PACKAGES:
        if (site / name).exists():
            (shim / name).symlink_to(site / name)
    return shim


def build_tree(
    suite: Path, tmp: Path, rewrite: bool, marks: str, lenient: bool = False, shim: bool = False
) -> list[Path]:
    """Copy the suite under tmp/suite, rewriting imports; return the test files."""
    dest_root = tmp / "suite"
    for src in sorted(suite.rglob("*")):
        dest = dest_root / src.relative_to(suite)
        if src.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == ".py" and rewrite:
            text = rewrite_source(src.read_text())
            dest.write_text(tensor_shim(text) if shim else text)
        else:
            shutil.copyfile(src, dest)
    stub = tmp / "tests"
    stub.mkdir()
    (stub / "__init__.py").write_text("")
    (stub / "mark_utils.py").write_text(MARK_UTILS_STUB)
    (tmp / "_ms_suite_plugin.py").write_text(PLUGIN)
    (tmp / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    if lenient:
        (tmp / "conftest.py").write_text(LENIENT_CONFTEST)
    return sorted(p for p in dest_root.rglob("test_*.py") if _has_mark(p, marks))


def _has_mark(test: Path, marks: str) -> bool:
    """Whether the file names one of the marks (others would deselect every test)."""
    return not marks or any(mark in test.read_text() for mark in marks.split(" or "))


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


def _environment(tmp: Path, python: Path, mindspore: bool, kt_root: Path | None) -> dict:
    env = dict(os.environ)
    paths = [str(tmp)]
    if mindspore:
        paths.append(str(_pytest_shim(tmp)))
    elif kt_root is not None:
        paths.append(str(kt_root))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["MS_SUITE_RESULTS"] = str(tmp / "results.jsonl")
    env.setdefault("GLOG_v", "3")
    if not mindspore:
        env["JAX_PLATFORMS"] = "cpu"
    return env


def _run_file(python: Path, tmp: Path, test: Path, env: dict, timeout: float, marks: str) -> dict:
    results = tmp / "results.jsonl"
    if results.exists():
        results.unlink()
    rel = test.relative_to(tmp)
    cmd = [
        str(python),
        "-m",
        "pytest",
        str(rel),
        "-p",
        "_ms_suite_plugin",
        "-p",
        "no:cacheprovider",
        "--tb=short",
        "-q",
        "--rootdir",
        str(tmp),
    ]
    cmd += ["-m", marks] if marks else []
    start = time.monotonic()
    log = tmp / "last_run.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            cmd, cwd=tmp, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            timed_out = True
    records = []
    if results.exists():
        records = [json.loads(line) for line in results.read_text().splitlines() if line]
    return {
        "file": str(test.relative_to(tmp / "suite")),
        "rc": proc.returncode,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - start, 1),
        "records": records,
        "log_tail": log.read_text(errors="replace")[-2000:],
    }


def _file_outcomes(run: dict) -> dict:
    """Per-test outcome of one file: passed, failed, error, skipped, timeout."""
    tests: dict[str, dict] = {}
    collected: list[str] = []
    errors = []
    for rec in run["records"]:
        if rec["kind"] == "collected":
            collected = rec["ids"]
        elif rec["kind"] == "collect_error":
            errors.append(rec)
        elif rec["kind"] == "test":
            entry = tests.setdefault(rec["id"], {"outcome": "passed", "duration": 0.0})
            entry["duration"] += rec["duration"]
            if rec["outcome"] == "failed" and entry["outcome"] == "passed":
                entry["outcome"] = "failed" if rec["when"] == "call" else "error"
                entry.update({k: rec.get(k) for k in ("message", "crash", "locations", "text")})
                entry["when"] = rec["when"]
            elif rec["outcome"] == "skipped" and entry["outcome"] == "passed":
                entry["outcome"] = "skipped"
                entry["message"] = rec.get("message")
    prefix = "suite/"
    out = {}
    for nodeid in collected or list(tests):
        entry = tests.get(nodeid, {"outcome": "timeout" if run["timed_out"] else "not_run"})
        out[nodeid.removeprefix(prefix)] = entry
    return {"tests": out, "collect_errors": errors}


def run_suite(args) -> dict:
    suite = Path(args.suite).resolve()
    python = Path(args.python) if args.python else (MS_PYTHON if args.mindspore else KT_PYTHON)
    kt_root = Path(args.kt_root).resolve() if args.kt_root else None
    tmp = Path(tempfile.mkdtemp(prefix="ms_suite_"))
    marks = "" if args.all_platforms else CPU_MARKS
    if (args.lenient or args.tensor_shim) and args.mindspore:
        raise SystemExit("--lenient and --tensor-shim are for k_transform runs only")
    files = build_tree(
        suite, tmp, not args.mindspore, marks, lenient=args.lenient, shim=args.tensor_shim
    )
    if args.only:
        files = [f for f in files if re.search(args.only, str(f))]
    env = _environment(tmp, python, args.mindspore, kt_root)
    report = {
        "mode": "mindspore"
        if args.mindspore
        else "k_transform"
        + (" (lenient)" if args.lenient else "")
        + (" (tensor-shim)" if args.tensor_shim else ""),
        "python": str(python),
        "suite": str(suite),
        "kt_root": str(kt_root or REPO),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "timeout_per_file": args.timeout,
        "marks": marks or "(all platforms)",
        "files": {},
    }
    for i, test in enumerate(files, 1):
        run = _run_file(python, tmp, test, env, args.timeout, marks)
        outcome = _file_outcomes(run)
        report["files"][run["file"]] = {
            "rc": run["rc"],
            "timed_out": run["timed_out"],
            "seconds": run["seconds"],
            **outcome,
            "log_tail": run["log_tail"] if run["rc"] not in (0, 1, 5) else "",
        }
        counts = collections.Counter(t["outcome"] for t in outcome["tests"].values())
        print(
            f"[{i}/{len(files)}] {run['file']} {run['seconds']}s rc={run['rc']}"
            f"{' TIMEOUT' if run['timed_out'] else ''} {dict(counts)}",
            flush=True,
        )
        report["summary"] = summarize(report)
        Path(args.out).write_text(json.dumps(report, indent=1))
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    report["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    report["summary"] = summarize(report)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report["summary"], indent=1))
    return report


def all_tests(report: dict) -> dict:
    return {
        f"{name}::{tid.split('::', 1)[1]}" if "::" in tid else tid: t
        for name, entry in report["files"].items()
        for tid, t in entry["tests"].items()
    }


def summarize(report: dict) -> dict:
    tests = all_tests(report)
    counts = collections.Counter(t["outcome"] for t in tests.values())
    return {
        "files": len(report["files"]),
        "tests": len(tests),
        **dict(counts),
        "files_with_collect_errors": sum(
            1 for e in report["files"].values() if e["collect_errors"]
        ),
        "files_timed_out": sum(1 for e in report["files"].values() if e["timed_out"]),
    }


# --------------------------------------------------------------------------
# Comparing the two runs
# --------------------------------------------------------------------------

_NORMALIZE = [
    (re.compile(r"0x[0-9a-f]+"), "0x?"),
    (re.compile(r"\d+(\.\d+)?"), "N"),
    (re.compile(r"\s+"), " "),
]


def cause_key(entry: dict | None, collect_errors: list) -> str:
    if entry is None or entry.get("outcome") in ("not_run", None):
        if collect_errors:
            lines = [ln for ln in collect_errors[0]["text"].splitlines() if ln.startswith("E ")]
            return "collection: " + (lines[-1][1:].strip() if lines else "error")[:160]
        return "not run"
    if entry["outcome"] == "timeout":
        return "timeout (file)"
    message = (entry.get("message") or "").strip().splitlines()
    key = message[0] if message else entry["outcome"]
    for pattern, repl in _NORMALIZE:
        key = pattern.sub(repl, key)
    return key[:160]


def test_line(entry: dict | None, file: str, collect_errors: list) -> str:
    """The line of the test file where the failure shows (the deepest frame in it)."""
    base = Path(file).name
    locations = list((entry or {}).get("locations") or [])
    if not locations and collect_errors:
        locations = [f"{p}:{n}" for p, n in _LOCATION.findall(collect_errors[0]["text"])]
    for loc in reversed(locations):
        if Path(loc.rsplit(":", 1)[0]).name == base:
            return loc.rsplit(":", 1)[1]
    return "?"


_LOCATION = re.compile(r"^(\S+?\.py):(\d+):", re.M)


def compare(ms_path: str, kt_path: str, suite: str | None) -> dict:
    ms, kt = json.loads(Path(ms_path).read_text()), json.loads(Path(kt_path).read_text())
    ms_tests, kt_tests = all_tests(ms), all_tests(kt)
    ms_pass = {t for t, e in ms_tests.items() if e["outcome"] == "passed"}
    kt_pass = {t for t, e in kt_tests.items() if e["outcome"] == "passed"}
    causes: dict[str, list] = collections.defaultdict(list)
    for test in sorted(ms_pass - kt_pass):
        file = test.split("::", 1)[0]
        entry = kt_tests.get(test)
        errs = kt["files"].get(file, {}).get("collect_errors", [])
        causes[cause_key(entry, errs)].append((test, test_line(entry, file, errs)))
    table = sorted(causes.items(), key=lambda kv: -len(kv[1]))
    rows = []
    for key, tests in table:
        test, line = tests[0]
        source = ""
        if suite and line != "?":
            path = Path(suite) / test.split("::", 1)[0]
            lines = path.read_text().splitlines() if path.exists() else []
            source = lines[int(line) - 1].strip() if int(line) <= len(lines) else ""
        rows.append(
            {
                "cause": key,
                "count": len(tests),
                "example": test,
                "line": line,
                "source": source,
                "tests": [t for t, _ in tests],
            }
        )
    return {
        "selection": ms.get("marks", CPU_MARKS),
        "tests": len(ms_tests),
        "mindspore_passed": len(ms_pass),
        "k_transform_passed": len(kt_pass),
        "k_transform_passed_of_ms_passed": len(ms_pass & kt_pass),
        "k_transform_only_passed": sorted(kt_pass - ms_pass),
        "ratio": round(len(kt_pass) / len(ms_pass), 4) if ms_pass else None,
        "mindspore_summary": ms["summary"],
        "k_transform_summary": kt["summary"],
        "causes": rows,
    }


def print_comparison(result: dict) -> None:
    print(
        f"Tests ({result['selection']}): {result['tests']}; "
        f"MindSpore passed {result['mindspore_passed']}; "
        f"k_transform passed {result['k_transform_passed']} "
        f"({result['k_transform_passed_of_ms_passed']} of MindSpore's passes); "
        f"ratio {result['ratio']}"
    )
    print("\n| count | cause | example (file::test:line) |\n| ---: | --- | --- |")
    for row in result["causes"]:
        cause = row["cause"].replace("|", "\\|")
        where = f"`{row['example']}`:{row['line']}"
        print(f"| {row['count']} | {cause} | {where} `{row['source'][:80]}` |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", nargs="?", help="directory of MindSpore test files")
    parser.add_argument(
        "--mindspore", action="store_true", help="run unmodified with real MindSpore"
    )
    parser.add_argument("--python", help="interpreter (default: the mode's venv)")
    parser.add_argument("--kt-root", help="put this k_transform checkout first on PYTHONPATH")
    parser.add_argument("--out", default="ms_suite.json")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    parser.add_argument("--only", help="regex: run only matching files")
    parser.add_argument(
        "--all-platforms",
        action="store_true",
        help="run every test, not only those marked for the CPU",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary tree")
    parser.add_argument(
        "--lenient",
        action="store_true",
        help="diagnostic: missing k_transform names become placeholders that raise on use",
    )
    parser.add_argument(
        "--tensor-shim",
        action="store_true",
        help="diagnostic: rewrite x.asnumpy() and isinstance(x, Tensor) for JAX arrays",
    )
    parser.add_argument("--compare", nargs=2, metavar=("MS_JSON", "KT_JSON"))
    parser.add_argument("--json", help="with --compare: write the comparison here")
    args = parser.parse_args(argv)
    if args.compare:
        result = compare(*args.compare, args.suite)
        print_comparison(result)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
        return 0
    if not args.suite:
        parser.error("give the suite directory, or --compare")
    run_suite(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
