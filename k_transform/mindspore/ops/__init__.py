"""`mindspore.ops`: the table `names.OPS` (primitive classes, functional ops,
`GradOperation`, `grad`, ...), and MindSpore's submodules `operations` (`P`),
`functional` (`F`) and `composite` (`C`)."""

from k_transform.mindspore.absent import missing
from k_transform.mindspore.names import OPS, OPS_DIFFERS
from k_transform.mindspore.ops import composite, functional, operations

globals().update(OPS)
__all__ = ["composite", "functional", "operations", *sorted(OPS)]
__getattr__ = missing("mindspore.ops", OPS_DIFFERS)
