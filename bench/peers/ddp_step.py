#!/usr/bin/env python3
"""The textbook MLP training step of mlp_step.py, data-parallel in PyTorch DDP (gloo, CPU),
with the gradient all-reduce overlapped with backward or not (the peer figures for tide_bench_dist).

  Linear(512, 2048) + ReLU, Linear(2048, 512) + ReLU, Linear(512, 1)
  loss = mean(0.5 * (pred - 1)^2) over the rank's rows, plain SGD lr 0.005
  X, y and the initial weights: mlp_step.make_data() (numpy, seed 42), the same on every rank

Data parallel: the batch of 1024 is split into N equal shards by rows; rank r trains on rows
[r * 1024/N, (r + 1) * 1024/N), i.e. 512 rows per rank for 2 ranks, one fixed shard per
rank every step. Averaging the ranks' gradients (equal shards) gives the full batch's
gradient, so the N-rank run follows the 1-process full-batch run up to rounding.

Modes (--ranks N >= 2; process group gloo over 127.0.0.1, torch.set_num_threads(--threads)
per rank, default 1):
  --overlap on   DistributedDataParallel as a new user gets it: bucketed all-reduce started
                 from backward hooks while backward still runs (bucket_cap_mb default 25,
                 which also keeps DDP's 1 MiB first bucket; --bucket-mb X sets
                 bucket_cap_mb=X, which makes the first bucket X MiB too)
  --overlap off  the same DDP module, but forward and backward under ddp.no_sync() (no
                 hooks fire, nothing is reduced during backward); after backward has
                 finished, the gradients are all-reduced (SUM) and divided by N:
                 --off-reduce per-param (default): one dist.all_reduce per gradient tensor
                 (6 calls); --off-reduce flat: one all_reduce of one flattened buffer,
                 copied out and back
  --ranks 1      no process group, no DDP: the plain step on the full batch of 1024 with
                 --threads threads (the baseline)

One step = zero_grad, forward, loss, backward, (all-reduce), opt.step(), then loss.item()
(the host reads the rank's loss: the step has run when the timer stops). --warmup steps run
first, untimed; then a barrier; then --steps timed steps. Each rank times its own steps.

Prints (rank 0) one JSON line: mode, ranks, threads per rank, batch per rank, steps,
ms_per_step median/min/max/mean of rank 0 over the timed steps, every rank's median,
bytes_allreduced_per_step_per_rank (the gradients' payload: sum of numel x 4 bytes; 0 for
one process), all-reduce calls per step, DDP's buckets, (overlap off) the median ms of the
all-reduce after backward, loss_last (rank 0's own shard),
loss_last_global (the mean of the ranks' last losses = the full batch's loss; computed
after timing), loss_first, and the settings seen.

Runs without torchrun (forks its ranks with multiprocessing before torch is imported,
MASTER_ADDR=127.0.0.1, a free port) or under it (torchrun --nproc_per_node 2 ddp_step.py ...: RANK and WORLD_SIZE
come from torchrun).
"""
import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlp_step import BATCH, LR, make_data  # noqa: E402  (numpy only)


def build_net(torch, params_np):
    layers = []
    for i, (w, b) in enumerate(params_np):
        lin = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))  # torch stores (out, in)
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        if i < 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def worker(rank, world, args, port):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x_np, y_np, params_np = make_data()
    x_all, y_all = torch.from_numpy(x_np), torch.from_numpy(y_np)
    per = BATCH // world
    x = x_all[rank * per:(rank + 1) * per].contiguous()
    y = y_all[rank * per:(rank + 1) * per].contiguous()
    net = build_net(torch, params_np)
    grads_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    n_params = len(list(net.parameters()))

    ddp = None
    calls_per_step = 0
    if world > 1:
        if port is not None:  # forked by us; under torchrun the env:// settings are there
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        kw = {} if args.bucket_mb is None else {"bucket_cap_mb": args.bucket_mb}
        ddp = torch.nn.parallel.DistributedDataParallel(net, **kw)  # broadcasts rank 0's weights
        model = ddp
    else:
        model = net
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    params = [p for p in net.parameters() if p.requires_grad]
    ar_ms = []  # overlap off: the all-reduce (and division) after backward, per step

    if world > 1 and args.overlap == "off":
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
        calls_per_step = n_params if args.off_reduce == "per-param" else 1

        def step():
            opt.zero_grad()
            with ddp.no_sync():
                d = model(x) - y
                loss = (0.5 * d * d).mean()
                loss.backward()
            grads = [p.grad for p in params]
            t_ar = time.perf_counter()
            if args.off_reduce == "per-param":
                for g in grads:
                    dist.all_reduce(g)
                    g.div_(world)
            else:
                flat = _flatten_dense_tensors(grads)
                dist.all_reduce(flat)
                flat.div_(world)
                for g, f in zip(grads, _unflatten_dense_tensors(flat, grads)):
                    g.copy_(f)
            ar_ms.append(1e3 * (time.perf_counter() - t_ar))
            opt.step()
            return loss.item()
    else:
        def step():
            opt.zero_grad()
            d = model(x) - y
            loss = (0.5 * d * d).mean()
            loss.backward()
            opt.step()
            return loss.item()

    losses = [step() for _ in range(args.warmup)]
    if world > 1:
        dist.barrier()
    times = []
    cpu0 = time.process_time()
    for _ in range(args.steps):
        t = time.perf_counter()
        losses.append(step())
        times.append(1e3 * (time.perf_counter() - t))
    cpu_s = time.process_time() - cpu0

    rank_medians = [statistics.median(times)]
    loss_global = losses[-1]
    buckets = None
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, statistics.median(times))
        rank_medians = gathered
        t = torch.tensor([losses[-1]], dtype=torch.float64)
        dist.all_reduce(t)
        loss_global = t.item() / world
        if args.overlap == "on":
            try:  # DDP's own record of its (rebuilt) buckets; private API, informative only
                ld = ddp._get_ddp_logging_data()
                buckets = {k: ld[k] for k in ("bucket_sizes", "rebuilt_bucket_sizes",
                                              "bucket_cap_bytes", "comm_hook")
                           if k in ld}
                sizes = str(ld.get("rebuilt_bucket_sizes") or ld.get("bucket_sizes") or "")
                calls_per_step = len([s for s in sizes.split(",") if s.strip()]) or None
            except Exception as e:  # noqa: BLE001
                buckets = {"error": repr(e)}
        dist.barrier()
        dist.destroy_process_group()

    if rank == 0:
        mode = "single" if world == 1 else f"overlap-{args.overlap}"
        out = {
            "mode": mode,
            "ranks": world,
            "threads_per_rank": torch.get_num_threads(),
            "batch_per_rank": per,
            "steps": args.steps,
            "warmup": args.warmup,
            "ms_per_step_median": statistics.median(times),
            "ms_per_step_min": min(times),
            "ms_per_step_max": max(times),
            "ms_per_step_mean": statistics.fmean(times),
            "rank_medians": rank_medians,
            "bytes_allreduced_per_step_per_rank": grads_bytes if world > 1 else 0,
            "allreduce_calls_per_step": calls_per_step,
            "off_reduce": args.off_reduce if (world > 1 and args.overlap == "off") else None,
            "bucket_cap_mb": (args.bucket_mb if args.bucket_mb is not None else "default(25)")
                             if (world > 1 and args.overlap == "on") else None,
            "ddp_buckets": buckets,
            # overlap off only: ms of each timed step rank 0 spends in the all-reduce +
            # division after its backward, waiting for the slower rank included
            "allreduce_ms_median_off": statistics.median(ar_ms[args.warmup:])
                                       if ar_ms[args.warmup:] else None,
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "loss_last_global": loss_global,
            "cpu_ms_per_step_rank0": 1e3 * cpu_s / args.steps,
            "torch": torch.__version__,
            "interop_threads": torch.get_num_interop_threads(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "user_env": {n: os.environ[n] for n in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                    "GLOO_SOCKET_IFNAME") if n in os.environ},
        }
        print(f"[{mode} x{world}] {out['ms_per_step_median']:.2f} ms/step, "
              f"loss first {losses[0]:.6f} last {losses[-1]:.6f} (global {loss_global:.6f})",
              file=sys.stderr)
        print(json.dumps(out), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--overlap", choices=["on", "off"], default="on")
    ap.add_argument("--off-reduce", choices=["per-param", "flat"], default="per-param")
    ap.add_argument("--bucket-mb", type=float, default=None,
                    help="DDP bucket_cap_mb (default: DDP's own, 25 with a 1 MiB first bucket)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    if BATCH % args.ranks:
        ap.error(f"--ranks must divide the batch {BATCH}")
    # gloo picks its interface from the hostname unless told; keep it on loopback.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        world = int(os.environ["WORLD_SIZE"])
        if world != args.ranks:
            ap.error(f"torchrun started {world} ranks, --ranks says {args.ranks}")
        worker(int(os.environ["RANK"]), world, args, None)
    elif args.ranks == 1:
        worker(0, 1, args, None)
    else:
        # The parent has not imported torch (only numpy), so forking is safe and saves it
        # an import of torch; each rank imports torch itself.
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        port = free_port()
        procs = [ctx.Process(target=worker, args=(r, args.ranks, args, port))
                 for r in range(args.ranks)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        bad = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode != 0]
        if bad:
            sys.exit(f"ranks failed (rank, exit code): {bad}")


if __name__ == "__main__":
    main()
