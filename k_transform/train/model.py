"""`Model(network, loss_fn, optimizer, metrics)`: MindSpore's high-level
training and evaluation loop.

- `train(epoch, train_dataset, callbacks=None)`: `network.set_train(True)`,
  then for each epoch and batch one step of the compiled `kt.jit(
  TrainOneStepCell(WithLossCell(network, loss_fn), optimizer))` (without
  `loss_fn`, `network` is already the loss network). Callbacks are called
  as MindSpore's (see `train/callback.py`).
- `eval(valid_dataset, callbacks=None)`: `network.set_train(False)`, the
  compiled `network` on each batch's data, each metric updated with
  `(logits, label)`; returns `{name: metric.eval()}`. `metrics` is a dict
  name -> metric or a set of names ("accuracy"/"acc").
- `predict(*data)`: the network in eval mode.

A dataset is anything iterable that yields `(data, label)` batches and can be
iterated again each epoch: a list of tuples of arrays, a generator factory's
result wrapped in a list, or `kt.dataset.NumpySlicesDataset(...).batch(n)`;
an object with MindSpore's `create_tuple_iterator()` is iterated through
that. `len(dataset)` (or `get_dataset_size()`), when it exists, sizes the
progress bar. Arrays are passed as they are (numpy arrays become JAX arrays).

The train step and the eval network are compiled once per Model, each in its
own mode (BatchNorm uses batch statistics in one, moving ones in the other).
`dataset_sink_mode`, `amp_level` and `boost_level` are accepted and ignored.
"""

from __future__ import annotations

from types import SimpleNamespace

import jax.numpy as jnp

from k_transform import nn
from k_transform.jit_api import jit
from k_transform.train.callback import Callback, RunContext

METRIC_NAMES = {"accuracy": nn.Accuracy, "acc": nn.Accuracy}


def _metrics(metrics) -> dict:
    if metrics is None:
        return {}
    if isinstance(metrics, dict):
        return dict(metrics)
    unknown = set(metrics) - METRIC_NAMES.keys()
    if unknown:
        raise ValueError(f"unknown metric names {sorted(unknown)}; known: {sorted(METRIC_NAMES)}")
    return {name: METRIC_NAMES[name]() for name in metrics}


def _batches(dataset):
    if hasattr(dataset, "create_tuple_iterator"):
        return dataset.create_tuple_iterator()
    return iter(dataset)


def _size(dataset):
    if hasattr(dataset, "get_dataset_size"):
        return dataset.get_dataset_size()
    try:
        return len(dataset)
    except TypeError:
        return None


def _device(batch) -> tuple:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise ValueError("a dataset batch must be a (data, label) pair")
    return tuple(jnp.asarray(x) for x in batch)


def _callback_list(callbacks) -> list[Callback]:
    if callbacks is None:
        return []
    if isinstance(callbacks, Callback):
        return [callbacks]
    return list(callbacks)


def _fire(callbacks, hook: str, context: RunContext) -> None:
    for callback in callbacks:
        getattr(callback, hook)(context)


class Model:
    def __init__(
        self,
        network,
        loss_fn=None,
        optimizer=None,
        metrics=None,
        eval_network=None,
        eval_indexes=None,
        amp_level="O0",
        boost_level="O0",
        **kwargs,
    ):
        self.network = network
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.metrics = _metrics(metrics)
        self.eval_network = eval_network if eval_network is not None else network
        self._train_step = None
        self._predict = None

    def _train_network(self):
        if self.optimizer is None:
            raise ValueError("Model.train needs an optimizer: Model(net, loss_fn, optimizer)")
        if self._train_step is None:
            self.network.set_train(True)
            loss_net = self.network
            if self.loss_fn is not None:
                loss_net = nn.WithLossCell(self.network, self.loss_fn)
            self.train_network = nn.TrainOneStepCell(loss_net, self.optimizer)
            self._train_step = jit(self.train_network)
        return self._train_step

    def _eval_network(self):
        if self._predict is None:
            self.eval_network.set_train(False)
            self._predict = jit(self.eval_network)
        return self._predict

    def train(
        self,
        epoch,
        train_dataset,
        callbacks=None,
        dataset_sink_mode=False,
        sink_size=-1,
        initial_epoch=0,
    ):
        step_fn = self._train_network()
        self.network.set_train(True)
        calls = _callback_list(callbacks)
        args = SimpleNamespace(
            epoch_num=epoch,
            batch_num=_size(train_dataset),
            cur_epoch_num=initial_epoch,
            cur_step_num=0,
            net_outputs=None,
            train_network=self.train_network,
            network=self.network,
            optimizer=self.optimizer,
            train_dataset=train_dataset,
        )
        context = RunContext(args)
        _fire(calls, "on_train_begin", context)
        for epoch_num in range(initial_epoch + 1, epoch + 1):
            args.cur_epoch_num = epoch_num
            _fire(calls, "on_train_epoch_begin", context)
            for batch in _batches(train_dataset):
                _fire(calls, "on_train_step_begin", context)
                args.net_outputs = step_fn(*_device(batch))
                args.cur_step_num += 1
                _fire(calls, "on_train_step_end", context)
                if context.get_stop_requested():
                    break
            _fire(calls, "on_train_epoch_end", context)
            if context.get_stop_requested():
                break
        _fire(calls, "on_train_end", context)

    def eval(self, valid_dataset, callbacks=None, dataset_sink_mode=False) -> dict:
        predict = self._eval_network()
        self.eval_network.set_train(False)
        calls = _callback_list(callbacks)
        args = SimpleNamespace(network=self.eval_network, cur_step_num=0, net_outputs=None)
        context = RunContext(args)
        for metric in self.metrics.values():
            metric.clear()
        _fire(calls, "on_eval_begin", context)
        for batch in _batches(valid_dataset):
            data, label = _device(batch)
            logits = predict(data)
            args.net_outputs, args.cur_step_num = logits, args.cur_step_num + 1
            for metric in self.metrics.values():
                metric.update(logits, label)
            _fire(calls, "on_eval_step_end", context)
        _fire(calls, "on_eval_end", context)
        return {name: metric.eval() for name, metric in self.metrics.items()}

    def predict(self, *data):
        self.eval_network.set_train(False)
        return self._eval_network()(*(jnp.asarray(x) for x in data))
