#!/usr/bin/env python3
"""PyTorch eager on the same GPU as tide_bench_cuda: the anchors of the CUDA targets.

Measures, with CUDA synchronisation inside the timed region and the median of --reps runs:
  tiny_ops_per_s   10000 dependent `y = y + 1` on a one-element tensor, then one sync
  matmul_4096_ms   torch.mm of two 4096x4096 float32 (TF32 off, as tide computes in FP32)
  add_64m_ms       a + b on 64M float32
  copy_64m_ms      a device-to-device copy of 64M float32
  mlp_step_ms      the textbook MLP step eager (Linear 512-2048-512-1 with ReLU, batch 1024,
                   l2 loss = mean(0.5 * d^2), SGD lr 0.005), one sync per step
  mlp_step_graph_ms  the same step captured once with torch.cuda.graphs and replayed
  tiny_unrolled_graph_ms  10000 dependent `y = y + 1` captured as one CUDA graph, replayed
  cnn_step_ms      the Fashion-MNIST CNN step of bench_cuda_cnn.cpp (BM_CudaCnnStep) eager:
                   bench/peers/cnn_step.py's network, Adam lr 1e-3, batch 128 of N(0, 1)
                   28x28 images, labels 0..9 in turn, the loss read after each step;
                   cuDNN as PyTorch sets it by default (heuristics, not benchmark mode),
                   TF32 off (as tide computes in FP32)
  cnn_step_graph_ms  the same step captured once with torch.cuda.graphs (Adam capturable)
                   and replayed: the anchor of tide's traced step
The CNN is measured last and on its own: if it fails, cnn_error says why and the numbers
above still print. Not measured: torch.compile (its first call compiles for tens of seconds
or more and needs Triton: too much for a short GPU lease).
Prints one JSON object. Usage: python3 bench/torch_cuda_anchor.py [--reps 5]
"""
import argparse
import json
import statistics
import time

import torch


def timed(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cnn(dev, capturable=False):
    """bench/peers/cnn_step.py's network on dev, its Adam, and one fixed batch."""
    torch.manual_seed(7)
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, capturable=capturable)
    x = torch.randn(128, 1, 28, 28, device=dev)
    y = torch.arange(128, device=dev) % 10
    return net, opt, x, y


def cnn_steps(out, dev, reps):
    """Adds cnn_step_ms, then cnn_step_graph_ms, to out (what ran before a failure stays)."""
    net, opt, x, y = cnn(dev)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    out["cnn_step_ms"] = 1e3 * timed(step, max(reps, 20), warmup=5)

    # Captured as PyTorch's docs capture a whole step: warm-up on a side stream, grads set
    # to None before the capture so backward() writes them from the graph's pool.
    net, opt, x, y = cnn(dev, capturable=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = torch.nn.functional.cross_entropy(net(x), y)
        static_loss.backward()
        opt.step()

    def graphed_step():
        g.replay()
        return static_loss.item()

    out["cnn_step_graph_ms"] = 1e3 * timed(graphed_step, max(reps, 20), warmup=5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda:0")
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}

    x = torch.zeros(1, device=dev)

    def tiny():
        y = x
        for _ in range(10000):
            y = y + 1
        return y

    out["tiny_ops_per_s"] = 10000 / timed(tiny, args.reps)

    a = torch.randn(4096, 4096, device=dev)
    b = torch.randn(4096, 4096, device=dev)
    out["matmul_4096_ms"] = 1e3 * timed(lambda: torch.mm(a, b), args.reps)

    n = 64 << 20
    p = torch.ones(n, device=dev)
    q = torch.ones(n, device=dev)
    out["add_64m_ms"] = 1e3 * timed(lambda: p + q, args.reps)
    dst = torch.empty_like(p)
    out["copy_64m_ms"] = 1e3 * timed(lambda: dst.copy_(p), args.reps)

    torch.manual_seed(42)
    net = torch.nn.Sequential(
        torch.nn.Linear(512, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 1)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.005)
    xb = torch.randn(1024, 512, device=dev)
    yb = torch.ones(1024, 1, device=dev)

    def step():
        opt.zero_grad()
        d = net(xb) - yb
        loss = (0.5 * d * d).mean()
        loss.backward()
        opt.step()
        return loss.item()

    out["mlp_step_ms"] = 1e3 * timed(step, max(args.reps, 20), warmup=5)

    # The same step captured once as a CUDA graph (torch.cuda.graphs), replayed; the loss
    # read after each replay, as above.
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up on a side stream, as PyTorch's docs require
            opt.zero_grad(set_to_none=False)
            d = net(xb) - yb
            ((0.5 * d * d).mean()).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=False)
    with torch.cuda.graph(g):
        d = net(xb) - yb
        static_loss = (0.5 * d * d).mean()
        static_loss.backward()
        opt.step()

    def graphed_step():
        g.replay()
        return static_loss.item()

    out["mlp_step_graph_ms"] = 1e3 * timed(graphed_step, max(args.reps, 20), warmup=5)

    # 10000 dependent tiny adds unrolled into one CUDA graph, replayed.
    y0 = torch.zeros(1, device=dev)
    tg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(tg):
        yy = y0
        for _ in range(10000):
            yy = yy + 1
    out["tiny_unrolled_graph_ms"] = 1e3 * timed(tg.replay, args.reps)

    try:
        cnn_steps(out, dev, args.reps)
    except Exception as e:  # keep the numbers above
        out["cnn_error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
