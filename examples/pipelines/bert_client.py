#!/usr/bin/env python3
"""Embeds sentences through the served `embed` pipeline (tokenizer + all-MiniLM-L6-v2, mean pooled,
L2-normalised) and prints their cosine similarities.

  sampan serve --model-repository examples/pipelines/bert &
  python examples/pipelines/bert_client.py "A man is eating food." "A man is eating bread." "Stocks fell."
"""
import argparse

import numpy as np
import tritonclient.http as httpclient


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("texts", nargs="+")
    ap.add_argument("--url", default="127.0.0.1:8000")
    args = ap.parse_args()
    c = httpclient.InferenceServerClient(args.url)
    # One text a row (TEXT [N, 1], at most 64 a request: the ensemble batches).
    inp = httpclient.InferInput("TEXT", [len(args.texts), 1], "BYTES")
    inp.set_data_from_numpy(np.array([[t.encode()] for t in args.texts], dtype=object))
    emb = c.infer("embed", [inp]).as_numpy("EMBEDDING")
    sim = emb @ emb.T  # the embeddings are unit vectors
    for i, t in enumerate(args.texts):
        print(" ".join(f"{v:6.3f}" for v in sim[i]), " ", t)


if __name__ == "__main__":
    main()
