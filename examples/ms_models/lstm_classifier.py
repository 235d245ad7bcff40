"""An LSTM text classifier on random token ids, MindSpore style.

`nn.Embedding`, a one-layer `nn.LSTM` (batch_first) whose last hidden state
feeds a `nn.Dense` classifier; `nn.CrossEntropyLoss` and `nn.Adam`. Only the
imports below differ between MindSpore and k_transform (`KT_MINDSPORE=1`
picks MindSpore):

    KT_MINDSPORE=1 python examples/ms_models/lstm_classifier.py   # MindSpore 2.10
    python examples/ms_models/lstm_classifier.py                  # k_transform
"""

import os
import sys

import numpy as np

if os.environ.get("KT_MINDSPORE") == "1":
    import mindspore as ms
    from mindspore import nn
else:
    import k_transform.mindspore as ms
    from k_transform.mindspore import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_model  # noqa: E402

VOCAB, SEQ, NUM_CLASSES = 50, 7, 3


class LSTMClassifier(nn.Cell):
    def __init__(self, vocab_size=VOCAB, embed_size=8, hidden_size=12, num_classes=NUM_CLASSES):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.encoder = nn.LSTM(embed_size, hidden_size, batch_first=True)
        self.classifier = nn.Dense(hidden_size, num_classes)

    def construct(self, token_ids):
        x = self.embedding(token_ids)
        _, (h_n, _) = self.encoder(x)
        return self.classifier(h_n[-1])


def data(steps, seed, batch=6):
    rng = np.random.default_rng(seed)
    batches = [
        (
            rng.integers(0, VOCAB, (batch, SEQ)).astype(np.int32),
            rng.integers(0, NUM_CLASSES, batch).astype(np.int32),
        )
        for _ in range(steps)
    ]
    return batches, rng.integers(0, VOCAB, (4, SEQ)).astype(np.int32)


def main(steps=3, seed=0):
    batches, probe = data(steps, seed)
    return run_model(
        LSTMClassifier,
        nn.CrossEntropyLoss(),
        lambda params: nn.Adam(params, learning_rate=0.01),
        batches,
        probe,
        seed,
        "lstm_classifier",
    )


if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE)
    for key, value in main().items():
        print(key, np.round(value, 5) if value.dtype.kind == "f" else value)
