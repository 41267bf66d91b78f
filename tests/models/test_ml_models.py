"""Classical-ML models (ai.onnx.ml: tree ensembles, linear models, scalers, encoders) exported
from scikit-learn by skl2onnx, vs onnxruntime. tests/models/build_ml.py writes them (export_all.sh
runs it). Labels must be equal, scores and regressions within relative L2 1e-4; each model runs on
64 rows drawn like its training data and on a single row, as imported and through the passes.
"""
import numpy as np
import pytest

from build_ml import NAMES, inputs
from test_models import assert_match, model_path, run_ort, run_sampan


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("rows", [64, 1])
@pytest.mark.parametrize("optimize", [False, True], ids=["plain", "optimized"])
def test_ml_model_matches_onnxruntime(name, rows, optimize, tmp_path):
    model = model_path(name)
    feed = inputs(name, np.random.default_rng(1000 + rows), rows)
    ours = run_sampan(model, feed, tmp_path, ["--optimize"] if optimize else [])
    ref = run_ort(model, feed)
    for k in ref:
        if ref[k].dtype == np.int64:
            np.testing.assert_array_equal(ours[k], ref[k], err_msg=f"{name}/{k}")
    assert_match(name, ours, ref)
