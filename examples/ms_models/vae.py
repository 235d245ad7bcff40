"""A small variational autoencoder on random vectors, MindSpore style.

Encoder `nn.Dense` layers give the mean and log-variance of a 4-d latent;
the reparameterisation noise `eps` comes in with the data (so MindSpore and
k_transform see the same draws): `z = mu + exp(logvar / 2) * eps`; the
decoder's logits are scored with `nn.BCEWithLogitsLoss(reduction="none")`
(summed over features) plus the KL term, averaged over the batch, in a loss
Cell of our own; `nn.Momentum`. Only the imports below differ between
MindSpore and k_transform (`KT_MINDSPORE=1` picks MindSpore):

    KT_MINDSPORE=1 python examples/ms_models/vae.py   # MindSpore 2.10
    python examples/ms_models/vae.py                  # k_transform
"""

import os
import sys

import numpy as np

if os.environ.get("KT_MINDSPORE") == "1":
    import mindspore as ms
    from mindspore import nn, ops
else:
    import k_transform.mindspore as ms
    from k_transform.mindspore import nn, ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_model  # noqa: E402

FEATURES, LATENT = 16, 4


class VAE(nn.Cell):
    """`construct((x, eps))` -> (reconstruction logits, mu, logvar)."""

    def __init__(self, features=FEATURES, hidden=12, latent=LATENT):
        super().__init__()
        self.encoder = nn.Dense(features, hidden, activation="relu")
        self.fc_mu = nn.Dense(hidden, latent)
        self.fc_logvar = nn.Dense(hidden, latent)
        self.decoder = nn.SequentialCell(
            [nn.Dense(latent, hidden), nn.ReLU(), nn.Dense(hidden, features)]
        )

    def construct(self, inputs):
        x, eps = inputs
        h = self.encoder(x)
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        z = mu + ops.exp(0.5 * logvar) * eps
        return self.decoder(z), mu, logvar


class ELBOLoss(nn.Cell):
    """Reconstruction (binary cross-entropy on logits) plus KL(q || N(0, 1))."""

    def __init__(self):
        super().__init__()
        self.bce = nn.BCEWithLogitsLoss(reduction="none")

    def construct(self, outputs, target):
        logits, mu, logvar = outputs
        bce = self.bce(logits, target)
        kl = -0.5 * ops.sum(1.0 + logvar - mu * mu - ops.exp(logvar), 1)
        return ops.mean(ops.sum(bce, 1) + kl)


def data(steps, seed, batch=8):
    rng = np.random.default_rng(seed)

    def draw(n):
        x = (rng.random((n, FEATURES)) < 0.3).astype(np.float32)
        eps = rng.standard_normal((n, LATENT)).astype(np.float32)
        return (x, eps), x

    batches = [draw(batch) for _ in range(steps)]
    return batches, draw(4)[0]


def main(steps=3, seed=0):
    batches, probe = data(steps, seed)
    return run_model(
        VAE,
        ELBOLoss(),
        lambda params: nn.Momentum(params, learning_rate=0.02, momentum=0.9),
        batches,
        probe,
        seed,
        "vae",
    )


if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE)
    for key, value in main().items():
        print(key, np.round(value, 5) if value.dtype.kind == "f" else value)
