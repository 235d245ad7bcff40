"""`import k_transform.mindspore as ms`: MindSpore 2.x's names over k_transform.

A MindSpore script runs with its imports changed to

    import k_transform.mindspore as ms
    from k_transform.mindspore import nn, ops, Tensor, Parameter, context

`ms.nn`, `ms.ops` (with `operations`, `functional`, `composite`, MindSpore's
`P`, `F`, `C`), `ms.context`, `ms.communication` (with `management`),
`ms.dataset`, `ms.train`, `ms.common` (with `dtype`, `initializer`) and the
top-level names (`ms.Tensor`, `ms.grad`, `ms.save_checkpoint`, `ms.float32`,
...) are the tables of `names.py`. A
MindSpore name k_transform lacks is absent: reading it raises
`AttributeError` naming it (`absent.py`), never a stand-in.
"""

from k_transform.mindspore import common, communication, context, dataset, nn, ops, train
from k_transform.mindspore.absent import missing
from k_transform.mindspore.common import dtype
from k_transform.mindspore.names import TOP
from k_transform.mindspore.tensor import install

globals().update(TOP)
install()  # `out.asnumpy()` on results: `tensor.py`
__all__ = [
    "common",
    "communication",
    "context",
    "dataset",
    "dtype",
    "nn",
    "ops",
    "train",
    *sorted(TOP),
]
__getattr__ = missing("mindspore")
