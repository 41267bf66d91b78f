"""Control-flow models (If, Loop, Scan with subgraphs) vs onnxruntime, relative L2 < 1e-4.

The models are written by tests/models/build_control_flow.py (tests/models/export_all.sh runs
it): NMS as a Loop over decoded boxes, greedy decoding with a GRU in a Loop, and cumulative
sums with Scan. Each runs on several inputs (different trip counts, an early stop at EOS), as
imported and through the optimisation passes (which must see into the subgraphs and keep them
intact).
"""
import numpy as np
import pytest

from build_control_flow import cumsum_inputs, gru_inputs, nms_inputs
from test_models import assert_match, model_path, run_ort, run_sampan

CASES = {
    "cf_nms_loop": [lambda rng: nms_inputs(rng, 64), lambda rng: nms_inputs(rng, 5),
                    lambda rng: {**nms_inputs(rng, 16), "scores": np.full(16, 0.1, np.float32)}],  # no box passes
    "cf_gru_decode": [lambda rng: gru_inputs(rng, 12), lambda rng: gru_inputs(rng, 1), lambda rng: gru_inputs(rng, 0)],
    "cf_scan_cumsum": [lambda rng: cumsum_inputs(rng), lambda rng: cumsum_inputs(rng, 1, 2, 3),
                       lambda rng: cumsum_inputs(rng, 16, 1, 4)],
}


@pytest.mark.parametrize("name,case", [(n, i) for n, fs in CASES.items() for i in range(len(fs))])
@pytest.mark.parametrize("optimize", [False, True], ids=["plain", "optimized"])
def test_control_flow_model_matches_onnxruntime(name, case, optimize, tmp_path):
    model = model_path(name)
    inputs = CASES[name][case](np.random.default_rng(20260 + case))
    ours = run_sampan(model, inputs, tmp_path, ["--optimize"] if optimize else [])
    assert_match(f"{name}[{case}]", ours, run_ort(model, inputs))
