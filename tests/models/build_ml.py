#!/usr/bin/env python3
"""Classical-ML models (ai.onnx.ml) as users export them: scikit-learn estimators trained on
synthetic data with a fixed seed, converted by skl2onnx (opset 17, ai.onnx.ml 3, zipmap off so
the classifiers output tensors). Each is checked under onnxruntime against scikit-learn itself.

  ml_rf_classifier     RandomForestClassifier, 3 classes, 8 features (TreeEnsembleClassifier)
  ml_gb_binary         GradientBoostingClassifier, 2 classes (a binary TreeEnsembleClassifier
                       voting for one class, with a LOGISTIC post transform)
  ml_rf_regressor      RandomForestRegressor, 2 targets (TreeEnsembleRegressor, AVERAGE)
  ml_gb_regressor      GradientBoostingRegressor (TreeEnsembleRegressor, SUM with a base value)
  ml_logreg_scaled     StandardScaler + multinomial LogisticRegression, 4 classes (Scaler,
                       LinearClassifier with SOFTMAX)
  ml_logreg_binary     Binarizer + LogisticRegression on 2 classes (Binarizer, a one-row
                       LinearClassifier with LOGISTIC)
  ml_normalized_linear Normalizer (l2) + LinearRegression, 3 targets (Normalizer,
                       LinearRegressor)
  ml_onehot_linear     OneHotEncoder of integer categories + Ridge (OneHotEncoder)

Usage: .venv/bin/python tests/models/build_ml.py [--out build/models] [--force]
"""
import argparse
import warnings
from pathlib import Path

import numpy as np

FEATURES = 8


def data(rng, n=400, features=FEATURES):
    x = rng.normal(size=(n, features)).astype(np.float32)
    return x


def build(name):
    from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor, RandomForestClassifier,
                                  RandomForestRegressor)
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Binarizer, Normalizer, OneHotEncoder, StandardScaler

    rng = np.random.default_rng(7)
    x = data(rng)
    w = rng.normal(size=(FEATURES, 4))
    logits = x @ w
    if name == "ml_rf_classifier":
        y = np.argmax(logits[:, :3], axis=1)
        return RandomForestClassifier(n_estimators=12, max_depth=6, random_state=0).fit(x, y), x
    if name == "ml_gb_binary":
        y = (logits[:, 0] > 0).astype(np.int64)
        return GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0).fit(x, y), x
    if name == "ml_rf_regressor":
        return RandomForestRegressor(n_estimators=10, max_depth=6, random_state=0).fit(x, logits[:, :2]), x
    if name == "ml_gb_regressor":
        return GradientBoostingRegressor(n_estimators=25, max_depth=3, random_state=0).fit(x, logits[:, 1]), x
    if name == "ml_logreg_scaled":
        y = np.argmax(logits, axis=1)
        x2 = x * np.arange(1, FEATURES + 1, dtype=np.float32) + 3
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x2, y), x2
    if name == "ml_logreg_binary":
        y = (logits[:, 2] > 0).astype(np.int64)
        return make_pipeline(Binarizer(threshold=0.1), LogisticRegression(max_iter=500)).fit(x, y), x
    if name == "ml_normalized_linear":
        return make_pipeline(Normalizer(norm="l2"), LinearRegression()).fit(x, logits[:, :3]), x
    if name == "ml_onehot_linear":
        cats = rng.integers(0, 5, size=(x.shape[0], 3)).astype(np.int64)
        y = cats @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=x.shape[0])
        return make_pipeline(OneHotEncoder(handle_unknown="ignore"), Ridge()).fit(cats, y), cats
    raise KeyError(name)


NAMES = ["ml_rf_classifier", "ml_gb_binary", "ml_rf_regressor", "ml_gb_regressor", "ml_logreg_scaled",
         "ml_logreg_binary", "ml_normalized_linear", "ml_onehot_linear"]


def inputs(name, rng, n=64):
    """Inputs for `name` (the same distribution as its training data)."""
    if name == "ml_onehot_linear":
        return {"X": rng.integers(0, 6, size=(n, 3)).astype(np.int64)}  # 5 is a category unseen in training
    x = data(rng, n)
    if name == "ml_logreg_scaled":
        x = x * np.arange(1, FEATURES + 1, dtype=np.float32) + 3
    return {"X": x}


def export(name, out: Path):
    import onnxruntime as ort
    from skl2onnx import to_onnx

    model, x = build(name)
    onx = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3},
                  options={"zipmap": False} if hasattr(model, "predict_proba") else None)
    if name == "ml_rf_regressor":
        # skl2onnx 1.19.1 declares a multi-target regressor's output [N, 1]; Sampan refuses a
        # declared shape the op contradicts (as onnx's strict shape inference does; onnxruntime
        # only warns), so the declaration is corrected to the [N, 2] the model produces.
        onx.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 2
    path = out / f"{name}.onnx"
    path.write_bytes(onx.SerializeToString())
    # onnxruntime agrees with scikit-learn on the training data.
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})
    want = model.predict(x)
    if hasattr(model, "predict_proba"):
        assert (got[0] == want).mean() > 0.99, f"{name}: onnxruntime labels differ from scikit-learn"
    else:
        np.testing.assert_allclose(got[0].reshape(want.shape), want, rtol=1e-3, atol=1e-3, err_msg=name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="build/models")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in NAMES:
            if (out / f"{name}.onnx").exists() and not args.force:
                continue
            export(name, out)
            made.append(name)
    print(f"build_ml: wrote {len(made)} models ({', '.join(made) or 'all up to date'})")


if __name__ == "__main__":
    main()
