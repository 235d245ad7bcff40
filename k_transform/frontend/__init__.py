"""The frontend: Python source (gast) to FuncGraph IR.

`parser.parse(fn)` is the entry point. The parser is one `GraphBuilder` class
with one `stmt_*` / `expr_*` method per syntax node, assembled from mixins by
concern: `closures` (def/lambda, late binding, defaults, nonlocal), `sugar` +
`parse_sugar` (comprehensions, iteration builtins), `unpacking` (starred
assignment, `f(*args, **kwargs)`), `signature` (`*args`/`**kwargs`/keyword-only
parameters). Before building, `desugar` lowers `break`/`continue`/early
`return` and computes liveness, and `mutation` decides which in-place updates
are kept or refused; `fold` folds constants as nodes are built; `source`
reads the user's source text.
"""
