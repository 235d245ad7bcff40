"""A small Transformer encoder classifier on random token ids, MindSpore style.

`nn.Embedding` plus a learned position embedding (a `Parameter`), two
`nn.TransformerEncoderLayer`s (batch_first, no dropout) in an `nn.CellList`,
mean pooling over the sequence and a `nn.Dense` classifier;
`SoftmaxCrossEntropyWithLogits(sparse=True)` and `nn.AdamWeightDecay`. Only
the imports below differ between MindSpore and k_transform
(`KT_MINDSPORE=1` picks MindSpore):

    KT_MINDSPORE=1 python examples/ms_models/transformer_encoder.py   # MindSpore 2.10
    python examples/ms_models/transformer_encoder.py                  # k_transform
"""

import os
import sys

import numpy as np

if os.environ.get("KT_MINDSPORE") == "1":
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn, ops
else:
    import k_transform.mindspore as ms
    from k_transform.mindspore import Parameter, Tensor, nn, ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_model  # noqa: E402

VOCAB, SEQ, NUM_CLASSES = 40, 6, 4


class TransformerClassifier(nn.Cell):
    def __init__(self, d_model=16, nhead=2, num_layers=2, num_classes=NUM_CLASSES):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, d_model)
        self.pos_embedding = Parameter(
            Tensor(np.zeros((1, SEQ, d_model), np.float32)), name="pos_embedding"
        )
        self.layers = nn.CellList(
            [
                nn.TransformerEncoderLayer(
                    d_model, nhead, dim_feedforward=32, dropout=0.0, batch_first=True
                )
                for _ in range(num_layers)
            ]
        )
        self.classifier = nn.Dense(d_model, num_classes)

    def construct(self, token_ids):
        x = self.embedding(token_ids) + self.pos_embedding
        for layer in self.layers:
            x = layer(x)
        return self.classifier(ops.mean(x, 1))


def data(steps, seed, batch=5):
    rng = np.random.default_rng(seed)
    batches = [
        (
            rng.integers(0, VOCAB, (batch, SEQ)).astype(np.int32),
            rng.integers(0, NUM_CLASSES, batch).astype(np.int32),
        )
        for _ in range(steps)
    ]
    return batches, rng.integers(0, VOCAB, (3, SEQ)).astype(np.int32)


def main(steps=3, seed=0):
    batches, probe = data(steps, seed)
    return run_model(
        TransformerClassifier,
        nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        lambda params: nn.AdamWeightDecay(params, learning_rate=0.01, weight_decay=0.01),
        batches,
        probe,
        seed,
        "transformer_encoder",
    )


if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE)
    for key, value in main().items():
        print(key, np.round(value, 5) if value.dtype.kind == "f" else value)
