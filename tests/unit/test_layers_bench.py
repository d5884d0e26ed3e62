"""``python -m bench run layers``: its smallest form run for real (Llamas of 2 and 4 layers, one
round), every output checked in onnxruntime, and the per-layer arithmetic of its tables
recomputed from the medians it measured. No assertion on time: only on how the numbers are
derived from each other."""

from __future__ import annotations

import json
import sys

import pytest

from bench import layers
from tests.support import breadth


def _model(n: int, cpu: dict[str, float], rss: dict[str, float], passes: float,
           failed: tuple[str, ...] = ()) -> dict:
    tools = {t: {"status": "crashed: no" if t in failed else "ok", "wall_s": cpu[t] * 1.1,
                 "cpu_s": cpu[t], "peak_rss_mib": rss[t], "nodes": None} for t in layers.TOOLS}
    return {"layers": n, "mib": 1.0, "nodes": 10 * n, "tools": tools, "passes_s": passes}


def test_per_layer_is_the_slope_from_the_shallowest_to_the_deepest():
    cpu32 = {"ir": 1.0, "onnxfold-lib": 2.0, "onnxfold": 3.0, "ort": 1.5, "onnxsim": 3.0,
             "onnxsim-cli": 4.0}
    cpu128 = {"ir": 1.96, "onnxfold-lib": 6.8, "onnxfold": 10.68, "ort": 3.42, "onnxsim": 8.76,
              "onnxsim-cli": 13.6}
    rss = {"ir": 100.0, "onnxfold-lib": 110.0, "onnxfold": 120.0, "ort": 90.0,
           "onnxsim": 200.0, "onnxsim-cli": 210.0}
    rss128 = {t: v + 96 * 2.0 for t, v in rss.items()}
    models = {"64": _model(64, dict.fromkeys(cpu32, 99.0), rss, 9.0),  # not in a slope
              "128": _model(128, cpu128, rss128, 4.84), "32": _model(32, cpu32, rss, 1.0)}
    got = layers.per_layer(models)
    assert got["onnxfold-lib"]["cpu_s"] == pytest.approx(0.05)
    assert got["onnxfold"]["cpu_s"] == pytest.approx(0.08)
    assert got["ort"]["cpu_s"] == pytest.approx(0.02)
    assert got["onnxsim"]["cpu_s"] == pytest.approx(0.06)
    assert got["ir"]["wall_s"] == pytest.approx(0.011)
    assert got["onnxfold"]["peak_rss_mib"] == pytest.approx(2.0)
    cpu_over = {pair: ratios["cpu_s"] for pair, ratios in got["over"].items()}
    assert cpu_over == {"onnxfold-lib/onnxsim": pytest.approx(5 / 6),
                        "onnxfold-lib/ort": pytest.approx(2.5),
                        "onnxfold/onnxsim-cli": pytest.approx(0.8)}  # like against like
    assert got["passes_s"] == pytest.approx(0.04)
    assert got["passes_over_ir"] == pytest.approx(0.04 / 0.011)
    assert got["passes_share"] == pytest.approx(0.04 / 0.055)  # of the library call's wall
    text = layers.table({"repeat": 3, "models": models, "per_layer": got})
    assert "Per layer (32 -> 128 layers)" in text
    assert ("| onnxfold (library) / onnxsim (library) | onnxfold (library) / onnxruntime basic "
            "| onnxfold (CLI) / onnxsim (CLI) |") in text
    assert "| CPU ms | 10.0 | 50.0 | 80.0 | 20.0 | 60.0 | 100.0 | **0.83x** | **2.50x** | " \
        "**0.80x** |" in text
    assert "| peak RSS MiB | 2.00 | 2.00 | 2.00 | 2.00 | 2.00 | 2.00 | 1.00x | 1.00x | 1.00x |" \
        in text
    assert "onnxfold's passes: 40.0 ms a layer, **3.64x**" in text


def test_a_tool_that_failed_at_either_end_has_no_slope_and_no_ratio():
    cpu = {"ir": 1.0, "onnxfold-lib": 2.0, "onnxfold": 2.0, "ort": 1.5, "onnxsim": 3.0,
           "onnxsim-cli": 3.0}
    rss = dict.fromkeys(cpu, 100.0)
    models = {"2": _model(2, cpu, rss, 1.0),
              "4": _model(4, cpu, rss, 1.0, failed=("onnxsim", "onnxsim-cli"))}
    got = layers.per_layer(models)
    assert got["onnxsim"] == {"cpu_s": None, "wall_s": None, "peak_rss_mib": None}
    assert got["over"]["onnxfold-lib/onnxsim"]["cpu_s"] is None
    models["4"]["tools"]["ort"]["cpu_s"] = 1.0  # shrank with the depth: noise, not a ratio
    assert layers.per_layer(models)["over"]["onnxfold-lib/ort"]["cpu_s"] is None
    text = layers.table({"repeat": 1, "models": models, "per_layer": got})
    assert "| CPU ms | 0.0 | 0.0 | 0.0 | 0.0 | - | - | - | - | - |" in text  # 0 CPU: no ratio
    assert "crashed: no" in text


@breadth.MARK  # 62 s of CI: the breadth tier runs it (and `python -m bench run layers` itself)
def test_the_smallest_run_measures_checks_and_derives_its_tables(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "layers.json"
    code = layers.main(["--layers", "2", "4", "--repeat", "1", "--no-readme",
                        "--work", str(tmp_path / "work"), "--json", str(out),
                        "--peers-python", sys.executable])
    assert code == 0
    result = json.loads(out.read_text())
    models = result["models"]
    assert sorted(models) == ["2", "4"]
    for model in models.values():
        assert model["nodes"] > 0
        for tool in ("ir", "onnxfold-lib", "onnxfold", "ort"):
            assert model["tools"][tool]["status"] == "ok", model["tools"][tool]
        # onnxfold's and onnxruntime's outputs ran in onnxruntime and matched the original
        assert 0 < model["tools"]["onnxfold"]["nodes"] < model["nodes"]
        assert model["tools"]["onnxfold-lib"]["nodes"] == model["tools"]["onnxfold"]["nodes"]
        assert 0 < model["tools"]["ort"]["nodes"] <= model["nodes"]
        assert 0 < model["passes_s"] < model["tools"]["onnxfold-lib"]["wall_s"]
    assert models["4"]["nodes"] > models["2"]["nodes"]
    two, four = models["2"]["tools"], models["4"]["tools"]
    slopes = result["per_layer"]
    for tool in ("ir", "onnxfold-lib", "onnxfold", "ort"):
        for key in ("cpu_s", "wall_s", "peak_rss_mib"):
            assert slopes[tool][key] == pytest.approx((four[tool][key] - two[tool][key]) / 2)
    assert slopes["passes_s"] == pytest.approx((models["4"]["passes_s"]
                                                - models["2"]["passes_s"]) / 2)
    if slopes["ort"]["cpu_s"] > 0 and slopes["onnxfold-lib"]["cpu_s"] > 0:
        assert slopes["over"]["onnxfold-lib/ort"]["cpu_s"] == \
            pytest.approx(slopes["onnxfold-lib"]["cpu_s"] / slopes["ort"]["cpu_s"])
    for pair, sim in (("onnxfold-lib/onnxsim", "onnxsim"), ("onnxfold/onnxsim-cli", "onnxsim-cli")):
        if four[sim]["status"] != "ok":  # no onnxsim in this interpreter: said, not a ratio
            assert slopes["over"][pair]["cpu_s"] is None
    text = layers.table(result)
    assert text == layers.table(json.loads(json.dumps(result)))
    assert f"| 4 layers ({models['4']['nodes']:,}, " in text
