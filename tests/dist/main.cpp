// The dist suite's main, run as every rank of `mpirun -n 2` (ctest does: label `dist`).
// Without MPI in the build it checks that dist::mpi_world() says so and exits 77 (ctest's
// SKIP_RETURN_CODE: "Skipped"). A watchdog ends the process when one test runs longer than
// kTestLimit: a collective that hangs fails the suite with the test's name instead of
// holding ctest until its TIMEOUT.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"
#include "dist/mpi.h"

namespace {

constexpr auto kTestLimit = std::chrono::seconds(60);

// What the watchdog thread reads. Never freed: the detached thread may outlive main and
// gtest's listeners (which gtest deletes at exit).
struct WatchState {
  std::mutex mu;
  long long started = 0;  // seconds (+1) when the running test started, 0 between tests
  std::string name;
  int rank = -1;
};

long long now_s() {
  using namespace std::chrono;
  return duration_cast<seconds>(steady_clock::now().time_since_epoch()).count() + 1;
}

WatchState* start_watchdog(int rank) {
  static WatchState* state = new WatchState;
  state->rank = rank;
  std::thread([] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::lock_guard lock(state->mu);
      if (state->started != 0 && now_s() - state->started > kTestLimit.count()) {
        std::fprintf(stderr, "rank %d: %s ran for more than %lld s: a hang, stopping\n",
                     state->rank, state->name.c_str(), static_cast<long long>(kTestLimit.count()));
        std::_Exit(3);  // a rank stuck in MPI cannot be unwound
      }
    }
  }).detach();
  return state;
}

class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  explicit Watchdog(WatchState* state) : state_(state) {}
  void OnTestStart(const ::testing::TestInfo& info) override {
    std::lock_guard lock(state_->mu);
    state_->name = std::string(info.test_suite_name()) + "." + info.name();
    state_->started = now_s();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard lock(state_->mu);
    state_->started = 0;
  }

 private:
  WatchState* state_;
};

}  // namespace

int main(int argc, char** argv) {
  if (!tide::dist::mpi_available()) {
    try {
      tide::dist::mpi_world(&argc, &argv);
    } catch (const tide::Error& e) {
      if (std::string(e.what()).find("tide was built without MPI") == std::string::npos) {
        std::printf("unexpected error without MPI: %s\n", e.what());
        return 1;
      }
      std::printf("%s\nthe dist tests are skipped\n", e.what());
      return 77;
    }
    std::printf("mpi_world() did not throw in a build without MPI\n");
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  auto& world = tide::dist::mpi_world(&argc, &argv);
  // Owned by gtest's listener list.
  ::testing::UnitTest::GetInstance()->listeners().Append(
      new Watchdog(start_watchdog(world.rank())));
  return RUN_ALL_TESTS();
}
