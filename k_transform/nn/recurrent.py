"""Recurrent layers: RNN, GRU, LSTM, MindSpore 2.10's.

Each layer and direction has MindSpore's Parameters, named as MindSpore names
them and listed in its order: every `weight_ih_l{k}[_reverse]`, then every
`weight_hh_...`, `bias_ih_...`, `bias_hh_...` (a weight is (gates * hidden,
in), the gates stacked in MindSpore's order: LSTM i, f, g, o; GRU r, z, n).
Inputs are (seq, batch, in), or (batch, seq, in) with `batch_first`; `hx` is
(layers * directions, batch, hidden), a pair (h, c) for LSTM; `seq_length`
(batch,) holds each sequence's length: past it the state stops changing and
the output is zero, and the reverse direction reverses each sequence within
its length (MindSpore's `ReverseSequence`).

The loop over time is a Python `for` whose outputs are written row by row
(`outputs.at[t].set(h)`), so its gradient is the loop's (k_transform
differentiates the loop; it becomes a `lax.scan` when traced).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.cell import Cell, Parameter
from k_transform.common import initializer as init
from k_transform.nn.layers import Dropout, _plus, _values


def rnn_tanh_step(x, h, w_ih, w_hh, b_ih, b_hh):
    return jnp.tanh(_gates(x, h, w_ih, w_hh, b_ih, b_hh))


def rnn_relu_step(x, h, w_ih, w_hh, b_ih, b_hh):
    return jax.nn.relu(_gates(x, h, w_ih, w_hh, b_ih, b_hh))


def _gates(x, h, w_ih, w_hh, b_ih, b_hh):
    """x @ w_ih.T + b_ih + h @ w_hh.T + b_hh (no biases where b_ih is None)."""
    gates = jnp.matmul(x, jnp.transpose(w_ih)) + jnp.matmul(h, jnp.transpose(w_hh))
    if b_ih is not None:
        gates = gates + b_ih + b_hh
    return gates


def gru_step(x, h, w_ih, w_hh, b_ih, b_hh):
    """r, z, n gates; the reset gate scales h's part of n, bias included."""
    gi = jnp.matmul(x, jnp.transpose(w_ih))
    gh = jnp.matmul(h, jnp.transpose(w_hh))
    if b_ih is not None:
        gi = gi + b_ih
        gh = gh + b_hh
    i_r, i_z, i_n = jnp.split(gi, 3, axis=-1)
    h_r, h_z, h_n = jnp.split(gh, 3, axis=-1)
    reset = jax.nn.sigmoid(i_r + h_r)
    update = jax.nn.sigmoid(i_z + h_z)
    new = jnp.tanh(i_n + reset * h_n)
    return new + update * (h - new)


def lstm_step(x, state, w_ih, w_hh, b_ih, b_hh):
    """i, f, g, o gates; the state is (h, c)."""
    h, c = state
    i, f, g, o = jnp.split(_gates(x, h, w_ih, w_hh, b_ih, b_hh), 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return jax.nn.sigmoid(o) * jnp.tanh(c), c


def reverse_sequences(x, seq_length):
    """x (seq, batch, ...) with each sequence's first `seq_length[b]` steps
    reversed and the rest left in place (MindSpore's ReverseSequence(0, 1))."""
    t = jnp.arange(jnp.shape(x)[0])[:, None]
    index = jnp.where(t < seq_length[None, :], seq_length[None, :] - 1 - t, t)
    index = jnp.reshape(index, jnp.shape(index) + (1,) * (jnp.ndim(x) - 2))
    # the full shape: k_transform's take_along_axis gradient needs it (it does
    # not broadcast the index)
    return jnp.take_along_axis(x, jnp.broadcast_to(index, jnp.shape(x)), axis=0)


class _RNNBase(Cell):
    """The stacked, optionally bidirectional recurrence shared by RNN, GRU and
    LSTM; `step(x_t, state, w_ih, w_hh, b_ih, b_hh) -> state` is the cell."""

    MODE = "RNN_TANH"

    def __init__(
        self,
        input_size,
        hidden_size,
        num_layers=1,
        has_bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__()
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.step, gates = STEPS[self.MODE]
        self.is_lstm = self.MODE == "LSTM"
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.has_bias, self.batch_first, self.bidirectional = has_bias, batch_first, bidirectional
        self.dropout = dropout
        self.dropout_op = Dropout(p=float(dropout))
        self.num_directions = 2 if bidirectional else 1
        self.weights_by_layer = self.make_weights(gates, seed, dtype)

    def make_weights(self, gates, seed, dtype) -> tuple:
        """MindSpore's Parameters, made in its order (every weight_ih first,
        then weight_hh, bias_ih, bias_hh), all uniform on +-1/sqrt(hidden);
        returned per layer, per direction as (w_ih, w_hh, b_ih, b_hh,
        reverse), which `construct` iterates over (k_transform gives no
        gradient to a Parameter read from a tuple by an index computed at run
        time)."""
        ends = [
            (f"l{layer}{'_reverse' if d else ''}", layer, d)
            for layer in range(self.num_layers)
            for d in range(self.num_directions)
        ]
        size, width = gates * self.hidden_size, self.hidden_size * self.num_directions
        shapes = {
            "weight_ih": lambda layer: (size, self.input_size if layer == 0 else width),
            "weight_hh": lambda layer: (size, self.hidden_size),
            "bias_ih": lambda layer: (size,),
            "bias_hh": lambda layer: (size,),
        }
        uniform = init.Uniform(1 / math.sqrt(self.hidden_size))
        for i, kind in enumerate(list(shapes)[: 4 if self.has_bias else 2]):
            for k, (end, layer, _) in enumerate(ends):
                value = _values(uniform, shapes[kind](layer), _plus(seed, i * len(ends) + k), dtype)
                setattr(self, f"{kind}_{end}", Parameter(value, f"{kind}_{end}"))
        return tuple(
            tuple(
                (*(getattr(self, f"{kind}_{end}", None) for kind in shapes), d == 1)
                for end, layer_d, d in ends
                if layer_d == layer
            )
            for layer in range(self.num_layers)
        )

    def construct(self, x, hx=None, seq_length=None):
        if self.batch_first:
            x = jnp.swapaxes(x, 0, 1)
        if hx is None:
            zeros = jnp.zeros(
                (self.num_layers * self.num_directions, jnp.shape(x)[1], self.hidden_size), x.dtype
            )
            hx = (zeros, zeros) if self.is_lstm else zeros
        finals = []
        for layer, directions in enumerate(self.weights_by_layer):
            if self.dropout > 0 and layer > 0:
                x = self.dropout_op(x)  # between layers
            outputs = []
            for w_ih, w_hh, b_ih, b_hh, reverse in directions:
                k = len(finals)
                state = (hx[0][k], hx[1][k]) if self.is_lstm else hx[k]
                ys, final = self.direction(x, state, seq_length, (w_ih, w_hh, b_ih, b_hh), reverse)
                outputs.append(ys)
                finals.append(final)
            x = jnp.concatenate(outputs, axis=2) if self.bidirectional else outputs[0]
        if self.batch_first:
            x = jnp.swapaxes(x, 0, 1)
        if self.is_lstm:
            return x, (jnp.stack([f[0] for f in finals]), jnp.stack([f[1] for f in finals]))
        return x, jnp.stack(finals)

    def direction(self, x, state, seq_length, weights, reverse):
        """(outputs, final state) of one layer and direction over the sequence."""
        if reverse:
            x = jnp.flip(x, 0) if seq_length is None else reverse_sequences(x, seq_length)
        w_ih, w_hh, b_ih, b_hh = weights
        steps, batch = jnp.shape(x)[:2]
        ys = jnp.zeros((steps, batch, self.hidden_size), x.dtype)
        for t in range(steps):
            new = self.step(x[t], state, w_ih, w_hh, b_ih, b_hh)
            h = new[0] if self.is_lstm else new
            if seq_length is None:
                state = new
            else:
                running = (t < seq_length)[:, None]
                h = jnp.where(running, h, 0.0)
                if self.is_lstm:
                    state = (
                        jnp.where(running, new[0], state[0]),
                        jnp.where(running, new[1], state[1]),
                    )
                else:
                    state = jnp.where(running, new, state)
            ys = ys.at[t].set(h)
        if reverse:
            ys = jnp.flip(ys, 0) if seq_length is None else reverse_sequences(ys, seq_length)
        return ys, state


STEPS = {
    "RNN_TANH": (rnn_tanh_step, 1),
    "RNN_RELU": (rnn_relu_step, 1),
    "GRU": (gru_step, 3),
    "LSTM": (lstm_step, 4),
}


class RNN(_RNNBase):
    """Elman RNN: h_t = tanh (or relu: `nonlinearity="relu"`, a keyword only,
    as MindSpore reads it) of W_ih x_t + b_ih + W_hh h_{t-1} + b_hh."""

    def __init__(
        self,
        input_size,
        hidden_size,
        num_layers=1,
        has_bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        dtype=np.float32,
        *,
        nonlinearity="tanh",
        seed=None,
    ):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            has_bias,
            batch_first,
            dropout,
            bidirectional,
            dtype,
            seed,
        )
        self.nonlinearity = nonlinearity
        self.step = rnn_tanh_step if nonlinearity == "tanh" else rnn_relu_step


class GRU(_RNNBase):
    """GRU: r, z from sigmoids, n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),
    h_t = (1 - z) * n + z * h_{t-1}."""

    MODE = "GRU"


class LSTM(_RNNBase):
    """LSTM: i, f, o from sigmoids, g = tanh, c_t = f * c + i * g,
    h_t = o * tanh(c_t); `hx` and the final state are pairs (h, c)."""

    MODE = "LSTM"
