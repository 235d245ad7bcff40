"""MindSpore's `.ckpt` checkpoint format: its protobuf schema, bytes in and out.

The schema is MindSpore 2.10's `checkpoint.proto` (proto2, no package),
described here with `descriptor_pb2` and built at import in a pool of our own:

    message Checkpoint {
      message Value {
        required string tag = 1;                  // the Parameter's name
        oneof value { TensorProto tensor = 2; MapTensorProto maptensor = 3; }
      }
      repeated Value value = 1;
    }
    message TensorProto {
      repeated int64 dims = 1;                    // the shape; [] for a scalar
      required string tensor_type = 2;            // "Float32", "Int32", "BFloat16", ...
      required bytes tensor_content = 3;          // C order, little-endian
    }
    message MapTensorProto { repeated TensorProto tensor = 1; }

A file is one serialised `Checkpoint` per entry, back to back (which protobuf
reads as one Checkpoint of all the Values), in the order saved. As MindSpore:
- a tensor over 512 MiB is written as several Values with the same tag, its
  bytes cut in order; consecutive Values of one tag are joined when read;
- a string entry (`append_dict={"note": "hi"}`) has tensor_type "str", dims
  [0] and numpy's UTF-32 bytes, and reads back as a `str`;
- dims [0] with bytes for one element is a scalar (MindSpore reads [0] as []);
- `crc_check=True` ends the file with b"crc_num" and the CRC-32 of all the
  bytes before it, in 10 big-endian bytes. A reader strips such a trailer
  whenever it is there and checks it only when asked (`crc_check=True`; a
  file without one then only warns, as in MindSpore).
Encryption (`enc_key`) and MapParameters (`maptensor`) are not supported.

`write(file, entries, crc_check)` and `read(content, source, crc_check)` work
on name -> numpy array (or str) dicts; the errors for a file that does not
parse are MindSpore's ValueErrors, naming the file.
"""

from __future__ import annotations

import binascii
import math
import warnings
from typing import BinaryIO

import jax.numpy as jnp
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from k_transform.errors import KTransformError

# MindSpore's tensor_type strings (`str(mindspore.float32)`) <-> numpy dtypes.
MS_TYPE_OF_NUMPY = {
    "bool": "Bool",
    "int8": "Int8",
    "int16": "Int16",
    "int32": "Int32",
    "int64": "Int64",
    "uint8": "UInt8",
    "uint16": "UInt16",
    "uint32": "UInt32",
    "uint64": "UInt64",
    "float16": "Float16",
    "float32": "Float32",
    "float64": "Float64",
    "bfloat16": "BFloat16",
}
NUMPY_OF_MS_TYPE = {
    ms: np.dtype(jnp.bfloat16 if name == "bfloat16" else name)
    for name, ms in MS_TYPE_OF_NUMPY.items()
}
STRING_TYPE = "str"
SLICE_BYTES = 512 * 1024 * 1024  # MindSpore's SLICE_SIZE (in KiB) * 1024
CRC_MARK = b"crc_num"
CRC_BYTES = 10


# -- the schema -------------------------------------------------------------------------------
def _field(name, number, label, kind, type_name=None, oneof_index=None):
    field = descriptor_pb2.FieldDescriptorProto(name=name, number=number, label=label, type=kind)
    if type_name is not None:
        field.type_name = type_name
    if oneof_index is not None:
        field.oneof_index = oneof_index
    return field


def _schema() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FieldDescriptorProto
    required, optional, repeated = f.LABEL_REQUIRED, f.LABEL_OPTIONAL, f.LABEL_REPEATED
    value = descriptor_pb2.DescriptorProto(
        name="Value",
        field=[
            _field("tag", 1, required, f.TYPE_STRING),
            _field("tensor", 2, optional, f.TYPE_MESSAGE, ".TensorProto", 0),
            _field("maptensor", 3, optional, f.TYPE_MESSAGE, ".MapTensorProto", 0),
        ],
        oneof_decl=[descriptor_pb2.OneofDescriptorProto(name="value")],
    )
    checkpoint = descriptor_pb2.DescriptorProto(
        name="Checkpoint",
        field=[_field("value", 1, repeated, f.TYPE_MESSAGE, ".Checkpoint.Value")],
        nested_type=[value],
    )
    tensor = descriptor_pb2.DescriptorProto(
        name="TensorProto",
        field=[
            _field("dims", 1, repeated, f.TYPE_INT64),
            _field("tensor_type", 2, required, f.TYPE_STRING),
            _field("tensor_content", 3, required, f.TYPE_BYTES),
        ],
    )
    map_tensor = descriptor_pb2.DescriptorProto(
        name="MapTensorProto",
        field=[_field("tensor", 1, repeated, f.TYPE_MESSAGE, ".TensorProto")],
    )
    return descriptor_pb2.FileDescriptorProto(
        name="k_transform/mindspore_checkpoint.proto",
        syntax="proto2",
        message_type=[checkpoint, tensor, map_tensor],
    )


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_schema())
Checkpoint = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("Checkpoint"))


# -- writing ----------------------------------------------------------------------------------
def _tensor_parts(name: str, value) -> tuple[list[int], str, bytes]:
    """(dims, tensor_type, content) of one entry, as MindSpore writes them."""
    if isinstance(value, str):
        return [0], STRING_TYPE, np.array(value).astype("<U").tobytes()
    array = np.asarray(value)
    ms_type = MS_TYPE_OF_NUMPY.get(array.dtype.name)
    if ms_type is None:
        raise KTransformError(
            f"save_checkpoint: {name!r} has dtype {array.dtype}, which MindSpore's .ckpt "
            f"format cannot hold (it holds {', '.join(MS_TYPE_OF_NUMPY)} and str)"
        )
    content = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    return list(array.shape), ms_type, content


def entry_bytes(name: str, value):
    """The serialised Checkpoints of one entry: one, or one per 512 MiB slice."""
    dims, ms_type, content = _tensor_parts(name, value)
    for start in range(0, max(len(content), 1), SLICE_BYTES):
        checkpoint = Checkpoint()
        item = checkpoint.value.add()
        item.tag = name
        item.tensor.dims.extend(dims)
        item.tensor.tensor_type = ms_type
        item.tensor.tensor_content = content[start : start + SLICE_BYTES]
        yield checkpoint.SerializeToString()


def write(file: BinaryIO, entries: dict, crc_check: bool = False) -> None:
    """Write name -> array (or str) `entries` to the open binary `file`."""
    crc = 0
    for name, value in entries.items():
        for chunk in entry_bytes(name, value):
            crc = binascii.crc32(chunk, crc)
            file.write(chunk)
    if crc_check:
        file.write(CRC_MARK + crc.to_bytes(CRC_BYTES, byteorder="big"))


# -- reading ----------------------------------------------------------------------------------
def _parse(content: bytes, source: str, crc_check: bool):
    """The Checkpoint message in `content`, its CRC trailer stripped (and checked)."""
    if content[-CRC_BYTES - len(CRC_MARK) : -CRC_BYTES] == CRC_MARK:
        stored = int.from_bytes(content[-CRC_BYTES:], byteorder="big")
        content = content[: -CRC_BYTES - len(CRC_MARK)]
        if crc_check and binascii.crc32(content) != stored:
            raise ValueError(
                "For 'load_checkpoint', the crc check is failed, please check whether the ckpt "
                f"file is damaged: {source}"
            )
    elif crc_check:  # MindSpore warns and loads
        warnings.warn(f"load_checkpoint: {source} has no crc code to check", stacklevel=5)
    checkpoint = Checkpoint()
    try:
        checkpoint.ParseFromString(content)
    except message.DecodeError as error:
        raise ValueError(
            f"Failed to read the checkpoint file {source}. The file may be corrupted, and "
            "the content cannot be parsed."
        ) from error
    return checkpoint


def _array(tag: str, dims: list[int], ms_type: str, content: bytes, source: str):
    """The numpy array (or str) of one entry's joined bytes."""
    if ms_type == STRING_TYPE:
        return str(np.frombuffer(content, f"<U{len(content) // 4}")[0]) if content else ""
    dtype = NUMPY_OF_MS_TYPE.get(ms_type)
    if dtype is None:
        raise ValueError(
            f"For 'load_checkpoint', {tag!r} in {source} has tensor_type {ms_type!r}, which "
            f"k_transform does not read (it reads {', '.join(NUMPY_OF_MS_TYPE)} and str)"
        )
    if dims == [0] and len(content) == dtype.itemsize:
        dims = []  # MindSpore reads dims [0] as a scalar
    expected = math.prod(dims) * dtype.itemsize
    if len(content) != expected:
        raise ValueError(
            f"For 'load_checkpoint', {tag!r} in {source} has {len(content)} bytes for shape "
            f"{tuple(dims)} of {ms_type} ({expected} expected): the file may be corrupted"
        )
    return np.frombuffer(content, dtype.newbyteorder("<")).astype(dtype).reshape(dims)


def read(content: bytes, source: str = "<bytes>", crc_check: bool = False) -> dict:
    """name -> numpy array (or str) of each entry of a .ckpt file's bytes, in order."""
    values = _parse(content, source, crc_check).value
    entries: dict = {}
    pieces: list[bytes] = []
    for k, item in enumerate(values):
        if item.WhichOneof("value") != "tensor":
            raise ValueError(
                f"For 'load_checkpoint', {item.tag!r} in {source} is a MapParameter "
                "(maptensor), which k_transform does not load"
            )
        pieces.append(item.tensor.tensor_content)
        if k + 1 < len(values) and values[k + 1].tag == item.tag:
            continue  # a slice of a large tensor: joined with the next ones
        tensor = item.tensor
        entries[item.tag] = _array(
            item.tag, list(tensor.dims), tensor.tensor_type, b"".join(pieces), source
        )
        pieces = []
    return entries
