"""LeNet-5 on synthetic images, written as a MindSpore 2.x script and run by k_transform.

Only the imports differ from the MindSpore script. Under MindSpore they read:

    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore import nn
    from mindspore.common.initializer import Normal

Everything below them is MindSpore code: an `nn.Cell` with `Conv2d`,
`MaxPool2d` and `Dense` (weights in MindSpore's (out, in) layout, initialised
by name, "he_uniform", and by an initializer, `Normal(0.02)`),
`SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")`, `Momentum`,
`Model.train` with `LossMonitor` and a callback of our own, `Model.eval` with
`nn.Accuracy`, a checkpoint saved, loaded and put into a fresh network, and
evaluation with `net(x)`. The images come from `shapes_data.py` beside this
file (numpy only, no download). The same file, imports swapped, was run under
MindSpore 2.10 (CPU): same output lines, MindSpore's LossMonitor printing a
line per epoch where k_transform's shows a progress bar.

    python examples/lenet_mindspore.py [--epochs 4] [--samples 2000] [--plot lenet_loss.png]
"""

import argparse
import os
import tempfile
import time

import numpy as np
from shapes_data import make_dataset

import k_transform as ms
from k_transform import dataset as ds
from k_transform import nn
from k_transform.common.initializer import Normal


class LeNet5(nn.Cell):
    """LeNet-5 for 1x16x16 images: two 5x5 convolutions ("same" padding), each
    followed by ReLU and 2x2 max pooling, then three Dense layers."""

    def __init__(self, num_class=10, num_channel=1):
        super().__init__()
        self.conv1 = nn.Conv2d(num_channel, 6, 5, pad_mode="same")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="same")
        self.fc1 = nn.Dense(16 * 4 * 4, 120, weight_init="he_uniform")
        self.fc2 = nn.Dense(120, 84, weight_init="he_uniform")
        self.fc3 = nn.Dense(84, num_class, weight_init=Normal(0.02))
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


class LossHistory(ms.Callback):
    """Keeps each step's loss (for the plot)."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_step_end(self, run_context):
        self.losses.append(float(run_context.original_args().net_outputs))


def plot_losses(losses, steps_per_epoch, path):
    """The loss per step and its mean per epoch, as a PNG (matplotlib, Agg)."""
    import matplotlib  # noqa: PLC0415 - only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(np.arange(1, len(losses) + 1), losses, lw=0.8, alpha=0.6, label="loss per step")
    starts = range(0, len(losses), steps_per_epoch)
    means = [np.mean(losses[k : k + steps_per_epoch]) for k in starts]
    ends = np.minimum(np.arange(1, len(means) + 1) * steps_per_epoch, len(losses))
    ax.plot(ends, means, "o-", color="tab:red", label="mean per epoch")
    ax.set_xlabel("step")
    ax.set_ylabel("cross entropy")
    ax.set_title("LeNet-5 on synthetic shapes")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--plot", default="lenet_loss.png", help="PNG path; '' for none")
    args = parser.parse_args()

    ms.set_seed(1)
    images, labels = make_dataset(args.samples, seed=0)
    test_images, test_labels = make_dataset(max(args.samples // 4, 10), seed=7)
    train_ds = ds.NumpySlicesDataset((images, labels), column_names=["image", "label"])
    train_ds = train_ds.batch(args.batch)
    test_ds = ds.NumpySlicesDataset((test_images, test_labels), ["image", "label"], shuffle=False)
    test_ds = test_ds.batch(250)

    net = LeNet5()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=args.lr, momentum=0.9)
    model = ms.Model(net, loss_fn, optimizer, metrics={"acc": nn.Accuracy()})
    print(f"LeNet-5: {len(net.trainable_params())} Parameters, fc1.weight {net.fc1.weight.shape}")

    history = LossHistory()
    steps = train_ds.get_dataset_size()
    start = time.time()
    model.train(args.epochs, train_ds, callbacks=[ms.LossMonitor(steps), history])
    print(f"trained {args.epochs} epochs of {steps} steps in {time.time() - start:.1f} s")
    print(f"held-out accuracy (Model.eval): {model.eval(test_ds)['acc']:.3f}")

    path = os.path.join(tempfile.mkdtemp(), "lenet.ckpt")
    ms.save_checkpoint(net, path)
    fresh = LeNet5()
    param_dict = ms.load_checkpoint(path)
    param_not_load, ckpt_not_load = ms.load_param_into_net(fresh, param_dict)
    print(f"checkpoint: {len(param_dict)} entries; not loaded: {param_not_load}, {ckpt_not_load}")

    x = ms.Tensor(test_images, ms.float32)
    logits, reloaded = net(x), fresh(x)
    accuracy = float(np.mean(np.argmax(np.asarray(reloaded), axis=1) == test_labels))
    same = np.allclose(np.asarray(logits), np.asarray(reloaded), atol=1e-5)
    print(f"reloaded network: accuracy {accuracy:.3f} with net(x); same logits: {same}")
    if args.plot:
        plot_losses(history.losses, steps, args.plot)
        print(f"loss curve written to {args.plot}")


if __name__ == "__main__":
    main()
