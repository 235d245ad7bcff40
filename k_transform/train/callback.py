"""Callbacks of `Model.train` / `Model.eval`, as MindSpore's.

A `Callback` overrides any of `on_train_begin`, `on_train_epoch_begin`,
`on_train_step_begin`, `on_train_step_end`, `on_train_epoch_end`,
`on_train_end` (and `on_eval_*`); each receives a `RunContext` whose
`original_args()` holds MindSpore's fields: `cur_epoch_num`, `cur_step_num`
(counted over all epochs), `batch_num` (steps per epoch, when the dataset
has a length), `epoch_num`, `net_outputs` (the step's loss), `train_network`,
`network`, `optimizer`. `run_context.request_stop()` ends training after the
current step.

`LossMonitor(per_print_times=1)` shows a tqdm progress bar per epoch with the
running mean loss (MindSpore prints a line per step instead) and keeps every
step's loss in `losses` (k_transform's addition, for plotting). A NaN or
infinite loss is a ValueError, as in MindSpore.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from tqdm.auto import tqdm


class RunContext:
    """What a callback sees: the run's fields, and a way to stop it."""

    def __init__(self, cb_params: SimpleNamespace):
        self._params = cb_params
        self._stop = False

    def original_args(self) -> SimpleNamespace:
        return self._params

    def request_stop(self) -> None:
        self._stop = True

    def get_stop_requested(self) -> bool:
        return self._stop


class Callback:
    """Base class: every hook does nothing. As in MindSpore, the `on_train_*`
    and `on_eval_*` hooks call the older names (`begin`, `epoch_begin`,
    `step_begin`, `step_end`, `epoch_end`, `end`), which its tutorials
    override; a subclass overrides either."""

    def begin(self, run_context: RunContext) -> None: ...

    def epoch_begin(self, run_context: RunContext) -> None: ...

    def step_begin(self, run_context: RunContext) -> None: ...

    def step_end(self, run_context: RunContext) -> None: ...

    def epoch_end(self, run_context: RunContext) -> None: ...

    def end(self, run_context: RunContext) -> None: ...

    def on_train_begin(self, run_context: RunContext) -> None:
        self.begin(run_context)

    def on_train_epoch_begin(self, run_context: RunContext) -> None:
        self.epoch_begin(run_context)

    def on_train_step_begin(self, run_context: RunContext) -> None:
        self.step_begin(run_context)

    def on_train_step_end(self, run_context: RunContext) -> None:
        self.step_end(run_context)

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        self.epoch_end(run_context)

    def on_train_end(self, run_context: RunContext) -> None:
        self.end(run_context)

    def on_eval_begin(self, run_context: RunContext) -> None:
        self.begin(run_context)

    def on_eval_step_end(self, run_context: RunContext) -> None:
        self.step_end(run_context)

    def on_eval_end(self, run_context: RunContext) -> None:
        self.end(run_context)


class LossMonitor(Callback):
    """A tqdm bar per epoch showing the mean loss so far; `losses` keeps all."""

    def __init__(self, per_print_times: int = 1):
        if not isinstance(per_print_times, int) or per_print_times < 0:
            raise ValueError(f"per_print_times must be an int >= 0, got {per_print_times!r}")
        self.per_print_times = per_print_times
        self.losses: list[float] = []
        self._bar = None
        self._epoch_losses: list[float] = []

    def on_train_epoch_begin(self, run_context: RunContext) -> None:
        args = run_context.original_args()
        self._epoch_losses = []
        self._bar = tqdm(
            total=args.batch_num,
            desc=f"epoch {args.cur_epoch_num}/{args.epoch_num}",
            unit="step",
            leave=True,
        )

    def on_train_step_end(self, run_context: RunContext) -> None:
        args = run_context.original_args()
        outputs = args.net_outputs
        loss = float(outputs[0] if isinstance(outputs, tuple) else outputs)
        if math.isnan(loss) or math.isinf(loss):
            raise ValueError(
                f"epoch {args.cur_epoch_num} step {args.cur_step_num}: loss is {loss}, "
                "training stops"
            )
        self.losses.append(loss)
        self._epoch_losses.append(loss)
        if self._bar is not None:
            self._bar.update(1)
            if self.per_print_times and len(self._epoch_losses) % self.per_print_times == 0:
                mean = sum(self._epoch_losses) / len(self._epoch_losses)
                self._bar.set_postfix(loss=f"{mean:.4f}", refresh=False)

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        if self._bar is not None:
            if self._epoch_losses:
                mean = sum(self._epoch_losses) / len(self._epoch_losses)
                self._bar.set_postfix(loss=f"{mean:.4f}")
            self._bar.close()
            self._bar = None

    on_train_end = on_train_epoch_end
