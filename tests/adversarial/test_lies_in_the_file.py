"""Locations, offsets, lengths and raw_data sizes that lie (issue 11: "Lies in the file").

Every case: exit 2, one line on stderr, nothing written, the model's files unchanged.
W is 32x32 float32 (4096 bytes, at offset 0 of w.bin, read by a Transpose fold), b is 32 float32
(128 bytes at offset 4096, copied as it is); w.bin is 4224 bytes.
"""

import os
import stat

import pytest

from tests.support.cli import REFUSAL_TIMEOUT, assert_one_error_line, run_cli
from tests.support.external_weights import forge, mlp_proto, save_external, save_inline, weights
from tests.support.files import assert_unchanged, snapshot


def _fifo(model_dir):
    os.mkfifo(model_dir / "pipe.bin")
    # Held open read-write with 4 KiB in it, so a reader neither blocks on open nor on read:
    # a tool that accepts a FIFO fails the test instead of hanging it.
    fd = os.open(model_dir / "pipe.bin", os.O_RDWR | os.O_NONBLOCK)
    os.write(fd, b"\0" * 4096)
    return fd


def _device(model_dir):
    try:
        os.mknod(model_dir / "zero.bin", 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
    except OSError as e:
        pytest.skip(f"cannot create a device node here: {e}")


# (id, W's entries, setup in the model dir) -- each entry not given keeps its saved value
CASES = [
    ("empty-location", {"location": ""}, None),
    ("dot-location", {"location": "."}, None),
    ("missing-file", {"location": "nope.bin"}, None),
    ("directory", {"location": "sub"}, lambda d: (d / "sub").mkdir()),
    ("fifo", {"location": "pipe.bin"}, _fifo),
    ("device", {"location": "zero.bin"}, _device),
    ("second-hard-link", {}, lambda d: os.link(d / "w.bin", d / "w2.bin")),
    ("absolute-inside", {"location": "ABS"}, None),
    ("negative-offset", {"offset": -1}, None),
    ("non-integer-offset", {"offset": "4x"}, None),
    ("negative-length", {"length": -4096}, None),
    ("offset-beyond-end", {"offset": 8192}, None),
    ("offset-plus-length-past-end", {"offset": 4096}, None),
    ("length-smaller", {"length": 4000}, None),
    ("length-larger", {"length": 4224}, None),  # still inside the file: b's bytes follow
]


@pytest.mark.parametrize("entries,setup", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_forged_external_data_is_refused(tmp_path, entries, setup):
    model_dir = tmp_path / "model"
    model = save_external(mlp_proto(), model_dir)
    fd = setup(model_dir) if setup else None
    try:
        if entries.get("location") == "ABS":
            entries = {"location": str(model_dir / "w.bin")}
        forge(model, "W", **entries)
        before = snapshot(model_dir)
        done = run_cli("optimize", model, "-o", tmp_path / "o.onnx", timeout=REFUSAL_TIMEOUT)
    finally:
        if isinstance(fd, int):
            os.close(fd)
    assert_one_error_line(done)
    assert not (tmp_path / "o.onnx").exists()
    assert_unchanged(before, snapshot(model_dir))


def test_copied_weight_with_short_length_is_refused(tmp_path):
    """b is copied, not folded: a short length must not be zero-filled."""
    model_dir = tmp_path / "model"
    model = save_external(mlp_proto(), model_dir)
    forge(model, "b", length=64)
    before = snapshot(model_dir)
    done = run_cli("optimize", model, "-o", tmp_path / "o.onnx", timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done)
    assert not (tmp_path / "o.onnx").exists()
    assert_unchanged(before, snapshot(model_dir))


@pytest.mark.parametrize("layout", ["short-last", "short-then-neighbour", "too-long"])
def test_inline_raw_data_of_the_wrong_size_is_refused(tmp_path, layout):
    """raw_data shorter than dims must not borrow the next weight's bytes (or fail with a trace)."""
    w, b = weights()
    proto = mlp_proto(w, b)
    inits = {t.name: t for t in proto.graph.initializer}
    if layout == "too-long":
        inits["W"].raw_data = w.tobytes() + b.tobytes()
    else:
        inits["W"].raw_data = w.tobytes()[:1024]
        # short-last: W last, nothing after it in the graph's initializers; otherwise W then
        # b: the bytes right after W's are b's (and the rest of the file)
        order = [inits["b"], inits["W"]] if layout == "short-last" else [inits["W"], inits["b"]]
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(order)
    model_dir = tmp_path / "model"
    model = save_inline(proto, model_dir)
    before = snapshot(model_dir)
    for command in (["optimize", model, "-o", tmp_path / "o.onnx"], ["inspect", model]):
        done = run_cli(*command, timeout=REFUSAL_TIMEOUT)
        assert_one_error_line(done)
    assert not (tmp_path / "o.onnx").exists()
    assert_unchanged(before, snapshot(model_dir))


@pytest.mark.parametrize(("entries", "says"), [
    ({"length": -4096}, "negative external data offset or length"),
    ({"offset": -1}, "negative external data offset or length"),
    ({"offset": "4x"}, "external data offset '4x' is not an integer"),
    ({"length": "abc"}, "external data length 'abc' is not an integer"),
])
def test_an_offset_or_length_that_is_no_size_is_named(tmp_path, entries, says):
    """onnx refuses these as onnx-ir reads the model, and onnx-ir's report of that failed
    ("<lambda>() missing 1 required positional argument: 'base_path'"): the line names the
    tensor and what is wrong, from the command line and the Python API alike."""
    import onnxfold
    from onnxfold.errors import InputError

    model_dir = tmp_path / "model"
    model = save_external(mlp_proto(), model_dir)
    forge(model, "W", **entries)
    done = run_cli("optimize", model, "-o", tmp_path / "o.onnx", timeout=REFUSAL_TIMEOUT)
    assert_one_error_line(done, "initializer W: " + says)
    assert not (tmp_path / "o.onnx").exists()
    with pytest.raises(InputError, match="initializer W: " + says):
        onnxfold.optimize(model)
