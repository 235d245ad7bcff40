"""Checkpoints, with MindSpore's functions, names and file formats.

- `save_checkpoint(save_obj, ckpt_file_name, integrated_save=True,
  async_save=False, append_dict=None, enc_key=None, enc_mode="AES-GCM",
  choice_func=None, crc_check=False, format="ckpt")`: `save_obj` is a Cell
  (every Parameter, trainable or not, under its MindSpore name: `fc1.weight`,
  `bn1.moving_mean`), a list of Parameters, a list of
  `{"name": ..., "data": ...}` dicts (MindSpore's list form) or a dict
  name -> array. `append_dict` adds entries (a Python int is saved as int64,
  a float as float32, a str as MindSpore's "str" entry); `choice_func(name)`
  keeps the Parameters it is true for. `format="ckpt"` (the default) writes
  MindSpore's protobuf `.ckpt` (`ckpt_format`: the same bytes MindSpore 2.10
  writes for the same entries), `format="safetensors"` a safetensors file. As
  in MindSpore, a name that does not end with the format gets `.ckpt` or
  `.safetensors` appended; `crc_check` adds MindSpore's CRC-32. The file is
  written whole before `save_checkpoint` returns (`async_save` is accepted);
  encryption (`enc_key`) is not supported and raises.
- `load_checkpoint(ckpt_file_name, net=None, strict_load=False,
  filter_prefix=None, dec_key=None, dec_mode="AES-GCM", specify_prefix=None,
  choice_func=None, crc_check=False, remove_redundancy=False, format="ckpt")`
  -> dict name -> Parameter (named `name`; a "str" entry is a `str`); with
  `net`, also loads it into `net`. The file's content decides how it is read
  (a safetensors header, else MindSpore's protobuf), whatever its suffix or
  `format`; safetensors files are parsed here, bfloat16 included. An int64 or
  float64 value that JAX (without `jax_enable_x64`) would hold as int32 or
  float32 must fit: a value that would wrap or overflow raises KTransformError
  naming it. As in MindSpore, a file that does not parse, a failed CRC check,
  a missing file, or nothing left after the filters is a ValueError naming
  the file.
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

import binascii
import json
import math
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from safetensors.numpy import save as save_safetensors

from k_transform.cell import Cell, Parameter
from k_transform.errors import KTransformError
from k_transform.train import ckpt_format

FORMATS = ("ckpt", "safetensors")
SAFETENSORS_DTYPES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
    "F16": "float16",
    "BF16": jnp.bfloat16,
    "F32": "float32",
    "F64": "float64",
}


# -- saving -----------------------------------------------------------------------------------
def _host(value):
    """A value to save as a host array (a str stays a str)."""
    if isinstance(value, str):
        return value
    data = value.stored if isinstance(value, Parameter) else value
    if type(data) is float:  # a Python float (not np.float64)
        return np.asarray(data, np.float32)  # MindSpore's Tensor(0.5) is float32
    return np.asarray(data, order="C")  # (np.ascontiguousarray makes a scalar 1-D)


def _pairs(save_obj, choice_func) -> list:
    """(name, value) for each thing `save_checkpoint` accepts."""
    if isinstance(save_obj, Cell):
        pairs = [(p.name, p.stored) for _, p in save_obj.parameters_and_names()]
    elif isinstance(save_obj, dict):
        pairs = list(save_obj.items())
    elif isinstance(save_obj, (list, tuple)):
        pairs = [
            (item.name, item.stored)
            if isinstance(item, Parameter)
            else (item["name"], item["data"])
            for item in save_obj
        ]
    else:
        raise TypeError(
            "save_checkpoint saves a Cell, a list of Parameters or of {'name', 'data'} "
            f"dicts, or a dict; got {type(save_obj).__name__}"
        )
    return [(n, v) for n, v in pairs if choice_func is None or choice_func(n)]


def _entries(save_obj, append_dict, choice_func) -> dict:
    """name -> host array (or str), in the order saved."""
    entries: dict = {}
    for name, value in _pairs(save_obj, choice_func):
        if name in entries:
            raise ValueError(f"two Parameters are named {name!r}: a checkpoint needs unique names")
        entries[name] = _host(value)
    for name, value in (append_dict or {}).items():
        entries[name] = _host(value)
    return entries


def _file_name(ckpt_file_name, format: str) -> str:
    """MindSpore's checks of the name, and its suffix rule."""
    if format not in FORMATS:
        raise ValueError(
            f"For 'save_checkpoint', the format must be 'safetensors' or 'ckpt', but got {format}."
        )
    if not isinstance(ckpt_file_name, (str, os.PathLike)):
        raise TypeError(
            "For 'save_checkpoint', 'ckpt_file_name' must be a string, but got "
            f"{type(ckpt_file_name).__name__}"
        )
    name = os.path.realpath(os.fspath(ckpt_file_name))
    if os.path.isdir(name):
        raise IsADirectoryError(
            f"For 'save_checkpoint', the parameter `ckpt_file_name`: {name} is a directory, "
            "it must be a file name."
        )
    return name if name.endswith(format) else f"{name}.{format}"


def _safetensors_bytes(entries: dict, name: str, crc_check: bool) -> bytes:
    metadata = {"format": "ms", "writer": "k_transform"}
    crc = 0
    for key in sorted(entries):
        if isinstance(entries[key], str):
            raise KTransformError(
                f"save_checkpoint: {key!r} is a str, which a safetensors file cannot hold "
                f"({name}); save with format='ckpt'"
            )
        crc = binascii.crc32(entries[key].tobytes(), binascii.crc32(key.encode(), crc))
    if crc_check:
        metadata["crc_num"] = str(crc)
    return save_safetensors(entries, metadata=metadata)


def save_checkpoint(
    save_obj,
    ckpt_file_name: str,
    integrated_save: bool = True,
    async_save=False,
    append_dict: dict | None = None,
    enc_key: bytes | None = None,
    enc_mode: str = "AES-GCM",
    choice_func=None,
    crc_check: bool = False,
    format: str = "ckpt",
    **kwargs,
) -> None:
    """Write `save_obj`'s Parameters to `ckpt_file_name` (MindSpore's .ckpt, or safetensors)."""
    name = _file_name(ckpt_file_name, format)
    if enc_key is not None:
        raise KTransformError(
            f"save_checkpoint: encryption (enc_key) is not supported by k_transform ({name})"
        )
    entries = _entries(save_obj, append_dict, choice_func)
    temporary = name + ".tmp"  # the file appears whole or not at all
    try:
        with open(temporary, "wb") as file:
            if format == "safetensors":
                file.write(_safetensors_bytes(entries, name, crc_check))
            else:
                ckpt_format.write(file, entries, crc_check)
    except BaseException:
        os.remove(temporary)
        raise
    os.replace(temporary, name)


# -- loading ----------------------------------------------------------------------------------
def _is_safetensors(content: bytes) -> bool:
    """A safetensors file: an 8-byte little-endian length, then that much JSON."""
    size = int.from_bytes(content[:8], "little") if len(content) >= 8 else 0
    return 2 <= size <= len(content) - 8 and content[8:9] == b"{"


def _safetensors_arrays(content: bytes, source: str) -> tuple[dict, dict]:
    """(metadata, name -> array) of a safetensors file's bytes. (safetensors.numpy
    writes bfloat16 but does not read it back.)"""
    try:
        size = int.from_bytes(content[:8], "little")
        header = json.loads(content[8 : 8 + size])
        data = memoryview(content)[8 + size :]
        arrays = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = np.dtype(SAFETENSORS_DTYPES[info["dtype"]]).newbyteorder("<")
            start, end = info["data_offsets"]
            if end - start != math.prod(info["shape"]) * dtype.itemsize or end > len(data):
                raise ValueError(f"{name!r}: its bytes do not fit its shape or the file")
            arrays[name] = np.frombuffer(data[start:end], dtype).reshape(info["shape"]).copy()
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"Failed to read the safetensors checkpoint file {source}: {error!r}"
        ) from error
    return header.get("__metadata__") or {}, dict(sorted(arrays.items()))


def _read_safetensors(content: bytes, source: str, crc_check: bool) -> dict:
    metadata, arrays = _safetensors_arrays(content, source)
    stored = metadata.get("crc_num")
    if crc_check and stored is None:
        warnings.warn(f"load_checkpoint: {source} has no crc code to check", stacklevel=4)
    elif crc_check:
        crc = 0
        for key in sorted(arrays):
            crc = binascii.crc32(arrays[key].tobytes(), binascii.crc32(key.encode(), crc))
        if crc != int(stored):
            raise ValueError(
                "For 'load_checkpoint', the crc check has failed. Please check whether the "
                f"ckpt file is damaged: {source}"
            )
    return arrays


def _parameter(name: str, value, source: str):
    """A Parameter of `value` as JAX holds it (a str stays a str); a 64-bit value
    that would not survive JAX's 32-bit default raises."""
    if isinstance(value, str):
        return value
    held = jax.dtypes.canonicalize_dtype(value.dtype)
    if held != value.dtype:
        with np.errstate(over="ignore", invalid="ignore"):
            cast = value.astype(held)
        if np.issubdtype(value.dtype, np.integer):
            lost = cast.astype(value.dtype) != value
        else:
            lost = np.isfinite(value) & ~np.isfinite(cast)
        if np.any(lost):
            raise KTransformError(
                f"load_checkpoint: {name!r} in {source} is {value.dtype} with values that "
                f"{held} cannot hold, and JAX holds it as {held} while jax_enable_x64 is off; "
                "turn it on (jax.config.update('jax_enable_x64', True)) to load it"
            )
        value = cast
    return Parameter(value, name)


def _selected(name: str, filter_prefix, specify_prefix, choice_func) -> bool:
    def prefixes(p):
        return (p,) if isinstance(p, str) else tuple(p)

    if filter_prefix is not None and name.startswith(prefixes(filter_prefix)):
        return False
    if specify_prefix is not None and not name.startswith(prefixes(specify_prefix)):
        return False
    return choice_func is None or bool(choice_func(name))


def _read(ckpt_file_name, format: str, crc_check: bool) -> tuple[str, dict]:
    """(file name, name -> array or str) of a checkpoint file, by its content."""
    if format not in FORMATS:
        raise ValueError(
            "For 'load_checkpoint', the checkpoint file should end with '.ckpt' or "
            f"'.safetensors', please input the correct 'format' (got {format!r})."
        )
    source = os.path.realpath(os.fspath(ckpt_file_name))
    if not os.path.isfile(source):
        raise ValueError(
            f"For 'load_checkpoint', the checkpoint file: {source} does not exist, please "
            "check whether the 'ckpt_file_name' is correct."
        )
    with open(source, "rb") as file:
        content = file.read()
    if _is_safetensors(content):
        return source, _read_safetensors(content, source, crc_check)
    return source, ckpt_format.read(content, source, crc_check)


def load_checkpoint(
    ckpt_file_name: str,
    net: Cell | None = None,
    strict_load: bool = False,
    filter_prefix=None,
    dec_key: bytes | None = None,
    dec_mode: str = "AES-GCM",
    specify_prefix=None,
    choice_func=None,
    crc_check: bool = False,
    remove_redundancy: bool = False,
    format: str = "ckpt",
) -> dict:
    """name -> Parameter (or str) for each entry of the file that the filters keep."""
    if dec_key is not None:
        raise KTransformError(
            "load_checkpoint: decryption (dec_key) is not supported by k_transform "
            f"({ckpt_file_name})"
        )
    source, entries = _read(ckpt_file_name, format, crc_check)
    params = {
        name: _parameter(name, value, source)
        for name, value in entries.items()
        if _selected(name, filter_prefix, specify_prefix, choice_func)
    }
    if not params:
        raise ValueError(
            "The loaded parameter dict is empty after filter or specify, please check whether "
            f"'filter_prefix' or 'specify_prefix' are set correctly ({source})."
        )
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
    value = np.asarray(value.stored if isinstance(value, Parameter) else value)
    if value.shape != tuple(param.stored.shape):
        raise RuntimeError(
            f"load_param_into_net: {param.name!r} has shape {tuple(param.stored.shape)} in "
            f"the net and {value.shape} in the checkpoint ({name!r})"
        )
    param.set_data(value.astype(param.stored.dtype))


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
