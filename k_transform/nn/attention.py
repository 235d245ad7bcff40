"""Attention layers: MultiheadAttention and TransformerEncoderLayer, MindSpore
2.10's.

`MultiheadAttention` computes what MindSpore's `multi_head_attention_forward`
does: q, k, v projected (one packed `in_proj_weight` (3E, E) when the key and
value widths are E, else `q_proj_weight`, `k_proj_weight`, `v_proj_weight`),
split into heads, each scaled by head_dim ** -1/4 before `q @ k.T`, masked
(a bool mask is -inf where True, a float mask is added), softmax, dropout in
training, `@ v`, heads joined and `out_proj` (a Dense). Inputs are (L, N, E),
(N, L, E) with `batch_first`, or unbatched (L, E); it returns
`(attn_output, attn_weights)` (weights (N, L, S), averaged over heads unless
`average_attn_weights=False`: (N, heads, L, S)), or `(attn_output,)` with
`need_weights=False`.

Differences from MindSpore 2.10 kept: a bool `key_padding_mask` masks (-inf)
also beside a float `attn_mask` (MindSpore adds it there as 0 / 1); attention
dropout is a sub-Cell `attn_dropout` (made only when `dropout > 0`), where
MindSpore calls a function.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from k_transform.cell import Cell, Parameter
from k_transform.common import initializer as init
from k_transform.nn.layers import Dense, Dropout, LayerNorm, _plus, _values


def additive_mask(mask, dtype):
    """A mask to add to attention scores: -inf where a bool mask is True, a
    float mask as it is."""
    if jnp.issubdtype(mask.dtype, jnp.bool_):
        return jnp.where(mask, -jnp.inf, 0.0).astype(dtype)
    return mask.astype(dtype)


def pad_last(a, value):
    """`a` with one more entry, `value`, at the end of its last axis."""
    return jnp.pad(a, [(0, 0)] * (jnp.ndim(a) - 1) + [(0, 1)], constant_values=value)


class MultiheadAttention(Cell):
    """Multi-head attention, MindSpore 2.10's signature, Parameters (names,
    shapes, order) and results; see the module docstring. `dropout` drops
    attention weights in training; `add_bias_kv` appends the learnt `bias_k`
    / `bias_v` to the keys and values, `add_zero_attn` a zero key and value.
    `seed` (k_transform's): draw the initial values from that seed.
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        dropout=0.0,
        has_bias=True,
        add_bias_kv=False,
        add_zero_attn=False,
        kdim=None,
        vdim=None,
        batch_first=False,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise ValueError("The init argument 'embed_dim' must be divisible by 'num_heads'.")
        self.dropout, self.batch_first, self.add_zero_attn = dropout, batch_first, add_zero_attn
        self.packed = self.kdim == embed_dim and self.vdim == embed_dim
        xavier = init.XavierUniform()
        if self.packed:
            self.in_proj_weight = Parameter(
                _values(xavier, (3 * embed_dim, embed_dim), seed, dtype), "in_proj_weight"
            )
        else:
            for k, (name, width) in enumerate(
                [("q", embed_dim), ("k", self.kdim), ("v", self.vdim)]
            ):
                shape = (embed_dim, width)
                weight = Parameter(
                    _values(xavier, shape, _plus(seed, k), dtype), f"{name}_proj_weight"
                )
                setattr(self, f"{name}_proj_weight", weight)
        self.has_bias = has_bias
        if has_bias:
            self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, dtype), "in_proj_bias")
        self.add_bias_kv = add_bias_kv
        if add_bias_kv:
            normal = init.XavierNormal()
            shape = (1, 1, embed_dim)
            self.bias_k = Parameter(_values(normal, shape, _plus(seed, 3), dtype), "bias_k")
            self.bias_v = Parameter(_values(normal, shape, _plus(seed, 4), dtype), "bias_v")
        self.out_proj = Dense(
            embed_dim, embed_dim, has_bias=has_bias, dtype=dtype, seed=_plus(seed, 5)
        )
        if dropout > 0:
            self.attn_dropout = Dropout(p=dropout)

    def construct(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
    ):
        batched = jnp.ndim(query) == 3
        if not batched:
            query, key, value = query[:, None], key[:, None], value[:, None]
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask[None]
        elif self.batch_first:
            query, key, value = [jnp.swapaxes(a, 0, 1) for a in (query, key, value)]
        q, k, v = self.project(query, key, value)
        mask = self.scores_mask(attn_mask, key_padding_mask, q.dtype)
        if self.add_bias_kv:
            batch = jnp.shape(k)[1]
            k = jnp.concatenate([k, jnp.tile(self.bias_k, (1, batch, 1))], axis=0)
            v = jnp.concatenate([v, jnp.tile(self.bias_v, (1, batch, 1))], axis=0)
            if mask is not None:
                mask = pad_last(mask, 0.0)
        q, k, v = self.heads(q), self.heads(k), self.heads(v)  # (N, heads, length, head_dim)
        if self.add_zero_attn:
            zeros = jnp.zeros(jnp.shape(k)[:2] + (1, self.head_dim), k.dtype)
            k = jnp.concatenate([k, zeros], axis=2)
            v = jnp.concatenate([v, zeros], axis=2)
            if mask is not None:
                mask = pad_last(mask, 0.0)
        scale = math.sqrt(math.sqrt(self.head_dim))
        scores = jnp.matmul(q / scale, jnp.swapaxes(k, -1, -2) / scale)
        if mask is not None:
            scores = scores + mask
        weights = jax.nn.softmax(scores, axis=-1)
        if self.dropout > 0:
            weights = self.attn_dropout(weights)
        out = jnp.matmul(weights, v)  # (N, heads, L, head_dim)
        tgt_len, batch = jnp.shape(out)[2], jnp.shape(out)[0]
        out = jnp.reshape(jnp.transpose(out, (2, 0, 1, 3)), (tgt_len, batch, self.embed_dim))
        out = self.out_proj(out)
        if average_attn_weights:
            weights = jnp.sum(weights, axis=1) / self.num_heads
        if not batched:
            out, weights = out[:, 0], weights[0]
        elif self.batch_first:
            out = jnp.swapaxes(out, 0, 1)
        if need_weights:
            return out, weights
        return (out,)

    def project(self, query, key, value):
        """The in-projections of (length, N, width) query, key and value."""
        if self.packed:
            w_q, w_k, w_v = jnp.split(self.in_proj_weight, 3)
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        q = jnp.matmul(query, jnp.transpose(w_q))
        k = jnp.matmul(key, jnp.transpose(w_k))
        v = jnp.matmul(value, jnp.transpose(w_v))
        if self.has_bias:
            b_q, b_k, b_v = jnp.split(self.in_proj_bias, 3)
            q, k, v = q + b_q, k + b_k, v + b_v
        return q, k, v

    def heads(self, a):
        """(length, N, E) -> (N, heads, length, head_dim)."""
        length, batch = jnp.shape(a)[:2]
        return jnp.transpose(
            jnp.reshape(a, (length, batch, self.num_heads, self.head_dim)), (1, 2, 0, 3)
        )

    def scores_mask(self, attn_mask, key_padding_mask, dtype):
        """The mask added to (N, heads, L, S) scores, or None: `attn_mask`
        (L, S) or (N * heads, L, S) plus `key_padding_mask` (N, S)."""
        mask = None
        if attn_mask is not None:
            mask = additive_mask(attn_mask, dtype)
            if jnp.ndim(mask) == 3:
                mask = jnp.reshape(mask, (-1, self.num_heads) + jnp.shape(mask)[1:])
        if key_padding_mask is not None:
            padding = additive_mask(key_padding_mask, dtype)[:, None, None, :]
            mask = padding if mask is None else mask + padding
        return mask


def relu(x):
    """MindSpore's `ops.relu`."""
    return jax.nn.relu(x)


def gelu(x):
    """MindSpore's `ops.gelu` (approximate="none"): x * Phi(x), with erf."""
    return jax.nn.gelu(x, approximate=False)


def _activation(activation):
    """TransformerEncoderLayer's: "relu" or "gelu" (MindSpore's `ops.relu` /
    `ops.gelu`, functions), a Cell or a callable."""
    if isinstance(activation, str):
        if activation not in ("relu", "gelu"):
            raise ValueError(f"The activation must be relu/gelu, but get {activation}")
        return relu if activation == "relu" else gelu
    if not callable(activation):
        raise ValueError(
            "The argument 'activation' must be str, callable or Cell instance,"
            f" but get {activation}."
        )
    return activation


class TransformerEncoderLayer(Cell):
    """Self-attention then a feed-forward block (dense1, activation, dense2),
    each with dropout, a residual connection and LayerNorm: after each block
    (`norm_first=False`, MindSpore's default) or before it. Inputs (S, N, E),
    (N, S, E) with `batch_first`, or (S, E); `src_mask` and
    `src_key_padding_mask` as MultiheadAttention's `attn_mask` and
    `key_padding_mask`. MindSpore 2.10's signature, defaults and Parameters;
    `seed` is k_transform's.
    """

    def __init__(
        self,
        d_model,
        nhead,
        dim_feedforward=2048,
        dropout=0.1,
        activation="relu",
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, batch_first=batch_first, dtype=dtype, seed=seed
        )
        self.dense1 = Dense(d_model, dim_feedforward, dtype=dtype, seed=_plus(seed, 10))
        self.dropout = Dropout(p=dropout)
        self.dense2 = Dense(dim_feedforward, d_model, dtype=dtype, seed=_plus(seed, 20))
        self.norm1 = LayerNorm((d_model,), epsilon=layer_norm_eps, dtype=dtype)
        self.norm2 = LayerNorm((d_model,), epsilon=layer_norm_eps, dtype=dtype)
        self.dropout1 = Dropout(p=dropout)
        self.dropout2 = Dropout(p=dropout)
        self.activation = _activation(activation)
        self.d_model, self.nhead, self.dim_feedforward = d_model, nhead, dim_feedforward
        self.dropout_num, self.layernorm_eps = dropout, layer_norm_eps
        self.batch_first, self.norm_first = batch_first, norm_first

    def construct(self, src, src_mask=None, src_key_padding_mask=None):
        x = src
        if self.norm_first:
            x = x + self.attention_block(self.norm1(x), src_mask, src_key_padding_mask)
            return x + self.feed_forward_block(self.norm2(x))
        x = self.norm1(x + self.attention_block(x, src_mask, src_key_padding_mask))
        return self.norm2(x + self.feed_forward_block(x))

    def attention_block(self, x, attn_mask, key_padding_mask):
        out = self.self_attn(
            x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False
        )
        return self.dropout1(out[0])

    def feed_forward_block(self, x):
        return self.dropout2(self.dense2(self.dropout(self.activation(self.dense1(x)))))
