// S1-S3 of the textbook's asynchronous-computation section on tide (see the header). Every
// number printed is measured in this run with std::chrono::steady_clock (or read from the
// profiler, which uses the same clock); nothing is hard-coded. Each measurement is repeated
// `runs` times after a warm-up and the median is reported.
#include "examples/cli/async_experiments.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/philox.h"
#include "examples/cli/report.h"
#include "tide.h"

namespace tide::cli {

namespace {

std::string secs(double s) { return format_fixed(s, 4) + " sec"; }

// A recording fake GPU (TIDE_FAKE_GPUS): its kernels are the CPU's, run in stream order.
bool is_fake(Device d) { return d.is_cuda() && cuda::runs_host_kernels(d.index); }

// ---- S1: enqueue vs completion ---------------------------------------------------------

// The synchronous reference, like NumPy: the calling thread fills x in a plain loop with the
// same Philox normals tide's randn draws (so the products can be compared), then calls the
// same cblas_sgemm tide's matmul calls. Leaves the last product in y.
void reference_run(int64_t n, int iters, uint64_t seed, std::vector<float>& x,
                   std::vector<float>& y) {
  Generator gen(seed);
  const int64_t numel = n * n;
  for (int it = 0; it < iters; ++it) {
    uint64_t offset = gen.reserve(uint64_t(numel));
    for (int64_t i = 0; i < numel; ++i)
      x[size_t(i)] = philox::normal_at<float>(offset, seed, uint64_t(i));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, x.data(),
                int(n), x.data(), int(n), 0.0f, y.data(), int(n));
  }
}

// tide: the same loop, queued on `device`. t_return: when the loop returned; t_done: after
// wait_all().
Tensor tide_run(int64_t n, int iters, uint64_t seed, Device device, double& t_return,
                double& t_done) {
  Generator gen(seed);
  Tensor y;
  auto t0 = Clock::now();
  for (int it = 0; it < iters; ++it) {
    Tensor x = randn({n, n}, DType::float32, gen, device);
    y = matmul(x, x);
  }
  t_return = seconds_since(t0);
  wait_all();
  t_done = seconds_since(t0);
  return y;
}

bool s1(const AsyncSizes& z) {
  const int64_t n = z.s1_n;
  const int iters = z.s1_iters;
  const uint64_t seed = 2024;
  std::vector<float> x(size_t(n * n)), ref(size_t(n * n));
  double tr, td;
  reference_run(n, 1, seed, x, ref);       // warm-up: OpenBLAS threads, page faults
  tide_run(n, 1, seed, z.device, tr, td);  // warm-up: worker thread, allocator cache

  std::vector<double> t_ref, t_ret, t_done;
  Tensor y;
  for (int r = 0; r < z.runs; ++r) {
    auto t0 = Clock::now();
    reference_run(n, iters, seed, x, ref);
    t_ref.push_back(seconds_since(t0));
    y = tide_run(n, iters, seed, z.device, tr, td);
    t_ret.push_back(tr);
    t_done.push_back(td);
  }

  // Same numbers, same sgemm: the last products must agree (on a GPU: the same Philox
  // numbers, the device's matmul, whose summation order may differ a little).
  std::vector<float> got = y.to_vector<float>();
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, double(std::fabs(got[i] - ref[i])));
    max_ref = std::max(max_ref, double(std::fabs(ref[i])));
  }
  const double tol = z.device.is_cpu() || is_fake(z.device) ? 1e-5 : 1e-4;
  bool ok = max_diff <= tol * (max_ref + 1.0);
  const std::string dev = z.device.str();

  double m_ref = median(t_ref), m_ret = median(t_ret), m_done = median(t_done);
  std::string size = std::to_string(n) + "x" + std::to_string(n);
  std::cout << "\nS1: " << iters << " x (x = randn " << size << "; y = matmul(x, x)) on " << dev
            << "\n";
  std::cout << "numpy-like sync: " << secs(m_ref) << "\n";
  std::cout << "tide (returns): " << secs(m_ret) << "\n";
  std::cout << "tide (wait_all): " << secs(m_done) << "\n";

  Table t("S1 table (" + dev + "; median of " + std::to_string(z.runs) + " runs)",
          {"variant", "median", "min", "max", "what the time covers"});
  auto add = [&](const char* name, const std::vector<double>& v, const char* what) {
    t.row({name, format_seconds(median(v)), format_seconds(*std::min_element(v.begin(), v.end())),
           format_seconds(*std::max_element(v.begin(), v.end())), what});
  };
  add("numpy-like sync", t_ref, "plain-loop randn + cblas_sgemm in the calling thread");
  add("tide (returns)", t_ret, "enqueue of the 20 ops only, nothing waited for");
  add("tide (wait_all)", t_done,
      z.device.is_cpu() ? "enqueue + wait_all(): all 20 ops executed"
                        : "enqueue + wait_all(): all 20 ops executed on the GPU");
  t.note("check: tide's last product vs the reference's: max |diff| = " +
         format_fixed(max_diff, 7) + (ok ? " (match)" : " (MISMATCH)"));
  t.print();
  std::cout << "  Why: tide's calls return after " << format_fixed(100.0 * m_ret / m_done, 2)
            << "% of the completed time because enqueueing only queues the ops; ";
  if (z.device.is_cpu())
    std::cout << "completion still costs the same randn + sgemm compute ("
              << format_fixed(m_done / m_ref, 2)
              << "x the synchronous reference, whose random fill runs in one thread while "
                 "tide's uses "
              << num_threads() << ").\n";
  else if (is_fake(z.device))
    std::cout << "completion is the randn + matmul on " << dev << " ("
              << format_fixed(m_done / m_ref, 2)
              << "x the synchronous CPU reference). This GPU is a fake: its kernels are the "
                 "CPU's, run in stream order, so the time says nothing about a real GPU.\n";
  else
    std::cout << "completion is the randn + matmul on " << dev << " ("
              << format_fixed(m_done / m_ref, 2)
              << "x the synchronous CPU reference, which does the same work on the CPU).\n";
  return ok;
}

// ---- S2: which sync waits for what -------------------------------------------------------

bool s2(const AsyncSizes& z) {
  const int64_t n = z.s2_n;
  Generator& gen = default_generator();
  Tensor a = randn({n, n}, DType::float32, gen, z.device);
  Tensor b = randn({n, n}, DType::float32, gen, z.device);
  matmul(a, a).wait_to_read();  // warm-up, and a and b are ready
  wait_all();

  std::vector<double> enq, t_y, t_all, enq2, t_vec, enq3, t_item;
  int z_pending = 0;
  double checksum_vec = 0, checksum_item = 0;
  for (int r = 0; r < z.runs; ++r) {
    auto t0 = Clock::now();
    Tensor y = matmul(a, a);
    Tensor zz = matmul(b, b);  // separate work queued behind y
    enq.push_back(seconds_since(t0));
    y.wait_to_read();
    t_y.push_back(seconds_since(t0));
    z_pending += !zz.is_ready();
    wait_all();
    t_all.push_back(seconds_since(t0));

    t0 = Clock::now();
    Tensor y2 = matmul(a, a);
    enq2.push_back(seconds_since(t0));
    std::vector<float> v = y2.to_vector<float>();
    t_vec.push_back(seconds_since(t0));
    checksum_vec = 0;
    for (float f : v) checksum_vec += f;

    t0 = Clock::now();
    Tensor s = sum(matmul(a, a));
    enq3.push_back(seconds_since(t0));
    checksum_item = s.item<float>();
    t_item.push_back(seconds_since(t0));
  }
  // to_vector and item read the same product: their sums must agree (float rounding aside).
  bool ok = std::fabs(checksum_vec - checksum_item) <= 1e-3 * (std::fabs(checksum_vec) + n * n);

  std::string mm =
      "matmul " + std::to_string(n) + "x" + std::to_string(n) + " on " + z.device.str();
  Table t("S2: wait_to_read vs wait_all (" + mm + "; median of " + std::to_string(z.runs) +
              " runs; times from the first enqueue)",
          {"step", "returned after", "what it waited for"});
  t.row({"enqueue y = matmul(a, a), z = matmul(b, b)", format_seconds(median(enq)), "nothing"});
  t.row({"y.wait_to_read()", format_seconds(median(t_y)),
         "y only (z still pending in " + std::to_string(z_pending) + " of " +
             std::to_string(z.runs) + " runs)"});
  t.row({"wait_all()", format_seconds(median(t_all)), "y and z"});
  t.print();
  std::cout << "  Why: y.wait_to_read() waits only for the last write to y, so it returns one "
               "matmul in while z is still queued; wait_all() waits for every queued op, so it "
               "returns about one matmul later ("
            << format_fixed(median(t_all) / std::max(median(t_y), 1e-12), 2) << "x).\n";

  Table u("S2: to_vector and item are sync points (" + mm + "; median of " +
              std::to_string(z.runs) + " runs; times from the enqueue)",
          {"step", "returned after", "what it waited for"});
  u.row({"enqueue y = matmul(a, a)", format_seconds(median(enq2)), "nothing"});
  u.row({"y.to_vector()", format_seconds(median(t_vec)),
         z.device.is_cpu() ? "the matmul, then a copy to the host"
                           : "the matmul, then a copy to the host (through pinned staging)"});
  u.row({"enqueue s = sum(matmul(a, a))", format_seconds(median(enq3)), "nothing"});
  u.row({"s.item()", format_seconds(median(t_item)), "the matmul and the sum"});
  u.note("check: sum of y.to_vector() = " + format_fixed(checksum_vec, 3) +
         ", s.item() = " + format_fixed(checksum_item, 3) + (ok ? " (match)" : " (MISMATCH)"));
  u.print();
  std::cout << "  Why: both block until the op that produced the value has run: each takes a "
               "matmul's time, not the enqueue's microseconds; to_vector also copies n*n "
               "floats, item one.\n";
  return ok;
}

// ---- S3: sync per op vs one sync ---------------------------------------------------------

// Records of op `name` that were enqueued at or after w0 (profiler clock), in queue order.
std::vector<profiler::OpRecord> records_since(int64_t w0, const char* name) {
  std::vector<profiler::OpRecord> out;
  for (const profiler::OpRecord& r : profiler::ops())
    if (r.enqueue_ns >= w0 && std::strcmp(r.op, name) == 0) out.push_back(r);
  return out;
}

double median_ns(std::vector<int64_t> v) {
  std::vector<double> d(v.begin(), v.end());
  return median(std::move(d)) * 1e-9;
}

// Explains whichever of the two S3 runs was faster, as measured: since a waiter whose
// stream is idle runs the awaited op on its own thread, a sync per op can win on the CPU.
void print_sync_order(double per_op_sync, double per_op_async, const std::string& dev) {
  if (per_op_sync > per_op_async) {
    std::cout << "  Why sync-every-op is slower here: each op pays a full round trip (queue it, "
                 "the worker notices and runs it, the frontend notices it finished) before the "
                 "next can be queued, so nothing overlaps: "
              << format_seconds(per_op_sync) << " per op instead of "
              << format_seconds(per_op_async) << ".\n";
  } else {
    std::cout << "  Why sync-every-op is not slower here (" << format_seconds(per_op_sync)
              << " per op against " << format_seconds(per_op_async)
              << " with one sync at the end): a waiter that finds its stream idle runs the "
                 "queued op itself on its own thread, so no op is handed to the worker; with one "
                 "sync at the end every op is, and on "
              << dev
              << " that hand-off (the task's cache lines moving to the worker's core) costs more "
                 "than the overlap of frontend and worker saves.\n";
  }
}

bool s3(const AsyncSizes& z) {
  const int N = z.s3_ops;
  Tensor x = ones({1, 2}, DType::float32, z.device);
  for (int i = 0; i < 1000; ++i) (x + 1).wait_to_read();  // warm-up
  wait_all();

  // The timed runs, profiler off (unless --trace turned it on).
  std::vector<double> t_sync, t_enq, t_async;
  Tensor y;
  for (int r = 0; r < z.runs; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < N; ++i) {
      y = x + 1;
      y.wait_to_read();
    }
    t_sync.push_back(seconds_since(t0));

    t0 = Clock::now();
    for (int i = 0; i < N; ++i) y = x + 1;
    t_enq.push_back(seconds_since(t0));
    wait_all();
    t_async.push_back(seconds_since(t0));
  }
  std::vector<float> yv = y.to_vector<float>();
  bool ok = yv.size() == 2 && yv[0] == 2.0f && yv[1] == 2.0f;

  // The profiled runs: per-op start/end on the worker. The profiler's clock is
  // profiler::detail::now_ns(), so the frontend's return times are read from it too.
  const bool own_profile = !profiler::enabled();  // with --trace, keep the user's session
  if (own_profile) profiler::start();
  std::vector<double> t2s, t3s, handoffs, returns, kernels_sync;
  std::vector<int64_t> iter_ret(size_t(N), 0);
  for (int r = 0; r < z.runs; ++r) {
    // One sync at the end: t2 = mean execution per op, t3 = final sync after the last op.
    int64_t w0 = profiler::detail::now_ns();
    for (int i = 0; i < N; ++i) y = x + 1;
    wait_all();
    int64_t ret = profiler::detail::now_ns();
    auto recs = records_since(w0, "add");
    if (recs.empty()) continue;
    int64_t busy = 0, last_end = 0;
    for (const auto& rec : recs) {
      busy += rec.end_ns - rec.start_ns;
      last_end = std::max(last_end, rec.end_ns);
    }
    t2s.push_back(double(busy) * 1e-9 / double(recs.size()));
    t3s.push_back(double(ret - last_end) * 1e-9);

    // Sync after every op: where does one round trip go?
    w0 = profiler::detail::now_ns();
    for (int i = 0; i < N; ++i) {
      y = x + 1;
      y.wait_to_read();
      iter_ret[size_t(i)] = profiler::detail::now_ns();
    }
    recs = records_since(w0, "add");
    if (recs.size() != size_t(N)) continue;
    const size_t n_ops = size_t(N);
    std::vector<int64_t> h(n_ops), k(n_ops), b(n_ops);
    for (size_t i = 0; i < size_t(N); ++i) {
      h[i] = recs[i].start_ns - recs[i].enqueue_ns;
      k[i] = recs[i].end_ns - recs[i].start_ns;
      b[i] = iter_ret[i] - recs[i].end_ns;
    }
    handoffs.push_back(median_ns(h));
    kernels_sync.push_back(median_ns(k));
    returns.push_back(median_ns(b));
  }
  if (own_profile) profiler::stop();

  const double t1 = median(t_enq) / N, t2 = median(t2s), t3 = median(t3s);
  const double th = median(handoffs), tb = median(returns);
  const double m_sync = median(t_sync), m_async = median(t_async);
  const double per_op_sync = m_sync / N;
  const double model_sync = N * (t1 + t2 + t3);
  const double model_sync_h = N * (t1 + th + t2 + tb);
  const double model_backend = t1 + N * t2 + t3;   // the textbook's form: t2 > t1
  const double model_frontend = N * t1 + t2 + t3;  // when the frontend is slower: t1 > t2
  const bool backend_bound = t2 >= t1;

  std::string ns = std::to_string(N);
  const std::string dev = z.device.str();
  Table p("S3 model parameters (" + ns + " x y = x + 1 on a 1x2 tensor on " + dev + "; median of " +
              std::to_string(z.runs) + " runs)",
          {"symbol", "stage", "how it was measured", "value"});
  p.row({"t1", "frontend queues the op", "enqueue " + ns + " ops without waiting, / " + ns,
         format_seconds(t1)});
  p.row(
      {"t2", "backend executes the op", "profiler: mean (end - start) per op", format_seconds(t2)});
  p.row({"t3", "result returned to the frontend",
         "profiler: wait_all() return - end of the last op", format_seconds(t3)});
  p.row({"th", "worker picks the op up (sync run)",
         "profiler: median (start - enqueue), sync every op", format_seconds(th)});
  p.row({"t3'", "wait_to_read returns (sync run)", "profiler: median (return - end), sync every op",
         format_seconds(tb)});
  p.note(
      "t2, t3, th, t3' come from separate runs with the profiler on, which adds a little "
      "per-op work; the totals below come from runs with it off" +
      std::string(own_profile ? "." : " (here --trace keeps it on for all runs)."));
  if (!z.device.is_cpu())
    p.note("on " + dev +
           " the worker launches each op onto the device's stream: the profiler's start and "
           "end bracket the launch, so t2 is the launch cost; the kernel's own time is in t3' "
           "(per op) and in t3, which here also holds the device draining the kernels still "
           "queued after the last launch, so N (t1 + t2 + t3) overstates the sync-per-op run");
  p.print();

  Table t("S3 totals (" + dev + "; median of " + std::to_string(z.runs) + " runs)",
          {"run", "measured", "per op", "model", "model formula"});
  t.row({"sync after every op (y.wait_to_read())", format_seconds(m_sync),
         format_seconds(per_op_sync), format_seconds(model_sync), "N (t1 + t2 + t3)  [textbook]"});
  t.row({"", "", "", format_seconds(model_sync_h), "N (t1 + th + t2 + t3')  [with the hand-off]"});
  t.row({"one sync at the end (wait_all())", format_seconds(m_async), format_seconds(m_async / N),
         format_seconds(model_backend),
         std::string("t1 + N t2 + t3  [textbook, backend-bound]") +
             (backend_bound ? " <- applies" : "")});
  t.row({"", "", "", format_seconds(model_frontend),
         std::string("N t1 + t2 + t3  [frontend-bound]") + (backend_bound ? "" : " <- applies")});
  t.row(
      {"  of which enqueue (returns)", format_seconds(median(t_enq)), format_seconds(t1), "", ""});
  t.note("N = " + ns +
         "; speed-up of one sync over a sync per op: " + format_fixed(m_sync / m_async, 1) +
         "x; check: y = x + 1 = " + (ok ? "2 (match)" : "MISMATCH"));
  t.print();
  print_sync_order(per_op_sync, m_async / N, dev);
  std::cout << "  How the model accounts for it: with a sync per op every stage is paid N "
               "times, N (t1 + t2 + t3); with one sync the frontend runs ahead and t1 and t2 "
               "overlap, so only the slower of the two is paid N times, plus one final t3 (here "
            << (backend_bound ? "the backend" : "the frontend")
            << " is the slower: t1 = " << format_seconds(t1) << ", t2 = " << format_seconds(t2)
            << "). The textbook model leaves out the hand-off th, which the second row adds.\n";
  return ok;
}

}  // namespace

AsyncSizes parse_async_args(const Args& args, AsyncSizes sizes) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--runs") sizes.runs = int(take_int_option(args, i, 1, kMaxRuns));
    else throw UsageError("unknown option '" + args[i] + "'");
  }
  return sizes;
}

int run_async_experiments(const AsyncSizes& sizes, const char* title) {
  std::cout << title << ": device: " << device_label(sizes.device) << ", threads " << num_threads()
            << ", engine "
            << (Engine::get().synchronous() ? "synchronous (TIDE_ENGINE=sync)" : "asynchronous")
            << ", " << sizes.runs << " runs per measurement, medians reported\n";
  bool ok = s1(sizes);
  ok = s2(sizes) && ok;
  ok = s3(sizes) && ok;
  if (!ok) std::cerr << "tide: a result check failed (see MISMATCH above)\n";
  return ok ? 0 : 1;
}

}  // namespace tide::cli
