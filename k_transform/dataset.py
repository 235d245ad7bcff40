"""`kt.dataset`: the smallest part of `mindspore.dataset` that training
scripts use: `NumpySlicesDataset(data, column_names=None, shuffle=None)`
and `.batch(batch_size, drop_remainder=False)`.

`data` is a tuple/list of arrays (one column each, sliced along axis 0), a
dict name -> array, or one array. Iterating yields one tuple of numpy
arrays per row, or per batch after `.batch(n)`; `create_tuple_iterator()`
and `create_dict_iterator()` give Tensors (JAX arrays), as MindSpore's do;
`.repeat(n)` repeats rows (before `batch`) or batches (after it), as
MindSpore's; `shuffle` (None means True, as MindSpore) draws a new order each pass from
the generator `kt.set_seed` seeds. `get_dataset_size()` and `len()` give
the number of rows or batches. Any iterable of (data, label) batches works
with `kt.Model` too; this class is for scripts that must also run under
MindSpore.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from k_transform.common.seed import generator


def _columns(data, column_names):
    if isinstance(data, dict):
        return tuple(np.asarray(v) for v in data.values()), list(data)
    if not isinstance(data, (tuple, list)):
        data = (data,)
    columns = tuple(np.asarray(v) for v in data)
    names = list(column_names) if column_names else [f"column_{k}" for k in range(len(columns))]
    return columns, names


class NumpySlicesDataset:
    def __init__(self, data, column_names=None, num_samples=None, shuffle=None, **kwargs):
        self.columns, self.column_names = _columns(data, column_names)
        rows = {len(c) for c in self.columns}
        if len(rows) != 1:
            raise ValueError(f"NumpySlicesDataset columns have different lengths {sorted(rows)}")
        self.rows = rows.pop() if num_samples is None else min(num_samples, rows.pop())
        self.shuffle = True if shuffle is None else bool(shuffle)
        self.batch_size, self.drop_remainder = 1, False
        self.batched = False
        # `repeat` before `batch` repeats rows (a batch may span two passes),
        # after it repeats the batches; each pass draws its own order
        self.row_repeats, self.batch_repeats = 1, 1

    def _copy(self, **changes) -> NumpySlicesDataset:
        out = NumpySlicesDataset.__new__(NumpySlicesDataset)
        out.__dict__.update(self.__dict__, **changes)
        return out

    def batch(self, batch_size: int, drop_remainder: bool = False) -> NumpySlicesDataset:
        return self._copy(batch_size=batch_size, drop_remainder=drop_remainder, batched=True)

    def repeat(self, count: int) -> NumpySlicesDataset:
        """The data `count` times over (MindSpore's `repeat`; a finite count)."""
        if not isinstance(count, int) or count < 1:
            raise ValueError(
                f"NumpySlicesDataset.repeat: count must be a positive int, not {count!r}"
            )
        if self.batched:
            return self._copy(batch_repeats=self.batch_repeats * count)
        return self._copy(row_repeats=self.row_repeats * count)

    def _batches_per_pass(self) -> int:
        rows = self.rows * self.row_repeats
        whole = rows // self.batch_size
        return whole if self.drop_remainder else math.ceil(rows / self.batch_size)

    def get_dataset_size(self) -> int:
        if not self.batched:
            return self.rows * self.row_repeats
        return self._batches_per_pass() * self.batch_repeats

    def __len__(self) -> int:
        return self.get_dataset_size()

    def _order(self) -> np.ndarray:
        passes = [
            generator().permutation(self.rows) if self.shuffle else np.arange(self.rows)
            for _ in range(self.row_repeats)
        ]
        return np.concatenate(passes)

    def __iter__(self):
        if not self.batched:
            for k in self._order():
                yield tuple(c[k] for c in self.columns)
            return
        for _ in range(self.batch_repeats):
            order = self._order()
            for start in range(0, self._batches_per_pass() * self.batch_size, self.batch_size):
                idx = order[start : start + self.batch_size]
                yield tuple(c[idx] for c in self.columns)

    def create_tuple_iterator(self, num_epochs=-1, output_numpy=False, do_copy=True):
        """Tuples of Tensors (JAX arrays), or of numpy arrays with `output_numpy`."""
        for row in self:
            yield row if output_numpy else tuple(jax.device_put(c) for c in row)

    def create_dict_iterator(self, num_epochs=-1, output_numpy=False, do_copy=True):
        """Dicts column name -> Tensor (or numpy array with `output_numpy`)."""
        for row in self.create_tuple_iterator(num_epochs, output_numpy, do_copy):
            yield dict(zip(self.column_names, row, strict=True))
