"""`mindspore._extends.parse`: `compile_config`, the switches MindSpore's
tests set (`CHECK_BPROP`, `RECURSIVE_EVAL`). k_transform checks a user's
bprop's gradient shapes always, so setting them changes nothing."""

import types

from k_transform.mindspore.absent import missing

compile_config = types.SimpleNamespace(CHECK_BPROP="", RECURSIVE_EVAL="")
__all__ = ["compile_config"]
__getattr__ = missing("mindspore._extends.parse")
