"""`mindspore._extends`: `cell_attr_register`, which MindSpore's Cells use on
`__init__` to record their arguments (`cell_init_args`); and `.parse`."""

import functools
import inspect

from k_transform.mindspore.absent import missing


def cell_attr_register(fn=None, attrs=None):
    """MindSpore's decorator: `__init__` runs as written, then `cell_init_args`
    records the Cell's class and arguments (or the attributes `attrs` names)."""

    def wrap(init):
        @functools.wraps(init)
        def registered(self, *args, **kwargs):
            init(self, *args, **kwargs)
            if attrs is None:
                bound = inspect.signature(init).bind(self, *args, **kwargs).arguments
                values = [v for k, v in bound.items() if k != "self"]
            else:
                names = [attrs] if isinstance(attrs, str) else list(attrs)
                values = [getattr(self, n) for n in names if hasattr(self, n)]
            object.__setattr__(self, "cell_init_args", type(self).__name__ + str(values))

        return registered

    return wrap(fn) if fn is not None else wrap


__all__ = ["cell_attr_register"]
__getattr__ = missing("mindspore._extends")
