#!/usr/bin/env python3
"""The Fashion-MNIST CNN step of bench/bench_cnn.cpp (BM_CnnStep) in PyTorch, on the CPU,
with PyTorch's defaults as a new user gets them (oneDNN convolutions, its own thread count).

  Conv2d(1, 32, 3, padding=1), BatchNorm2d(32), ReLU, MaxPool2d(2),
  Conv2d(32, 64, 3, padding=1), BatchNorm2d(64), ReLU, MaxPool2d(2),
  Flatten, Linear(3136, 128), ReLU, Linear(128, 10)
  cross-entropy, Adam lr 1e-3, one fixed minibatch of 128 N(0, 1) images (28 x 28),
  labels 0..9 in turn

One step = zero_grad, forward, loss, backward, Adam, then the host reads the loss as a
Python float (the sync). --warmup steps run first, untimed. Prints one JSON line:
framework, version, ms_per_step_median/mean/min, ms_per_step_all, cpu_ms_per_step,
threads, the settings seen, the first and last loss.

--convs instead times the network's two convolutions alone at batch 128 -- forward,
input gradient and weight gradient through aten's convolution / convolution_backward,
the oneDNN kernels PyTorch's CPU build runs -- and prints one JSON line per pass: the
anchor bench/bench_cnn.cpp's BM_CnnConv is compared with.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

BATCH, SIDE, CLASSES, LR = 128, 28, 10, 1e-3
CONVS = [(1, 32, 28), (32, 64, 14)]  # (in channels, out channels, side), 3x3, padding 1


def env_seen(names):
    return {n: os.environ.get(n) for n in names if os.environ.get(n) is not None}


def make_step(torch):
    torch.manual_seed(7)
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, CLASSES))
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    x = torch.randn(BATCH, 1, SIDE, SIDE)
    y = torch.arange(BATCH) % CLASSES

    def run():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return run


def time_calls(f, steps, warmup):
    for _ in range(warmup):
        f()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        f()
        times.append(1e3 * (time.perf_counter() - t))
    return times


def convs(torch, steps, warmup):
    aten = torch.ops.aten
    for c, o, side in CONVS:
        x = torch.randn(BATCH, c, side, side)
        w = torch.randn(o, c, 3, 3)
        dy = torch.randn(BATCH, o, side, side)
        one, pad = [1, 1], [1, 1]
        passes = {
            "forward": lambda: aten.convolution(x, w, None, one, pad, one, False, [0, 0], 1),
            "input_grad": lambda: aten.convolution_backward(
                dy, x, w, None, one, pad, one, False, [0, 0], 1, [True, False, False]),
            "weight_grad": lambda: aten.convolution_backward(
                dy, x, w, None, one, pad, one, False, [0, 0], 1, [False, True, False]),
        }
        flop = 2.0 * BATCH * o * c * 9 * side * side
        for name, f in passes.items():
            with torch.no_grad():
                times = time_calls(f, steps, warmup)
            ms = statistics.median(times)
            print(json.dumps({"conv": f"{c}->{o} {side}x{side}", "pass": name,
                              "ms_median": ms, "ms_min": min(times), "gflops": flop / ms / 1e6,
                              "steps": steps, "version": torch.__version__,
                              "threads": torch.get_num_threads()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--convs", action="store_true", help="time the convolutions alone")
    args = ap.parse_args()

    import torch
    if args.convs:
        convs(torch, args.steps, args.warmup)
        return
    run = make_step(torch)
    losses = []
    for _ in range(args.warmup):
        losses.append(run())
    times = []
    cpu0 = time.process_time()
    for _ in range(args.steps):
        t = time.perf_counter()
        losses.append(run())
        times.append(1e3 * (time.perf_counter() - t))
    cpu_s = time.process_time() - cpu0
    print(json.dumps({
        "framework": "torch",
        "version": torch.__version__,
        "ms_per_step_median": statistics.median(times),
        "ms_per_step_mean": statistics.fmean(times),
        "ms_per_step_min": min(times),
        "ms_per_step_all": [round(t, 4) for t in times],
        "cpu_ms_per_step": 1e3 * cpu_s / args.steps,
        "steps": args.steps,
        "warmup": args.warmup,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "threads": torch.get_num_threads(),
        "onednn": torch.backends.mkldnn.is_available(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "user_env": env_seen(["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY",
                              "KMP_BLOCKTIME"]),
    }))
    print(f"[torch] first-step loss {losses[0]:.6f}, last {losses[-1]:.6f}", file=sys.stderr)


if __name__ == "__main__":
    main()
