"""Record what MindSpore 2.10 gives for the four scripts of examples/ms_models.

Run under MindSpore (CPU), from the repository root:

    KT_MINDSPORE=1 /path/to/mindspore-venv/bin/python tests/data/ms_models/record.py

Each script runs in GRAPH_MODE with `main(steps=3, seed=0)`; its per-step
losses, first-step gradients (every Parameter, full: the nets are tiny),
eval-mode logits of the trained network on the probe input and checkpoint
names go to `<name>.npz`, and the checkpoint MindSpore saved from the
wrapped training network (`nn.TrainOneStepCell`, optimizer state included)
is copied to `<name>.ckpt` (MindSpore's protobuf format).
"""

import importlib
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "..", "examples", "ms_models")
NAMES = ["resnet", "lstm_classifier", "transformer_encoder", "vae"]


def main():
    if os.environ.get("KT_MINDSPORE") != "1":
        sys.exit("run with KT_MINDSPORE=1 under MindSpore")
    import mindspore as ms  # noqa: PLC0415 - only here, after the check

    ms.set_context(mode=ms.GRAPH_MODE)
    sys.path.insert(0, os.path.abspath(SCRIPTS))
    for name in NAMES:
        result = importlib.import_module(name).main(steps=3, seed=0)
        shutil.copyfile(str(result.pop("checkpoint_path")), os.path.join(HERE, f"{name}.ckpt"))
        result["mindspore_version"] = np.array(ms.__version__)
        np.savez_compressed(os.path.join(HERE, f"{name}.npz"), **result)
        print(name, "losses", result["losses"])


if __name__ == "__main__":
    main()
