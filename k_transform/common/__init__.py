"""`kt.common`: what MindSpore keeps in `mindspore.common`: initializers, the
seed, `Tensor` and dtype names."""

from k_transform.common import initializer
from k_transform.common.seed import set_seed
from k_transform.common.tensor import Tensor

__all__ = ["Tensor", "initializer", "set_seed"]
