"""Four MindSpore-style model scripts (examples/ms_models: a ResNet, an LSTM
classifier, a Transformer encoder, a VAE), run here and compared with what
MindSpore 2.10 gave for the same files (issue 30).

The oracle is MindSpore itself: `tests/data/ms_models/record.py` ran each
script under MindSpore 2.10 (CPU, GRAPH_MODE; only the scripts' imports
differ) and stored its per-step losses, every first-step gradient, the
trained network's eval-mode logits on a probe input, its checkpoint's names
(`<name>.npz`) and the `.ckpt` it saved from the wrapped training network
(`<name>.ckpt`). Both frameworks start from the same weights (numpy, from
the seed). The first step's loss and gradients of the ResNet, the LSTM
classifier and the VAE are also checked against `jax.grad` of the same
network written over plain arrays (the Transformer's is left to MindSpore's
record).
"""

from __future__ import annotations

import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import k_transform.mindspore as ms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "examples", "ms_models")
DATA = os.path.join(ROOT, "tests", "data", "ms_models")
NAMES = ["resnet", "lstm_classifier", "transformer_encoder", "vae"]
RTOL = 1e-4  # float32 on both sides, a few steps


def script(name):
    """The example module `name` (examples/ms_models on sys.path, as the
    scripts themselves put it for `harness`)."""
    if SCRIPTS not in sys.path:
        sys.path.insert(0, SCRIPTS)
    return __import__(name)


@functools.cache
def run_here(name) -> dict:
    result = script(name).main(steps=3, seed=0)
    path = str(result["checkpoint_path"])
    os.remove(path)
    os.rmdir(os.path.dirname(path))
    return result


@functools.cache
def recorded(name) -> dict:
    with np.load(os.path.join(DATA, f"{name}.npz")) as data:
        return dict(data)


def close(actual, expected, what):
    """Within RTOL, with an absolute floor scaled to the array's size (a
    gradient entry near zero beside large ones)."""
    expected = np.asarray(expected)
    floor = RTOL * float(np.max(np.abs(expected))) + 1e-7
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=floor, err_msg=what)


@pytest.mark.parametrize("name", NAMES)
def test_losses_and_first_gradients_match_mindspore(name):
    here, theirs = run_here(name), recorded(name)
    assert str(theirs["mindspore_version"]) == "2.10.0"
    close(here["losses"], theirs["losses"], f"{name}: losses per step")
    grads_here = sorted(k for k in here if k.startswith("grad/"))
    assert grads_here == sorted(k for k in theirs if k.startswith("grad/"))
    for key in grads_here:
        close(here[key], theirs[key], f"{name}: first-step {key}")
    # the optimizer's updates too: the trained network's logits
    close(here["logits"], theirs["logits"], f"{name}: logits after training")


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_of_training_network_reloads(name):
    """Saved from `TrainOneStepCell(WithLossCell(net), opt)`, loaded into a
    fresh network: every Parameter found under MindSpore's names (no wrapper
    prefix), the same logits."""
    here, theirs = run_here(name), recorded(name)
    assert here["param_not_load"].size == 0
    np.testing.assert_array_equal(here["reloaded_logits"], here["logits"])
    network = {p.name for p in build(name).get_parameters()}
    saved_here, saved_there = set(here["checkpoint_names"]), set(theirs["checkpoint_names"])
    assert saved_here & network == saved_there & network == network
    # the optimizer's entries k_transform saves are among MindSpore's names
    assert saved_here - network <= saved_there - network


def build(name):
    """A fresh network of script `name` (its one Cell class built with defaults)."""
    builders = {
        "resnet": "ResNet",
        "lstm_classifier": "LSTMClassifier",
        "transformer_encoder": "TransformerClassifier",
        "vae": "VAE",
    }
    return getattr(script(name), builders[name])()


@pytest.mark.parametrize("name", NAMES)
def test_mindspore_ckpt_loads_with_same_logits(name):
    """The `.ckpt` MindSpore 2.10 saved (protobuf, from the training network,
    optimizer state included) loaded into a fresh network here gives the
    logits MindSpore gave."""
    net = build(name)
    param_dict = ms.load_checkpoint(os.path.join(DATA, f"{name}.ckpt"))
    param_not_load, _ = ms.load_param_into_net(net, param_dict)
    assert param_not_load == []
    net.set_train(False)
    _, probe = script(name).data(3, 0)
    logits = script("harness").logits_of(net(script("harness").to_tensor(probe)))
    close(logits, recorded(name)["logits"], f"{name}: logits of MindSpore's checkpoint")


# -- an oracle besides MindSpore: the networks over plain arrays, jax.grad --------------
def dense(params, name, x):
    return x @ params[f"{name}.weight"].T + params[f"{name}.bias"]


def cross_entropy(logits, labels):
    picked = jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=1) - picked)


def conv(params, name, x, stride, padding):
    return jax.lax.conv_general_dilated(
        x,
        params[f"{name}.weight"],
        (stride, stride),
        [(padding, padding)] * 2,
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    )


def batch_norm(params, name, x):
    """Training mode: the batch's statistics (biased variance), eps 1e-5."""
    mean = jnp.mean(x, axis=(0, 2, 3), keepdims=True)
    var = jnp.var(x, axis=(0, 2, 3), keepdims=True)
    scale = params[f"{name}.gamma"].reshape(1, -1, 1, 1) * jax.lax.rsqrt(var + 1e-5)
    return (x - mean) * scale + params[f"{name}.beta"].reshape(1, -1, 1, 1)


def resnet_loss(params, images, labels):
    def block(name, x, stride, down):
        out = jax.nn.relu(
            batch_norm(params, f"{name}.bn1", conv(params, f"{name}.conv1", x, stride, 1))
        )
        out = batch_norm(params, f"{name}.bn2", conv(params, f"{name}.conv2", out, 1, 1))
        if down:
            x = batch_norm(
                params, f"{name}.down_bn", conv(params, f"{name}.down_conv", x, stride, 0)
            )
        return jax.nn.relu(out + x)

    x = jax.nn.relu(batch_norm(params, "bn1", conv(params, "conv1", images, 2, 1)))
    x = block("layer2", block("layer1", x, 1, False), 2, True)
    return cross_entropy(dense(params, "fc", jnp.mean(x, axis=(2, 3))), labels)


def lstm_loss(params, token_ids, labels):
    """MindSpore's LSTM: gates stacked i, f, g, o; the last step's h."""
    x = params["embedding.embedding_table"][token_ids]
    w_ih, w_hh = params["encoder.weight_ih_l0"], params["encoder.weight_hh_l0"]
    bias = params["encoder.bias_ih_l0"] + params["encoder.bias_hh_l0"]
    h = c = jnp.zeros((x.shape[0], w_hh.shape[1]))
    for t in range(x.shape[1]):
        i, f, g, o = jnp.split(x[:, t] @ w_ih.T + h @ w_hh.T + bias, 4, axis=1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return cross_entropy(dense(params, "classifier", h), labels)


def vae_loss(params, inputs, target):
    x, eps = inputs
    h = jax.nn.relu(dense(params, "encoder", x))
    mu, logvar = dense(params, "fc_mu", h), dense(params, "fc_logvar", h)
    z = mu + jnp.exp(0.5 * logvar) * eps
    logits = dense(params, "decoder.2", jax.nn.relu(dense(params, "decoder.0", z)))
    bce = jnp.maximum(logits, 0) - logits * target + jnp.log1p(jnp.exp(-jnp.abs(logits)))
    kl = -0.5 * jnp.sum(1.0 + logvar - mu * mu - jnp.exp(logvar), 1)
    return jnp.mean(jnp.sum(bce, 1) + kl)


ORACLES = {"resnet": resnet_loss, "lstm_classifier": lstm_loss, "vae": vae_loss}


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_first_gradients_match_jax_grad(name):
    """The first step's loss and gradients against jax.grad of the same
    network written over plain arrays, from the same initial weights."""
    here = run_here(name)
    initial_value = script("harness").initial_value
    params = {
        p.name: jnp.asarray(initial_value(p.name, tuple(p.shape), 0))
        for p in build(name).trainable_params()
    }
    batches, _ = script(name).data(1, 0)
    data, label = batches[0]
    loss, grads = jax.jit(jax.value_and_grad(ORACLES[name]))(params, data, label)
    close(here["losses"][0], loss, f"{name}: first loss against JAX")
    assert sorted("grad/" + k for k in grads) == sorted(k for k in here if k.startswith("grad/"))
    for key, grad in grads.items():
        close(here["grad/" + key], grad, f"{name}: {key} against jax.grad")
