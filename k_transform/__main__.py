"""The command line: look at what k_transform makes of a function.

    python -m k_transform MODULE:FUNCTION [--ir | --source | --grad-ir | --grad-source
                                           | --dot | --picture OUT.svg] [--of ir|grad]

MODULE is an importable module (`pkg.models`) or the path of a `.py` file;
FUNCTION a name in it, dotted for an attribute (`net.construct`, a Cell
instance, a method). It prints the IR (the default), the generated Python,
the IR or source of the gradient (`kt.grad(f)`: w.r.t. the first argument),
the DOT text (`--dot`), or writes a picture (`--picture`, format from the
suffix: .svg, .png, .jpeg, .json, .dot); `--of grad` draws the gradient's
K-graph instead of the IR. Nothing is traced or run: no inputs are needed.

A module that cannot be imported, a name it lacks, or a program k_transform
cannot transform (`KTransformError`) prints one line and exits with status 2.
It runs in strict mode (`kt.set_strict`): a function the parser cannot
model has no graph to show (a call would run it as Python), so the parser's
reason is the answer.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

import k_transform as kt

USAGE_ERROR = 2


class CommandError(Exception):
    """A one-line message for the user; the command exits with status 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m k_transform",
        description="Print the IR or generated Python of a function, or draw its IR.",
    )
    parser.add_argument("target", metavar="MODULE:FUNCTION", help="module or .py path, a name")
    show = parser.add_mutually_exclusive_group()
    show.add_argument("--ir", action="store_true", help="the printed IR (the default)")
    show.add_argument("--source", action="store_true", help="the generated Python")
    show.add_argument("--grad-ir", action="store_true", help="the IR of kt.grad(FUNCTION)")
    show.add_argument("--grad-source", action="store_true", help="the Python of kt.grad(...)")
    show.add_argument("--dot", action="store_true", help="graphviz DOT text of the picture")
    show.add_argument("--picture", metavar="PATH", help="write a picture (.svg, .png, .dot)")
    parser.add_argument("--of", choices=("ir", "grad"), default="ir", help="what --dot draws")
    return parser


def load_target(target: str):
    """The object `MODULE:FUNCTION` names."""
    module_name, sep, name = target.rpartition(":")
    if not sep or not module_name or not name:
        raise CommandError(f"expected MODULE:FUNCTION, got {target!r}")
    module = _import(module_name)
    value = module
    for part in name.split("."):
        if not hasattr(value, part):
            raise CommandError(f"{module_name} has no {name!r}")
        value = getattr(value, part)
    if not callable(value):
        raise CommandError(f"{module_name}:{name} is a {type(value).__name__}, not a function")
    return value


def _import(module_name: str):
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            return _import_file(module_name)
        return importlib.import_module(module_name)
    except CommandError:
        raise
    except Exception as exc:  # the user's module failed to import: say why, in one line
        raise CommandError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc


def _import_file(path: str):
    """A `.py` file imported under its stem, its folder first on sys.path."""
    if not os.path.isfile(path):
        raise CommandError(f"no such file: {path}")
    folder, stem = os.path.split(os.path.abspath(path))
    sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(os.path.splitext(stem)[0], path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run(args: argparse.Namespace) -> str:
    """What the command prints."""
    fn = load_target(args.target)
    if args.picture:
        return f"wrote {kt.draw(fn, args.picture, what=args.of)}\n"
    if args.source:
        return kt.get_source(fn)
    if args.grad_ir:
        return kt.get_ir(kt.grad(fn))
    if args.grad_source:
        return kt.get_source(kt.grad(fn))
    if args.dot:
        return kt.get_ir(kt.grad(fn) if args.of == "grad" else fn, format="dot")
    return kt.get_ir(fn)


def one_line(exc: kt.KTransformError) -> str:
    """A KTransformError as one line: the message, then file, line and source."""
    message = " ".join(exc.bare_message.split())
    debug = exc.debug
    if debug is None or debug.line <= 0:
        return " ".join(str(exc).split())
    return f"{message} ({debug.file}:{debug.line}: {debug.source_line.strip()})"


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.of == "grad" and not (args.dot or args.picture):
        parser.error("--of grad goes with --dot or --picture (see --grad-ir, --grad-source)")
    kt.set_strict(True)
    try:
        text = run(args)
    except CommandError as exc:
        print(f"python -m k_transform: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except kt.KTransformError as exc:
        print(f"python -m k_transform: error: {one_line(exc)}", file=sys.stderr)
        return USAGE_ERROR
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
