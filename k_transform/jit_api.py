"""`kt.jit`: a function or Cell compiled as one program at its first call.

`Jit` keeps one `CompiledGraph` per Cell `training` flag and per number of
`*args` values; keyword arguments and defaults bind as in a call of the
function (`compiled.bind_keywords`; a default left to itself is a constant of
the program). A compiled function given to it (`kt.jit(kt.grad(f))`) is made
again for `kt.jit` (`CompiledGraph.under_jit`) and binds its arguments as it
always does. Inside transformed code a `Jit` is its function's graph
(`__kt_graph__`).
"""

from __future__ import annotations

import functools
import types
import weakref

from k_transform.api import graph_of
from k_transform.compiled import CompiledGraph, bind_keywords, takes_star_args
from k_transform.frontend.parser import parse
from k_transform.frontend.targets import arity, target_of
from k_transform.ir.nodes import FuncGraph


class Jit:
    """What `kt.jit(fn)` returns: `fn` compiled as one program at its first
    call, as MindSpore's `jit` transforms lazily (so `@kt.jit` works on a
    recursive function, and on one calling functions defined after it).
    Keyword arguments and defaults bind as in a call of `fn`. Inside
    transformed code it is `fn`'s graph. A Cell is compiled once per
    `training` flag, read at each call."""

    __kt_own_call__ = True  # its `__call__` is never parsed as user code (`callables`)

    __kt_jit__ = True  # on a method, the parser reads the method (`callables.user_call_method`)

    def __init__(self, fn):
        self.__wrapped__ = fn
        self._compiled: dict[object, CompiledGraph] = {}
        # (number of arguments, `training` flag, program) of the last call
        # that bound nothing: positional arguments, all of them given.
        self._direct: tuple | None = None
        self._bound = weakref.WeakKeyDictionary()  # instance -> its bound method, compiled

    def __get__(self, obj, objtype=None):
        """`@kt.jit` on a method (MindSpore's `@jit` on a Cell's `construct`):
        the method bound to `obj`, compiled, one program per instance."""
        if obj is None:
            return self
        try:
            bound = self._bound.get(obj)
        except TypeError:  # not weakly referable or not hashable: made per call
            return Jit(types.MethodType(self.__wrapped__, obj))
        if bound is None:
            bound = self._bound[obj] = Jit(types.MethodType(self.__wrapped__, obj))
        return bound

    def _training(self):
        """The `training` flag of the Cell compiled (of a bound method's Cell)."""
        owner = getattr(self.__wrapped__, "__self__", self.__wrapped__)
        return getattr(owner, "training", None)

    def compiled(self, star_arity: int | None = None) -> CompiledGraph:
        """The program for the Cell's current `training` flag (MindSpore
        compiles a Cell once per phase: `set_train` switches between them)
        and, for a function with `*args`, for the number of values in it."""
        key = (self._training(), star_arity)
        if key not in self._compiled and isinstance(self.__wrapped__, CompiledGraph):
            # a gradient function binds keywords, defaults and `*args` itself
            self._compiled[key] = self.__wrapped__.under_jit()
        if key not in self._compiled:
            target = self._target
            graph = graph_of(target, star_arity)
            remake = functools.partial(self._remake, key, star_arity)
            self._compiled[key] = CompiledGraph(graph, target, remake=remake, jit_host=True)
        return self._compiled[key]

    def _remake(self, key, star_arity) -> CompiledGraph:
        del self._compiled[key]
        self._direct = None
        return self.compiled(star_arity)

    @property
    def __kt_graph__(self) -> FuncGraph:
        """The graph of `fn` (while `fn` is being parsed, the graph being built:
        so a recursive `@kt.jit` function calls itself as plain recursion)."""
        return parse(self.__wrapped__)

    @property
    def _target(self):
        """The function compiled: `fn`, or for a library function
        (`kt.jit(jax.vmap(f))`) a user-level function calling it, as
        `kt.grad` differentiates one (`frontend.targets`)."""
        return target_of(self.__wrapped__, arity(self.__wrapped__))

    def __call__(self, *args, **kwargs):
        fn = self.__wrapped__
        direct = self._direct
        if (
            direct is not None
            and not kwargs
            and len(args) == direct[0]
            and self._training() is direct[1]
        ):
            return direct[2](*args)
        if isinstance(fn, CompiledGraph):  # kt.jit(kt.grad(f)): it binds its arguments
            compiled = self.compiled()
            if not kwargs:  # (the next such call goes straight to it)
                self._direct = (len(args), self._training(), compiled)
            return compiled(*args, **kwargs)
        fn = self._target
        if takes_star_args(fn):
            args, where = bind_keywords(fn, args, kwargs)
            return self.compiled(sum(k is not None for _, k in where))(*args)
        compiled = self.compiled()
        graph = compiled.__kt_graph__
        defaulted = len(args) < len(graph.param_names or ())
        if kwargs or graph.signature is not None or defaulted:
            args = bind_keywords(fn, args, kwargs)[0]
        else:
            self._direct = (len(args), self._training(), compiled)
        return compiled(*args)

    def __getattr__(self, name):  # `params`, ...: the compiled program's
        if name.startswith("__") or name == "_compiled":  # the parser asks before compiling
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return f"<k_transform jit of {self.__wrapped__!r}>"


def jit(fn=None, *, backend: str | None = None, **options):
    """`fn` (a function or Cell, e.g. a `TrainOneStepCell`) compiled as one
    program at its first call: Parameters are read when called and their
    `Assign`ed values written back afterwards; jitted, with Python scalars
    static. MindSpore's `backend`, `jit_level` and other options are
    accepted and have no effect (XLA compiles every program);
    `@kt.jit(backend=...)` works as a decorator factory."""
    if fn is None:
        return lambda f: Jit(f)
    return Jit(fn)


# In transformed code `kt.jit(f)` is `f` (`frontend.calls`), as `jax.jit(f)` is there:
# the enclosing program is compiled already.
jit.__kt_compiles__ = True
