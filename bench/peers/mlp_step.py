#!/usr/bin/env python3
"""The textbook MLP training step of bench/bench_mlp.cpp (BM_TextbookMlpStep) in a peer
framework, on the CPU, with the framework's defaults as a new user gets them.

  Linear(512, 2048) + ReLU, Linear(2048, 512) + ReLU, Linear(512, 1)
  loss = mean(0.5 * (pred - y)^2)  (tide's nn::l2_loss, Gluon's L2Loss), y = 1
  plain SGD, lr 0.005, no momentum, no weight decay
  X ~ N(0, 1) of 1024 x 512, one fixed minibatch, seed 42
  weights Xavier-uniform (tide's Linear default), stored (in, out); biases zero

Every framework starts from the same numpy-made X and weights, so their losses agree with
each other; tide draws its own (Philox) numbers, so its losses are the same only in
distribution (the first step's loss is ~1.2 in both).

One step = forward, loss, backward, update, then the host reads the loss as a Python float
(the sync: the step has run when the timer stops). --warmup steps run first, untimed.

  tf     a tf.function step (GradientTape, Variable.assign_sub), oneDNN as TF sets it
  torch  eager nn.Sequential + torch.optim.SGD, torch.set_num_threads(os.cpu_count())
  jax    a jax.jit step (jax.value_and_grad, tree_map update), no buffer donation

Prints one JSON line: framework, version, ms_per_step_median/mean/min, ms_per_step_all,
cpu_ms_per_step (process CPU time, all threads), threads, the settings seen, and the
losses of every step (warm-up included; losses[0] is the first step's).
"""
import argparse
import json
import os
import platform
import re
import statistics
import sys
import time

import numpy as np

BATCH, IN, H1, H2, OUT = 1024, 512, 2048, 512, 1
LR = 0.005
SEED = 42
SIZES = [(IN, H1), (H1, H2), (H2, OUT)]


def make_data():
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((BATCH, IN), dtype=np.float32)
    y = np.ones((BATCH, OUT), dtype=np.float32)
    params = []
    for fin, fout in SIZES:
        bound = np.sqrt(6.0 / (fin + fout))
        w = rng.uniform(-bound, bound, size=(fin, fout)).astype(np.float32)
        params.append((w, np.zeros((fout,), dtype=np.float32)))
    return x, y, params


def env_seen(names):
    return {n: os.environ.get(n) for n in names if os.environ.get(n) is not None}


# ---- TensorFlow ----------------------------------------------------------------------------

def setup_tf(x_np, y_np, params_np):
    import tensorflow as tf

    x = tf.constant(x_np)
    y = tf.constant(y_np)
    vars_ = []
    for w, b in params_np:
        vars_ += [tf.Variable(w), tf.Variable(b)]

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            h = x
            for i in range(3):
                h = tf.matmul(h, vars_[2 * i]) + vars_[2 * i + 1]
                if i < 2:
                    h = tf.nn.relu(h)
            d = h - y
            loss = tf.reduce_mean(0.5 * d * d)
        grads = tape.gradient(loss, vars_)
        for v, g in zip(vars_, grads):
            v.assign_sub(LR * g)
        return loss

    def run():
        return float(step(x, y))  # .numpy() under float(): the host reads the loss

    onednn = None
    try:
        from tensorflow.python.util import _pywrap_util_port as port
        onednn = bool(port.IsMklEnabled())
    except Exception:  # noqa: BLE001 - the check is informative only
        pass
    env_flag = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    info = {
        "version": tf.__version__,
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "threads_note": "0 = TF's default (one per core)",
        # TF >= 2.9 turns its oneDNN custom ops on by default on x86 Linux unless
        # TF_ENABLE_ONEDNN_OPTS=0; IsMklEnabled says whether this build has them.
        "onednn_built": onednn,
        "TF_ENABLE_ONEDNN_OPTS": env_flag,
        "onednn_on": bool(onednn) and env_flag not in ("0", "false", "False"),
        "threads": os.cpu_count(),
    }
    return run, info


# ---- PyTorch ---------------------------------------------------------------------------------

def setup_torch(x_np, y_np, params_np):
    import torch

    torch.set_num_threads(os.cpu_count())
    x = torch.from_numpy(x_np)
    y = torch.from_numpy(y_np)
    layers = []
    for i, (w, b) in enumerate(params_np):
        lin = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))  # torch stores (out, in)
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        if i < 2:
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(net.parameters(), lr=LR)

    def run():
        opt.zero_grad()
        d = net(x) - y
        loss = (0.5 * d * d).mean()
        loss.backward()
        opt.step()
        return loss.item()

    cfg = torch.__config__.show()
    build = dict(re.findall(r"\b(BLAS_INFO|USE_MKLDNN|USE_OPENMP|USE_CUDA)=([^,\s]+)", cfg))
    info = {
        "version": torch.__version__,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        # oneDNN (mkldnn) compiled in and enabled; the fp32 GEMMs' BLAS is build["BLAS_INFO"].
        "onednn_on": bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled),
        "build": build,
        "parallel": [l.strip() for l in torch.__config__.parallel_info().splitlines()
                     if l.strip().startswith(("at::get_num", "omp_get", "mkl_get", "Intel(R)",
                                              "ATen parallel backend"))],
    }
    return run, info


# ---- JAX -------------------------------------------------------------------------------------

def setup_jax(x_np, y_np, params_np):
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(x_np)
    y = jnp.asarray(y_np)
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in params_np]

    def loss_fn(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < 2:
                h = jax.nn.relu(h)
        d = h - y
        return jnp.mean(0.5 * d * d)

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params = jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)
        return params, loss

    state = {"params": params}

    def run():
        state["params"], loss = step(state["params"], x, y)
        return float(loss)

    # What XLA:CPU compiled the step to: its fusion kinds and custom calls name the GEMM
    # backend (e.g. __ynn_fusion = YNNPACK, __onednn... = oneDNN; plain dot = Eigen).
    hlo = step.lower(params, x, y).compile().as_text()
    kinds = sorted(set(re.findall(r'"kind":"(__[a-z_]+)"', hlo)))
    calls = sorted(set(re.findall(r'custom_call_target="([^"]+)"', hlo)))
    info = {
        "version": jax.__version__,
        "jaxlib": getattr(__import__("jaxlib"), "__version__", None),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        # XLA:CPU's intra-op pool: one thread per core unless XLA_FLAGS says otherwise.
        "threads": os.cpu_count(),
        "threads_note": "XLA:CPU default intra-op pool, one per core (not queryable)",
        "hlo_fusion_kinds": kinds,
        "hlo_custom_calls": calls,
        "hlo_plain_dots": len(re.findall(r"= f32\[[0-9,]*\]\{[0-9,]*\} dot\(", hlo)),
        "onednn_on": "onednn" in hlo.lower(),
    }
    return run, info


SETUPS = {"tf": setup_tf, "torch": setup_torch, "jax": setup_jax}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", required=True, choices=sorted(SETUPS))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()

    x, y, params = make_data()
    t_import = time.perf_counter()
    run, info = SETUPS[args.framework](x, y, params)
    setup_s = time.perf_counter() - t_import

    losses = []
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        losses.append(run())
    warmup_s = time.perf_counter() - t0

    times = []
    cpu0 = time.process_time()
    for _ in range(args.steps):
        t = time.perf_counter()
        losses.append(run())
        times.append(1e3 * (time.perf_counter() - t))
    cpu_s = time.process_time() - cpu0

    out = {
        "framework": args.framework,
        "version": info.pop("version"),
        "ms_per_step_median": statistics.median(times),
        "ms_per_step_mean": statistics.fmean(times),
        "ms_per_step_min": min(times),
        "ms_per_step_all": [round(t, 4) for t in times],
        "cpu_ms_per_step": 1e3 * cpu_s / args.steps,
        "steps": args.steps,
        "warmup": args.warmup,
        "warmup_s": warmup_s,
        "setup_s": setup_s,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses": [round(l, 6) for l in losses],
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "user_env": env_seen(["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                              "TF_ENABLE_ONEDNN_OPTS", "XLA_FLAGS", "OMP_WAIT_POLICY",
                              "KMP_BLOCKTIME", "TF_NUM_INTRAOP_THREADS"]),
        **info,
    }
    print(f"[{args.framework}] first-step loss {losses[0]:.6f}, last {losses[-1]:.6f}",
          file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
