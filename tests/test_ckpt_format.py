"""MindSpore's `.ckpt` (protobuf) checkpoints, read and written (issue 30).

The files in tests/data/ckpt/ were written by the real MindSpore 2.10 (CPU,
PYNATIVE mode), by this script (abridged):

    class Net(nn.Cell):                 # the same network as `Net` below
        fc = nn.Dense(4, 3); bn = nn.BatchNorm1d(3)
        scale16 = Parameter(Tensor([1.5, -0.5, 2.0], float16), name="scale16")
        count = Parameter(Tensor([2, 3, 1], int32), name="count", requires_grad=False)
        construct(x): bn(fc(x)) * scale16.astype(float32) + count.astype(float32)
    rng = np.random.default_rng(30)
    fc.weight = rng.normal(size=(3, 4)).astype(float32); fc.bias = rng.normal(size=3)...
    bn.moving_mean = [0.25, -0.5, 1.0]; bn.moving_variance = [0.5, 2.0, 1.5]
    bn.gamma = [1.25, 0.75, -1.0]; bn.beta = [0.1, -0.2, 0.3]
    net.set_train(False); print(net(X))                       # MS_LOGITS below
    ms.save_checkpoint(net, "ms_net")        # no suffix given: MindSpore wrote ms_net.ckpt
    ms.save_checkpoint(net, "ms_net", format="safetensors", crc_check=True)
    ms.save_checkpoint([{"name": "f64", "data": Tensor(float64 [[1, -2.5e-300], [3.25, 1e300]])},
                        "i64": int64 [-2**40, 7], "u8": uint8 [0, 255, 7], "i8": int8 [-128, 127],
                        "flags": bool [T, F, T], "bf16": Tensor([1, -2.5, 3e38], bfloat16),
                        "h": float16 [[0.5, 65504]], "scalar": Tensor(float32(4.5))],
                       "ms_dtypes.ckpt", append_dict={"epoch_num": 3, "note": "hi"},
                       crc_check=True)
    ms.load_checkpoint("ms_dtypes.ckpt", crc_check=True)       # DTYPES_FILE below

The other way was checked by hand with the same MindSpore: a `.ckpt` written
here from this `Net` loaded with `load_param_into_net` -> ([], []) and gave
our logits; one with bool, bfloat16, float16, int32, scalars, an int, a float
and a non-ASCII str, with `crc_check=True`, loaded with `crc_check=True` with
the same dtypes, shapes and values; so did our safetensors with a CRC. Here,
our bytes for the same entries are MindSpore's bytes.
"""

from __future__ import annotations

import pathlib

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import k_transform as kt
from k_transform import nn
from k_transform.errors import KTransformError
from k_transform.train import ckpt_format

DATA = pathlib.Path(__file__).parent / "data" / "ckpt"
X = np.array([[0.5, -1.0, 2.0, 0.25], [-1.5, 0.75, 0.0, 1.0]], np.float32)
# MindSpore 2.10 printed these for net(X) before saving ms_net.ckpt
MS_LOGITS = np.array(
    [[-2.3778753, 4.011833, 3.5863142], [-2.5575542, 1.9896924, 0.57832134]], np.float32
)
MS_NAMES = ["scale16", "count", "fc.weight", "fc.bias"]
MS_NAMES += ["bn.moving_mean", "bn.moving_variance", "bn.gamma", "bn.beta"]
# MindSpore 2.10's load_checkpoint("ms_dtypes.ckpt", crc_check=True): name -> (dtype, value)
DTYPES_FILE = {
    "f64": ("float64", [[1.0, -2.5e-300], [3.25, 1e300]]),
    "i64": ("int64", [-1099511627776, 7]),
    "u8": ("uint8", [0, 255, 7]),
    "i8": ("int8", [-128, 127]),
    "flags": ("bool", [True, False, True]),
    "bf16": ("bfloat16", [1.0, -2.5, 3.0040553e38]),
    "h": ("float16", [[0.5, 65504.0]]),
    "scalar": ("float32", 4.5),
    "epoch_num": ("int64", 3),
}


class Net(kt.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)
        self.bn = nn.BatchNorm1d(3)
        self.scale16 = kt.Parameter(np.ones(3, np.float16), "scale16")
        self.count = kt.Parameter(np.zeros(3, np.int32), "count", requires_grad=False)

    def construct(self, x):
        y = self.bn(self.fc(x))
        return y * self.scale16.astype(jnp.float32) + self.count.astype(jnp.float32)


def logits(net):
    net.set_train(False)
    return np.asarray(net(X))


# -- files MindSpore wrote --------------------------------------------------------------------
def test_a_mindspore_ckpt_loads_into_the_same_network():
    net = Net()
    params = kt.load_checkpoint(str(DATA / "ms_net.ckpt"), net=net)
    assert list(params) == MS_NAMES and params["fc.bias"].name == "fc.bias"
    assert kt.load_param_into_net(Net(), params) == ([], [])
    assert net.scale16.data.dtype == jnp.float16 and net.count.data.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(net.count.data), [2, 3, 1])
    np.testing.assert_allclose(logits(net), MS_LOGITS, rtol=1e-5, atol=1e-6)


def test_our_bytes_are_mindspores(tmp_path):
    """Saving what was loaded writes the file MindSpore wrote, byte for byte."""
    for name in ("ms_net.ckpt", "ms_dtypes.ckpt"):
        content = (DATA / name).read_bytes()
        with_crc = name == "ms_dtypes.ckpt"  # MindSpore wrote it with crc_check=True
        entries = ckpt_format.read(content, name, crc_check=with_crc)
        with open(tmp_path / name, "wb") as file:
            ckpt_format.write(file, entries, crc_check=with_crc)
        assert (tmp_path / name).read_bytes() == content, name
    kt.save_checkpoint(kt.load_checkpoint(str(DATA / "ms_net.ckpt")), str(tmp_path / "again"))
    assert (tmp_path / "again.ckpt").read_bytes() == (DATA / "ms_net.ckpt").read_bytes()


def test_mindspores_dtypes_read_exactly():
    entries = ckpt_format.read((DATA / "ms_dtypes.ckpt").read_bytes(), crc_check=True)
    assert list(entries) == [*DTYPES_FILE, "note"] and entries["note"] == "hi"
    for name, (dtype, value) in DTYPES_FILE.items():
        assert entries[name].dtype.name == dtype, name
        expected = np.asarray(value, np.float32 if dtype == "bfloat16" else dtype)
        assert entries[name].shape == expected.shape, name
        np.testing.assert_array_equal(entries[name].astype(expected.dtype), expected, err_msg=name)


def test_64_bit_values_jax_cannot_hold_raise_naming_them():
    path = str(DATA / "ms_dtypes.ckpt")
    for name in ("i64", "f64"):  # -2**40 wraps in int32, 1e300 overflows float32
        with pytest.raises(KTransformError, match=f"'{name}'.*jax_enable_x64"):
            kt.load_checkpoint(path, choice_func=lambda n, name=name: n == name)
    params = kt.load_checkpoint(path, filter_prefix=["i64", "f64"])
    assert params["epoch_num"].data.dtype == jnp.int32 and int(params["epoch_num"].data) == 3
    assert params["bf16"].data.dtype == jnp.bfloat16 and params["flags"].data.dtype == jnp.bool_
    assert params["note"] == "hi"  # a "str" entry is a str, as in MindSpore


def test_a_mindspore_safetensors_file_loads_with_its_crc():
    net = Net()
    kt.load_checkpoint(str(DATA / "ms_net.safetensors"), net=net, crc_check=True)
    np.testing.assert_allclose(logits(net), MS_LOGITS, rtol=1e-5, atol=1e-6)


# -- files written here -----------------------------------------------------------------------
def test_our_ckpt_round_trip_keeps_names_dtypes_values(tmp_path):
    items = [
        kt.Parameter(np.array([[1.5, -2.0]], np.float32), "w"),
        {"name": "h", "data": np.array([0.5, 65504.0], np.float16)},
        {"name": "n", "data": jnp.array([-7, 2**31 - 1], jnp.int32)},
        {"name": "flags", "data": np.array([True, False])},
        {"name": "b", "data": jnp.array([1.5, -3.0], jnp.bfloat16)},
        {"name": "s", "data": np.float32(2.5)},
    ]
    path = tmp_path / "mine"
    kt.save_checkpoint(items, str(path), append_dict={"epoch": 4, "lr": 0.5, "note": "héllo"})
    content = (tmp_path / "mine.ckpt").read_bytes()  # MindSpore's suffix rule
    parsed = ckpt_format.Checkpoint.FromString(content)  # the protobuf schema itself
    table = [(v.tag, list(v.tensor.dims), v.tensor.tensor_type) for v in parsed.value]
    assert table == [
        ("w", [1, 2], "Float32"),
        ("h", [2], "Float16"),
        ("n", [2], "Int32"),
        ("flags", [2], "Bool"),
        ("b", [2], "BFloat16"),
        ("s", [], "Float32"),
        ("epoch", [], "Int64"),  # MindSpore's Tensor(4) and Tensor(0.5)
        ("lr", [], "Float32"),
        ("note", [0], "str"),
    ]
    loaded = kt.load_checkpoint(str(tmp_path / "mine.ckpt"))
    for item in items:
        name, data = (item.name, item.data) if isinstance(item, kt.Parameter) else item.values()
        assert loaded[name].data.dtype == np.asarray(data).dtype, name
        np.testing.assert_array_equal(np.asarray(loaded[name].data), np.asarray(data))
    assert loaded["note"] == "héllo" and int(loaded["epoch"].data) == 4
    assert float(loaded["lr"].data) == 0.5


def test_a_network_round_trips_through_ckpt(tmp_path):
    source = Net()
    kt.load_checkpoint(str(DATA / "ms_net.ckpt"), net=source)
    source.fc.bias.set_data(np.array([10.0, 20.0, 30.0], np.float32))
    kt.save_checkpoint(source, str(tmp_path / "net.ckpt"), crc_check=True)
    fresh = Net()
    kt.load_checkpoint(str(tmp_path / "net.ckpt"), net=fresh, crc_check=True)
    np.testing.assert_array_equal(logits(fresh), logits(source))


def test_a_large_tensor_is_written_in_slices_and_joined(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt_format, "SLICE_BYTES", 12)  # MindSpore's is 512 MiB
    value = np.arange(10, dtype=np.float32).reshape(2, 5)
    kt.save_checkpoint({"big": value, "after": np.ones(1, np.float32)}, str(tmp_path / "s.ckpt"))
    parsed = ckpt_format.Checkpoint.FromString((tmp_path / "s.ckpt").read_bytes())
    assert [v.tag for v in parsed.value] == ["big"] * 4 + ["after"]
    assert all(list(v.tensor.dims) == [2, 5] for v in parsed.value[:4])
    loaded = kt.load_checkpoint(str(tmp_path / "s.ckpt"))
    np.testing.assert_array_equal(np.asarray(loaded["big"].data), value)


def test_safetensors_is_still_written_and_read(tmp_path):
    net = Net()
    kt.load_checkpoint(str(DATA / "ms_net.ckpt"), net=net)
    kt.save_checkpoint(net, str(tmp_path / "net"), format="safetensors", crc_check=True)
    assert sorted(load_file(str(tmp_path / "net.safetensors"))) == sorted(MS_NAMES)
    for format in ("safetensors", "ckpt"):  # the content decides, whatever `format` says
        fresh = Net()
        kt.load_checkpoint(str(tmp_path / "net.safetensors"), fresh, crc_check=True, format=format)
        np.testing.assert_array_equal(logits(fresh), logits(net))
    mixed = {"b": jnp.array([1.5, -3.0], jnp.bfloat16), "i": np.arange(3, dtype=np.int8)}
    kt.save_checkpoint(mixed, str(tmp_path / "mixed.safetensors"), format="safetensors")
    loaded = kt.load_checkpoint(str(tmp_path / "mixed.safetensors"))
    for name, value in mixed.items():
        assert loaded[name].data.dtype == value.dtype
        np.testing.assert_array_equal(np.asarray(loaded[name].data), np.asarray(value))
    with pytest.raises(KTransformError, match="'note' is a str"):
        kt.save_checkpoint(
            net, str(tmp_path / "n"), append_dict={"note": "x"}, format="safetensors"
        )


# -- bad files and arguments ------------------------------------------------------------------
def test_corrupt_and_truncated_files_raise_naming_the_file(tmp_path):
    content = (DATA / "ms_net.ckpt").read_bytes()
    for cut, data in [("cut", content[:100]), ("tail", content[:-2]), ("junk", b"\xff" * 40)]:
        path = tmp_path / f"{cut}.ckpt"
        path.write_bytes(data)
        with pytest.raises(ValueError, match=f"Failed to read the checkpoint file .*{cut}.ckpt"):
            kt.load_checkpoint(str(path))
    damaged = bytearray((DATA / "ms_dtypes.ckpt").read_bytes())
    damaged[40] ^= 1  # inside f64's bytes: it still parses, the CRC fails
    (tmp_path / "crc.ckpt").write_bytes(bytes(damaged))
    assert kt.load_checkpoint(str(tmp_path / "crc.ckpt"), choice_func=lambda n: n == "h")
    with pytest.raises(ValueError, match="crc check is failed.*crc.ckpt"):
        kt.load_checkpoint(str(tmp_path / "crc.ckpt"), crc_check=True)
    kt.save_checkpoint({"a": np.ones(3, np.float32)}, str(tmp_path / "st"), format="safetensors")
    (tmp_path / "st.ckpt").write_bytes((tmp_path / "st.safetensors").read_bytes()[:-4])
    with pytest.raises(ValueError, match="st.ckpt"):
        kt.load_checkpoint(str(tmp_path / "st.ckpt"))
    with pytest.raises(ValueError, match="does not exist"):
        kt.load_checkpoint(str(tmp_path / "missing.ckpt"))


def _one_entry(dims, tensor_type, content) -> bytes:
    checkpoint = ckpt_format.Checkpoint()
    item = checkpoint.value.add(tag="w")
    item.tensor.dims.extend(dims)
    item.tensor.tensor_type = tensor_type
    item.tensor.tensor_content = content
    return checkpoint.SerializeToString()


def test_entries_that_do_not_fit_raise(tmp_path):
    cases = [
        ([2, 3], "Float32", bytes(20), "20 bytes for shape \\(2, 3\\) of Float32"),
        ([2], "Complex64", bytes(16), "tensor_type 'Complex64'"),
    ]
    for dims, tensor_type, content, says in cases:
        (tmp_path / "e.ckpt").write_bytes(_one_entry(dims, tensor_type, content))
        with pytest.raises(ValueError, match=says):
            kt.load_checkpoint(str(tmp_path / "e.ckpt"))
    kt.save_checkpoint({"w": np.zeros(2, np.float32)}, str(tmp_path / "w.ckpt"))
    with pytest.raises(ValueError, match="empty after filter"):
        kt.load_checkpoint(str(tmp_path / "w.ckpt"), specify_prefix="fc.")
    with pytest.raises(KTransformError, match="'z' has dtype complex64"):
        kt.save_checkpoint({"w": np.ones(2), "z": np.zeros(2, np.complex64)}, str(tmp_path / "z"))
    assert not list(tmp_path.glob("z*"))  # no file left half written
    with pytest.raises(KTransformError, match="enc_key"):
        kt.save_checkpoint({"w": np.zeros(2)}, str(tmp_path / "k.ckpt"), enc_key=b"0" * 16)
    with pytest.raises(ValueError, match="format must be 'safetensors' or 'ckpt'"):
        kt.save_checkpoint({"w": np.zeros(2)}, str(tmp_path / "w.onnx"), format="onnx")
