#!/usr/bin/env python3
"""The textbook MLP step's five large GEMMs (bench/bench_gemm_libs.cpp's shapes) in a peer
framework: the GEMM rate the framework itself gets on this CPU, to set beside
tide_bench_gemm_libs' libraries. TensorFlow's tf.function step decides the 0.95
target, and its matmuls run on its own oneDNN build; this shows how much of its step they
take.

  fwd1 X W1       1024 x 2048 x 512     fwd2 A1 W2     1024 x 512 x 2048
  dW2  A1^T dZ2   2048 x 512 x 1024     dA1 dZ2 W2^T   1024 x 2048 x 512
  dW1  X^T dZ1     512 x 2048 x 1024    (M x N x K; 10.74 GFLOP together)

  tf     the five tf.linalg.matmul (transpose flags) in one tf.function
  torch  torch.mm on transposed views, torch.set_num_threads(os.cpu_count())
  jax    the five jnp.matmul in one jax.jit

One round = the five GEMMs, then the host reads every result's first element (the sync).
Prints one JSON line: framework, version, the median round in ms, GFLOP/s of that, and
each round's ms.

usage: gemm5.py --framework tf|torch|jax [--rounds 30] [--warmup 5]
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

SHAPES = [  # M, N, K, transpose A, transpose B (row-major, as tide calls cblas)
    (1024, 2048, 512, False, False), (1024, 512, 2048, False, False),
    (2048, 512, 1024, True, False), (1024, 2048, 512, False, True),
    (512, 2048, 1024, True, False)]
GFLOP = sum(2.0 * m * n * k for m, n, k, _, _ in SHAPES) / 1e9


def operands():
    rng = np.random.default_rng(42)
    out = []
    for m, n, k, ta, tb in SHAPES:
        a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
        out.append((a, b, ta, tb))
    return out


def runner(framework):
    ops = operands()
    if framework == "tf":
        import tensorflow as tf
        tops = [(tf.constant(a), tf.constant(b), ta, tb) for a, b, ta, tb in ops]

        @tf.function
        def five():
            return [tf.linalg.matmul(a, b, transpose_a=ta, transpose_b=tb) for a, b, ta, tb in tops]
        return tf.__version__, lambda: [float(r[0, 0]) for r in five()]
    if framework == "torch":
        import torch
        torch.set_num_threads(os.cpu_count())
        tops = [(torch.from_numpy(a), torch.from_numpy(b), ta, tb) for a, b, ta, tb in ops]

        def five():
            return [torch.mm(a.t() if ta else a, b.t() if tb else b) for a, b, ta, tb in tops]
        return torch.__version__, lambda: [float(r[0, 0]) for r in five()]
    if framework == "jax":
        import jax
        import jax.numpy as jnp
        jops = [(jnp.asarray(a), jnp.asarray(b)) for a, b, _, _ in ops]
        flags = [(ta, tb) for _, _, ta, tb in ops]

        @jax.jit
        def five(pairs):
            return [jnp.matmul(a.T if ta else a, b.T if tb else b)
                    for (a, b), (ta, tb) in zip(pairs, flags)]
        return jax.__version__, lambda: [float(r[0, 0]) for r in five(jops)]
    raise SystemExit(f"unknown framework {framework!r}: tf, torch or jax")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--framework", required=True)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    version, run = runner(args.framework)
    for _ in range(args.warmup):
        run()
    ms = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        run()
        ms.append((time.perf_counter() - t) * 1e3)
    med = statistics.median(ms)
    print(json.dumps({"framework": args.framework, "version": version, "ms_median": round(med, 3),
                      "gflops": round(GFLOP / med * 1e3, 1), "ms_all": [round(x, 3) for x in ms]}))


if __name__ == "__main__":
    main()
