"""Checkpoint names and prefixes as MindSpore 2.10's (issue 30).

The names asserted are those MindSpore 2.10 gave for the same Cells in a
probe (`get_parameters()` names, `save_checkpoint` keys, and what
`load_param_into_net` returned); the values loaded are checked against the
arrays saved.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import k_transform as kt
from k_transform import nn


class Net(kt.Cell):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Dense(3, 2)
        self._hidden = nn.Dense(2, 2)  # a private attribute keeps its `_`

    def construct(self, x):
        return self._hidden(self.conv1(x))


class Wrap(kt.Cell):
    """A user's wrapper (auto_prefix): its attribute becomes a prefix."""

    def __init__(self, network):
        super().__init__()
        self.network = network

    def construct(self, x, y):
        return self.network(x, y)


NAMES = ["conv1.weight", "conv1.bias", "_hidden.weight", "_hidden.bias"]


def test_names_are_mindspores():
    assert [p.name for p in Net().get_parameters()] == NAMES
    with_loss = nn.WithLossCell(Net(), nn.MSELoss())
    assert [p.name for p in with_loss.get_parameters()] == NAMES  # auto_prefix=False
    assert [n for n, _ in with_loss.parameters_and_names()] == ["_backbone." + n for n in NAMES]
    wrapped = Wrap(nn.WithLossCell(Net(), nn.MSELoss()))
    assert [p.name for p in wrapped.get_parameters()] == ["network._backbone." + n for n in NAMES]


def test_with_loss_cell_still_differentiates():
    net = Net()
    with_loss = nn.WithLossCell(net, nn.MSELoss())
    assert with_loss.backbone_network is net
    x, y = jnp.array([[0.5, -1.0, 2.0]]), jnp.array([[0.1, 0.2]])
    grads = kt.grad(with_loss, grad_position=None, weights=net.trainable_params())(x, y)
    eps = 1e-3  # central differences on one weight entry
    w = net.conv1.weight
    base = np.asarray(w.data)
    values = []
    for sign in (1.0, -1.0):
        w.set_data(base + sign * eps * np.eye(*base.shape))
        values.append(float(with_loss(x, y)))
    w.set_data(base)
    fd = (values[0] - values[1]) / (2 * eps)
    np.testing.assert_allclose(float(np.trace(np.asarray(grads[0]))), fd, rtol=2e-2, atol=1e-3)


def _saved(tmp_path):
    wrapped = Wrap(nn.WithLossCell(Net(), nn.MSELoss()))
    path = tmp_path / "wrapped.ckpt"
    kt.save_checkpoint(wrapped, str(path))
    return wrapped, kt.load_checkpoint(str(path))


def test_checkpoint_of_a_wrapper_loads_into_the_bare_network(tmp_path):
    wrapped, saved = _saved(tmp_path)
    assert sorted(saved) == sorted("network._backbone." + n for n in NAMES)
    fresh = Net()
    param_not_load, ckpt_not_load = kt.load_param_into_net(fresh, saved)
    assert param_not_load == []
    # MindSpore 2.10 still lists the names it loaded through a prefix
    assert sorted(ckpt_not_load) == sorted(saved)
    for mine, theirs in zip(fresh.get_parameters(), wrapped.get_parameters(), strict=True):
        np.testing.assert_array_equal(np.asarray(mine.data), np.asarray(theirs.data))


def test_strict_load_does_not_strip_prefixes(tmp_path):
    _, saved = _saved(tmp_path)
    fresh = Net()
    before = np.asarray(fresh.conv1.weight.data)
    param_not_load, _ = kt.load_param_into_net(fresh, saved, strict_load=True)
    assert param_not_load == NAMES
    np.testing.assert_array_equal(np.asarray(fresh.conv1.weight.data), before)


def test_prefix_found_from_one_name_loads_those_it_matches():
    # MindSpore 2.10: {"xx.conv1.weight", "conv1.bias"} into Net ->
    # (['_hidden.weight', '_hidden.bias'], ['xx.conv1.weight'])
    fresh = Net()
    weight, bias = np.full((2, 3), 0.25, np.float32), np.full((2,), -0.5, np.float32)
    result = kt.load_param_into_net(fresh, {"xx.conv1.weight": weight, "conv1.bias": bias})
    assert result == (["_hidden.weight", "_hidden.bias"], ["xx.conv1.weight"])
    np.testing.assert_array_equal(np.asarray(fresh.conv1.weight.data), weight)
    np.testing.assert_array_equal(np.asarray(fresh.conv1.bias.data), bias)


def test_prefixed_shape_mismatch_is_an_error():
    with pytest.raises(RuntimeError, match="conv1.weight"):
        kt.load_param_into_net(Net(), {"net.conv1.weight": np.zeros((3, 3), np.float32)})
