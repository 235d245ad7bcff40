"""Checkpoints, with MindSpore's functions and names, stored as safetensors.

- `save_checkpoint(save_obj, ckpt_file_name)`: `save_obj` is a Cell (every
  Parameter, trainable or not, under its MindSpore name: `fc1.weight`,
  `bn1.moving_mean`), a list of Parameters, a list of
  `{"name": ..., "data": ...}` dicts (MindSpore's list form) or a dict
  name -> array. `append_dict` adds entries. The file is a safetensors file
  whatever its suffix (MindSpore's own `.ckpt` protobuf is not written).
  MindSpore 2.10 reads it with `load_checkpoint(path, format="safetensors")`,
  and its `save_checkpoint(net, path, format="safetensors")` files load here
  (both ways tried, same names and values); `format` and MindSpore's other
  options (encryption, async saving) are accepted and ignored.
- `load_checkpoint(ckpt_file_name, net=None, strict_load=False,
  filter_prefix=None, specify_prefix=None, choice_func=None)` -> dict
  name -> Parameter (named `name`); with `net`, also loads it into `net`.
- `load_param_into_net(net, parameter_dict, strict_load=False)` sets each of
  the net's Parameters found by name, and returns MindSpore's pair
  `(param_not_load, ckpt_not_load)`: the net's Parameter names missing from
  the dict, and the dict's names the net does not have. A shape mismatch is a
  RuntimeError, as in MindSpore; values are cast to the Parameter's dtype.
  Names with a prefix the net lacks load as MindSpore loads them (without
  `strict_load`): a checkpoint saved from a wrapper
  (`network._backbone.fc1.weight`) loads into the bare network (`fc1.weight`),
  the prefix found as the rest of the first checkpoint name that ends with a
  name not loaded, and tried again while new prefixes load more. As in
  MindSpore, the names loaded that way stay in `ckpt_not_load`.
"""

from __future__ import annotations

import numpy as np
from safetensors.numpy import load_file, save_file

from k_transform.cell import Cell, Parameter


def _entries(save_obj) -> dict[str, np.ndarray]:
    """name -> host array for each thing `save_checkpoint` accepts."""
    if isinstance(save_obj, Cell):
        pairs = [(p.name, p.data) for _, p in save_obj.parameters_and_names()]
    elif isinstance(save_obj, dict):
        pairs = list(save_obj.items())
    elif isinstance(save_obj, (list, tuple)):
        pairs = [
            (item.name, item.data) if isinstance(item, Parameter) else (item["name"], item["data"])
            for item in save_obj
        ]
    else:
        raise TypeError(
            "save_checkpoint saves a Cell, a list of Parameters or of {'name', 'data'} "
            f"dicts, or a dict; got {type(save_obj).__name__}"
        )
    entries: dict[str, np.ndarray] = {}
    for name, value in pairs:
        if name in entries:
            raise ValueError(f"two Parameters are named {name!r}: a checkpoint needs unique names")
        data = value.data if isinstance(value, Parameter) else value
        entries[name] = np.ascontiguousarray(np.asarray(data))
    return entries


def save_checkpoint(save_obj, ckpt_file_name: str, append_dict: dict | None = None, **kwargs):
    """Write `save_obj`'s Parameters to `ckpt_file_name` (safetensors)."""
    entries = _entries(save_obj)
    for name, value in (append_dict or {}).items():
        entries[name] = np.ascontiguousarray(np.asarray(value))
    save_file(entries, str(ckpt_file_name), metadata={"writer": "k_transform"})


def _selected(name: str, filter_prefix, specify_prefix, choice_func) -> bool:
    def prefixes(p):
        return (p,) if isinstance(p, str) else tuple(p)

    if filter_prefix is not None and name.startswith(prefixes(filter_prefix)):
        return False
    if specify_prefix is not None and not name.startswith(prefixes(specify_prefix)):
        return False
    return choice_func is None or bool(choice_func(name))


def load_checkpoint(
    ckpt_file_name: str,
    net: Cell | None = None,
    strict_load: bool = False,
    filter_prefix=None,
    specify_prefix=None,
    choice_func=None,
    **kwargs,
) -> dict[str, Parameter]:
    """name -> Parameter for each entry of the file that the filters keep."""
    arrays = load_file(str(ckpt_file_name))
    params = {
        name: Parameter(value, name)
        for name, value in arrays.items()
        if _selected(name, filter_prefix, specify_prefix, choice_func)
    }
    if net is not None:
        load_param_into_net(net, params, strict_load)
    return params


def load_param_into_net(net: Cell, parameter_dict: dict, strict_load: bool = False, **kwargs):
    """Set `net`'s Parameters from `parameter_dict`; returns
    `(param_not_load, ckpt_not_load)`."""
    if not isinstance(net, Cell):
        raise TypeError(f"load_param_into_net loads into a Cell, got {type(net).__name__}")
    if not isinstance(parameter_dict, dict):
        raise TypeError(f"parameter_dict must be a dict, got {type(parameter_dict).__name__}")
    param_not_load, used = [], set()
    for _, param in net.parameters_and_names():
        if param.name not in parameter_dict:
            param_not_load.append(param.name)
            continue
        _set(param, parameter_dict[param.name], param.name)
        used.add(param.name)
    ckpt_not_load = [name for name in parameter_dict if name not in used]
    if param_not_load and not strict_load:
        _load_with_prefix(net, parameter_dict, param_not_load)
    return param_not_load, ckpt_not_load


def _set(param: Parameter, value, name: str) -> None:
    value = np.asarray(value.data if isinstance(value, Parameter) else value)
    if value.shape != tuple(param.data.shape):
        raise RuntimeError(
            f"load_param_into_net: {param.name!r} has shape {tuple(param.data.shape)} in "
            f"the net and {value.shape} in the checkpoint ({name!r})"
        )
    param.set_data(value.astype(param.data.dtype))


def _prefix(parameter_dict: dict, param_not_load: list) -> str | None:
    """The prefix of the first checkpoint name that ends with a name not loaded."""
    for param_name in param_not_load:
        for name in parameter_dict:
            if name.endswith(param_name) and name != param_name:
                return name[: -len(param_name)]
    return None


def _load_with_prefix(net: Cell, parameter_dict: dict, param_not_load: list) -> None:
    """MindSpore's loading of names saved with a prefix (`_load_dismatch_prefix_params`):
    removes what it loads from `param_not_load`."""
    tried = set()
    while param_not_load:
        prefix = _prefix(parameter_dict, param_not_load)
        if prefix is None or prefix in tried:
            return
        tried.add(prefix)
        for _, param in net.parameters_and_names():
            name = prefix + param.name
            if param.name in param_not_load and name in parameter_dict:
                _set(param, parameter_dict[name], name)
                param_not_load.remove(param.name)
