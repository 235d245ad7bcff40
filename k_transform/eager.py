"""PyNative: a Cell's `construct` called as Python, with MindSpore's Tensor methods.

`net(x)` runs `construct` per call as Python runs it: prints, counters and
random draws happen once per call, in program order, and nothing is jitted,
whatever `kt.set_mode` says (MindSpore's PyNative mode; the rule "user
Python runs when Python would run it"). One thing differs from calling the
function as written. MindSpore's Tensors are JAX arrays here, and a JAX
array lacks some of a Tensor's methods (`x.abs()`, `x.asnumpy()`,
`x.dim()`) or gives them another meaning (`x.view(3, 1)`, `x.mean(0, True)`).
So `construct` is compiled once more from its source, with two kinds of
call rewritten (nothing else changes):

- `r.name(...)` where `name` is a Tensor method of the parser's table
  (`ops.tensor_methods.METHODS`, the one table both paths read) becomes
  `tensor_method(r, "name")(...)`: on a JAX array (or a Parameter: its
  value) the table's function, on anything else `r.name` as before;
- `self.name(...)` and `super().name(...)` become `own_method(self,
  "name")(...)`: a method of the Cell's own written in Python is rewritten
  the same way (a helper method gets the Tensor methods too); anything else
  (a sub-Cell, a function stored on the Cell) is called as before.

The rewritten function keeps the user's file, line numbers, globals and
closure cells (the same cells: a `nonlocal` write is seen outside), and is
made once per function (`TRANSFORM.cache("eager.functions")`).

What runs as written, with Python's behaviour (`x.abs()` on a JAX array
then raises Python's AttributeError): a function without source (`exec`,
a REPL), one with decorators (they may depend on the function they wrap),
and plain functions called by name from `construct` (`helper(x)`).
Method calls on NumPy arrays keep NumPy's meaning, as in MindSpore's
PyNative mode.
"""

from __future__ import annotations

import ast
import dis
import functools
import inspect
import textwrap
import types

import jax

from k_transform import runtime as rt
from k_transform.context import TRANSFORM
from k_transform.ops import tensor_methods

TENSOR_METHOD = "_kt_tensor_method_"  # the names the rewritten calls read
OWN_METHOD = "_kt_own_method_"


def tensor_method(receiver, name: str):
    """`receiver.name` as a MindSpore Tensor has it: the table's function
    for a JAX array or a Parameter, else the object's own attribute."""
    meaning = tensor_methods.method(name)
    if meaning is not None:
        if isinstance(receiver, jax.Array):
            return functools.partial(meaning, receiver)
        if getattr(type(receiver), "__kt_parameter__", False):
            return functools.partial(meaning, rt.read_param(receiver))
    return getattr(receiver, name)


def call_method(obj, name: str, args: tuple, kwargs: dict):
    """`obj.name(*args, **kwargs)`, the method rewritten (`Cell.__call__`)."""
    fn = getattr(type(obj), name, None)
    if type(fn) is types.FunctionType and name not in getattr(obj, "__dict__", ()):
        return eager_function(fn)(obj, *args, **kwargs)
    return own_method(obj, name)(*args, **kwargs)


def own_method(obj, name: str):
    """`obj.name`, a method written in Python rewritten by `eager_function`."""
    attr = getattr(obj, name)
    owner = obj.__self__ if isinstance(obj, super) else obj
    if isinstance(attr, types.MethodType) and attr.__self__ is owner:
        if isinstance(attr.__func__, types.FunctionType):
            return types.MethodType(eager_function(attr.__func__), owner)
    return attr


def eager_function(fn: types.FunctionType) -> types.FunctionType:
    """`fn` with its method calls rewritten (the module docstring), or `fn`
    itself where there is nothing to rewrite or no source to rewrite."""
    table = TRANSFORM.cache("eager.functions")  # fn itself: run as written
    made = table.get(fn)
    if made is None:
        made = table[fn] = _rewrite(fn) or fn
    return made


class _MethodCalls(ast.NodeTransformer):
    """Rewrites `r.name(...)` (a Tensor method) and `self.name(...)`."""

    def __init__(self, self_name: str | None, owner: str | None):
        self.self_name = self_name
        self.owner = owner  # the class `__private` names are mangled with
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.Call:  # noqa: N802 - ast's visitor name
        self.generic_visit(node)
        func = node.func
        if not isinstance(func, ast.Attribute):
            return node
        if _is_self(func.value, self.self_name):
            via = OWN_METHOD
        elif func.attr in tensor_methods.METHODS:
            via = TENSOR_METHOD
        else:
            return node
        name = func.attr
        if self.owner and name.startswith("__") and not name.endswith("__"):
            name = f"_{self.owner.lstrip('_')}{name}"  # as Python reads `self.__name`
        lookup = ast.Call(ast.Name(via, ast.Load()), [func.value, ast.Constant(name)], [])
        node.func = ast.copy_location(lookup, func)
        self.changed = True
        return node


def _is_self(node: ast.expr, self_name: str | None) -> bool:
    """`self` or `super()`: calls of the object's own methods."""
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        return isinstance(node.func, ast.Name) and node.func.id == "super"
    return isinstance(node, ast.Name) and node.id == self_name


def _rewrite(fn: types.FunctionType) -> types.FunctionType | None:
    """The rewritten function, or None: no source, decorators, nothing to
    rewrite, or a source that is not the code Python runs (the file was
    edited since it was imported: the source as written compiles to other
    code than `fn`'s)."""
    code = fn.__code__
    try:
        lines, first = inspect.getsourcelines(code)
        text = textwrap.dedent("".join(lines))
        plain, tree = _definition(text, fn), _definition(text, fn)
    except (OSError, TypeError, ValueError, SyntaxError):
        return None
    if tree is None:
        return None
    params = [*tree.args.posonlyargs, *tree.args.args]
    calls = _MethodCalls(params[0].arg if params else None, _owner(fn))
    calls.visit(tree)
    if not calls.changed:
        return None
    indent = len(lines[0]) - len(lines[0].lstrip())
    if not _same_code(_compile(_place(plain, indent, first), fn), code):
        return None
    new = _compile(_place(tree, indent, first), fn)
    cells = dict(zip(code.co_freevars, fn.__closure__ or (), strict=True))
    cells[TENSOR_METHOD] = types.CellType(tensor_method)
    cells[OWN_METHOD] = types.CellType(own_method)
    if new is None or not set(new.co_freevars) <= cells.keys():
        return None
    closure = tuple(cells[name] for name in new.co_freevars)
    made = types.FunctionType(new, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    made.__kwdefaults__ = fn.__kwdefaults__
    functools.update_wrapper(made, fn, updated=())
    del made.__wrapped__  # it is `fn` rewritten, not a wrapper of it
    return made


def _definition(text: str, fn: types.FunctionType) -> ast.FunctionDef | None:
    """The `def` of `fn` in its source, None for a lambda or a decorated `def`."""
    body = ast.parse(text).body
    tree = body[0] if body else None
    if not isinstance(tree, ast.FunctionDef) or tree.decorator_list or tree.name != fn.__name__:
        return None
    return tree


def _place(tree: ast.FunctionDef, indent: int, first: int) -> ast.FunctionDef:
    """`tree` at the user's lines and columns (for tracebacks)."""
    ast.fix_missing_locations(tree)
    for node in ast.walk(tree):
        if getattr(node, "col_offset", None) is not None:
            node.col_offset += indent
        if getattr(node, "end_col_offset", None) is not None:
            node.end_col_offset += indent
    return ast.increment_lineno(tree, first - 1)


def _same_code(a: types.CodeType | None, b: types.CodeType) -> bool:
    """Whether two code objects run the same instructions on the same
    constants and names (their nested functions too)."""
    if a is None or (a.co_names, a.co_varnames) != (b.co_names, b.co_varnames):
        return False
    if _instructions(a) != _instructions(b) or len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts, strict=True):
        if isinstance(x, types.CodeType) and isinstance(y, types.CodeType):
            if not _same_code(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


_JUMPS = frozenset(dis.hasjrel + dis.hasjabs)


def _instructions(code: types.CodeType) -> list[tuple]:
    """The operations and their arguments, jump targets left out. A method
    lookup and an attribute lookup count alike: `jnp.sum(x)` compiles to
    either, whether the module that compiles it imports `jnp` or not."""
    return [
        (
            "LOAD_ATTR" if op.opname == "LOAD_METHOD" else op.opname,
            None if op.opcode in _JUMPS else op.argval,
        )
        for op in dis.get_instructions(code)
    ]


def _compile(tree: ast.FunctionDef, fn: types.FunctionType) -> types.CodeType | None:
    """The code of `tree` defined where `fn` was: inside a factory whose
    parameters are `fn`'s free variables and the two lookups (so they are
    closure cells), and inside a class of the same name as `fn`'s (so
    `__private` names mangle alike and `super()` finds its `__class__` cell)."""
    names = ", ".join([*fn.__code__.co_freevars, TENSOR_METHOD, OWN_METHOD])
    owner = _owner(fn)
    if owner is not None:
        module = ast.parse(f"def _kt_eager_factory_({names}):\n class {owner}:\n  pass")
        module.body[0].body[0].body = [tree]
    else:
        module = ast.parse(f"def _kt_eager_factory_({names}):\n pass")
        module.body[0].body = [tree]
    try:
        compiled = compile(module, fn.__code__.co_filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return _find_code(compiled, tree.name, tree.lineno)


def _owner(fn: types.FunctionType) -> str | None:
    """The name of the class `fn` is defined in, None for a plain function."""
    parts = fn.__qualname__.split(".")
    return parts[-2] if len(parts) > 1 and parts[-2] != "<locals>" else None


def _find_code(code: types.CodeType, name: str, line: int) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name and const.co_firstlineno == line:
                return const
            found = _find_code(const, name, line)
            if found is not None:
                return found
    return None
