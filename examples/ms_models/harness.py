"""What the four model scripts share: deterministic weights, the training run,
the checkpoint round trip. Written in MindSpore 2.x's style; like the scripts
it imports MindSpore when `KT_MINDSPORE=1` and k_transform's drop-in
otherwise, and nothing else differs.

`run_model` trains one step per batch with MindSpore 2.x's functional loop
(`ms.value_and_grad` of the `WithLossCell` over the optimizer's Parameters,
then `optimizer(grads)`, in an `@ms.jit` step), keeps the losses and the
first step's gradients by Parameter name, saves a checkpoint of the wrapped
training network (`nn.TrainOneStepCell(loss_net, optimizer)`: MindSpore
saves the optimizer's state beside the network's Parameters, under the
network's own names), loads it into a fresh network and returns numpy
arrays: losses, gradients, the trained and reloaded networks' logits on a
probe input (eval mode), and the checkpoint's names.
"""

import os
import tempfile
import zlib

import numpy as np

if os.environ.get("KT_MINDSPORE") == "1":
    import mindspore as ms
    from mindspore import Tensor, nn
else:
    import k_transform.mindspore as ms
    from k_transform.mindspore import Tensor, nn


def initial_value(name, shape, seed):
    """A Parameter's starting value, from numpy alone (seed and name), so both
    frameworks start from the same weights: BatchNorm's statistics at their
    MindSpore defaults, gamma near 1, other vectors small, matrices scaled by
    1/sqrt(fan_in)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if name.endswith("moving_mean"):
        return np.zeros(shape, np.float32)
    if name.endswith("moving_variance"):
        return np.ones(shape, np.float32)
    noise = rng.standard_normal(shape).astype(np.float32)
    if name.endswith("gamma"):
        return 1.0 + 0.1 * noise
    if len(shape) < 2:
        return 0.1 * noise
    return noise / np.float32(np.sqrt(np.prod(shape[1:])))


def set_weights(net, seed):
    """Every Parameter of `net` (trainable or not) set from `initial_value`."""
    for param in net.get_parameters():
        value = initial_value(param.name, tuple(param.shape), seed)
        param.set_data(Tensor(value, ms.float32))
    return net


def to_tensor(value):
    """A numpy array as a Tensor; a tuple of them as a tuple of Tensors."""
    if isinstance(value, tuple):
        return tuple(Tensor(v) for v in value)
    return Tensor(value)


def logits_of(output):
    """The first output of a network that returns several."""
    return np.asarray(output[0] if isinstance(output, tuple) else output)


def run_model(build, loss_fn, make_optimizer, batches, probe, seed, name):
    """Train `build()` on `batches` ((data, label) pairs of numpy arrays), one
    step each; see the module docstring for what comes back."""
    net = set_weights(build(), seed)
    net.set_train()
    loss_net = nn.WithLossCell(net, loss_fn)
    optimizer = make_optimizer(net.trainable_params())
    grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)

    @ms.jit
    def train_step(data, label):
        loss, grads = grad_fn(data, label)
        optimizer(grads)
        return loss, grads

    losses = []
    for data, label in batches:
        loss, grads = train_step(to_tensor(data), to_tensor(label))
        losses.append(float(np.asarray(loss)))
        if len(losses) == 1:
            first_grads = {
                p.name: np.asarray(g) for p, g in zip(optimizer.parameters, grads, strict=True)
            }

    net.set_train(False)
    logits = logits_of(net(to_tensor(probe)))
    train_net = nn.TrainOneStepCell(loss_net, optimizer)
    path = os.path.join(tempfile.mkdtemp(), f"{name}.ckpt")
    ms.save_checkpoint(train_net, path)
    param_dict = ms.load_checkpoint(path)
    fresh = build()
    param_not_load, _ = ms.load_param_into_net(fresh, param_dict)
    fresh.set_train(False)
    reloaded = logits_of(fresh(to_tensor(probe)))

    result = {
        "losses": np.array(losses),
        "logits": logits,
        "reloaded_logits": reloaded,
        "checkpoint_names": np.array(sorted(param_dict)),
        "param_not_load": np.array(sorted(param_not_load), dtype=str),
        "checkpoint_path": np.array(path),
    }
    result.update({"grad/" + key: grad for key, grad in first_grads.items()})
    return result
