"""S1 of the textbook experiments in a peer framework: 10 x (x = randn 1000x1000; y = x @ x),
all work done (the result read back), timed per repetition; prints one JSON line with the
median and the spread in ms. Every framework runs with its defaults.
Usage: python3 bench/peers/s1_step.py --framework torch|tf|jax [--reps 7]"""
import argparse
import json
import statistics
import time


def run_torch():
    import torch

    def once():
        y = None
        for _ in range(10):
            x = torch.randn(1000, 1000)
            y = x @ x
        return float(y[0, 0])
    return once, f"torch {torch.__version__}, threads {torch.get_num_threads()}"


def run_tf():
    import tensorflow as tf

    def once():
        y = None
        for _ in range(10):
            x = tf.random.normal((1000, 1000))
            y = tf.matmul(x, x)
        return float(y[0, 0])
    return once, f"tensorflow {tf.__version__} (eager)"


def run_jax():
    import jax
    import jax.numpy as jnp
    key = [jax.random.PRNGKey(0)]

    def once():
        y = None
        for _ in range(10):
            key[0], sub = jax.random.split(key[0])
            x = jax.random.normal(sub, (1000, 1000), dtype=jnp.float32)
            y = x @ x
        return float(y.block_until_ready()[0, 0])
    return once, f"jax {jax.__version__} (eager dispatch)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", required=True, choices=["torch", "tf", "jax"])
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    once, what = {"torch": run_torch, "tf": run_tf, "jax": run_jax}[a.framework]()
    once()  # warm-up: library loading, first-call compilation
    ms = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        once()
        ms.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"framework": a.framework, "what": what, "median_ms": statistics.median(ms),
                      "min_ms": min(ms), "max_ms": max(ms)}))


if __name__ == "__main__":
    main()
