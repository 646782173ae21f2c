// `tide loop`: the textbook's third experiment completed with the traced mode: n times
// y = x + 1 on a 1x2 tensor, six ways — a sync after each op, one sync at the end, a
// traced function with the loop unrolled (replayed as one task), a traced loop node (the
// body recorded once, run n times inside one task), the same with its body fused (the
// add's own loop over all n iterations, in registers), and the unrolled trace with
// elementwise fusion (one kernel evaluating the n adds per element). Prints time per
// iteration and the speed-up over eager with one sync, then checks every result.
// With --device cuda[:N] x is created on that GPU and every way runs there: each trace is
// one CUDA graph, the loop node a conditional WHILE node (the count kept and decremented
// on the device; 16 iterations per launch of its body graph, and a seventh way with one),
// the fused loop node one kernel running all n iterations per element, and the fused
// unrolled trace one fused-chain kernel.
#include <iostream>
#include <string>

#include "commands.h"
#include "report.h"
#include "tide.h"
#include "trace/trace.h"

namespace tide::cli {

namespace {

struct Way {
  std::string name;
  double seconds = 0;  // median of the timed runs, one call each
  bool ok = false;
};

template <class F>
double time_median(int runs, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  return median(std::move(t));
}

bool equals(const Tensor& y, double want) {
  for (float v : y.to_vector<float>())
    if (v != float(want)) return false;
  return true;
}

}  // namespace

int loop_main(const Args& args, const GlobalOptions& global) {
  long long n = 10000;
  int runs = 5;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--n") n = take_int_option(args, i, 1, kMaxLoopN);
    else if (args[i] == "--runs") runs = int(take_int_option(args, i, 1, kMaxRuns));
    else throw UsageError("unknown option '" + args[i] + "'");
  }
  const Device device = global.device;
  const bool gpu = !device.is_cpu();
  std::cout << "tide loop: device: " << device_label(device) << "\n";
  const Tensor x = ones({1, 2}, DType::float32, device);
  // What every way computes: x + 1 applied n times, chained (the textbook adds to x each
  // time; chaining keeps the traced versions from folding the work away).
  const double want = 1.0 + double(n);
  auto add_chain = [n](const Tensor& x) {
    Tensor y = x;
    for (long long i = 0; i < n; ++i) y = y + 1.0;
    return y;
  };
  auto unrolled = trace::function(add_chain, {.name = "unrolled"});
  auto fused = trace::function(add_chain, {.name = "fused", .fusion = trace::Fusion::elementwise});
  auto loop_body = [n](const Tensor& x) {
    return trace::loop(
        n, [](const Tensor& y) { return y + 1.0; }, x);
  };
  auto node = trace::function(loop_body, {.name = "loop_node"});
  auto node_one = trace::function(loop_body, {.name = "loop_node_one", .loop_unroll = 1});
  auto fused_node =
      trace::function(loop_body, {.name = "loop_node_fused", .fusion = trace::Fusion::elementwise});

  std::vector<Way> ways;
  Tensor y;
  auto add = [&](std::string name, auto&& run) {
    y = run();
    y.wait_to_read();  // warm-up; the traced ones trace here
    Way w;
    w.name = std::move(name);
    w.seconds = time_median(runs, [&] {
      y = run();
      y.wait_to_read();
    });
    w.ok = equals(y, want);
    ways.push_back(w);
  };
  add("eager, sync after each op", [&] {
    Tensor t = x;
    for (long long i = 0; i < n; ++i) {
      t = t + 1.0;
      t.wait_to_read();
    }
    return t;
  });
  add("eager, one sync at the end", [&] { return add_chain(x); });
  add(gpu ? "traced, unrolled: one CUDA graph" : "traced, loop unrolled",
      [&] { return unrolled(x); });
  add(gpu ? "traced, loop node: a WHILE node" : "traced, loop node", [&] { return node(x); });
  if (gpu) add("traced, WHILE node, 1 iteration per launch", [&] { return node_one(x); });
  add("traced, loop node + fused", [&] { return fused_node(x); });
  add("traced, unrolled + fused", [&] { return fused(x); });

  const double base = ways[1].seconds;
  Table t("y = y + 1 on a 1x2 tensor on " + device.str() + ", n = " + std::to_string(n) +
              " (median of " + std::to_string(runs) + " runs)",
          {"way", "total", "per iteration", "speed-up vs eager async", "result"});
  bool all_ok = true;
  for (const Way& w : ways) {
    all_ok = all_ok && w.ok;
    t.row({w.name, format_seconds(w.seconds), format_seconds(w.seconds / double(n)),
           format_fixed(base / w.seconds, 1) + "x", w.ok ? "ok" : "WRONG"});
  }
  auto us = unrolled.stats(), fs = fused.stats(), ns = node.stats(), fns = fused_node.stats();
  if (!gpu) {
    t.note("unrolled: " + std::to_string(us.recorded_ops) + " recorded ops, " +
           std::to_string(us.kernels) + " kernels; fused: " + std::to_string(fs.kernels) +
           " kernel(s); loop node: " + std::to_string(ns.recorded_ops) + " node");
  } else {
    auto graph = [](const trace::FunctionStats& s) {
      return std::to_string(s.graph_nodes) + " graph nodes" +
             (s.graph_fallback.empty() ? std::string() : " (not used: " + s.graph_fallback + ")");
    };
    t.note("unrolled: " + std::to_string(us.recorded_ops) + " recorded ops, " + graph(us) +
           "; loop node: " + graph(ns) + "; loop node + fused: " + graph(fns) +
           "; unrolled + fused: " + std::to_string(fs.kernels) + " kernel(s), " + graph(fs));
  }
  t.print();
  if (gpu) {
    std::cout << "\nEager, each op pays the frontend's queueing (and, with a sync per op, a "
                 "round trip to the worker and the device). Each trace is one graph launch: "
                 "the unrolled one has n kernel nodes; the loop node's WHILE node runs the "
                 "body's kernel and the loop's step kernel per iteration on the device, 16 "
                 "iterations per launch of its body graph (or 1); fused, one kernel applies all "
                 "n adds per element.\n";
    return all_ok ? 0 : 1;
  }
  std::cout
      << "\nEager, each op pays the frontend's queueing (and, with a sync per op, a round trip "
         "to the worker). A trace pays that once per call: the replay is one engine task that "
         "walks the recorded kernels; the loop node records the body once and runs it n times "
         "in that task; fusion turns the n adds into one kernel that applies them per "
         "element, with no intermediate buffers. A fused loop body of one op runs that op's "
         "own loop: all n iterations of a block of elements in registers, with no call per "
         "iteration.\n";
  return all_ok ? 0 : 1;
}

}  // namespace tide::cli
