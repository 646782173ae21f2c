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

class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  Watchdog() {
    std::thread([this] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::lock_guard lock(mu_);
        if (started_ != 0 && now() - started_ > kTestLimit.count()) {
          std::fprintf(stderr, "rank %d: %s ran for more than %lld s: a hang, stopping\n", rank_,
                       name_.c_str(), static_cast<long long>(kTestLimit.count()));
          std::_Exit(3);  // a rank stuck in MPI cannot be unwound
        }
      }
    }).detach();
  }
  void set_rank(int r) {
    std::lock_guard lock(mu_);
    rank_ = r;
  }
  void OnTestStart(const ::testing::TestInfo& info) override {
    std::lock_guard lock(mu_);
    name_ = std::string(info.test_suite_name()) + "." + info.name();
    started_ = now();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard lock(mu_);
    started_ = 0;
  }

 private:
  static long long now() {
    using namespace std::chrono;
    return duration_cast<seconds>(steady_clock::now().time_since_epoch()).count() + 1;
  }
  std::mutex mu_;
  long long started_ = 0;  // seconds (+1), 0 between tests
  std::string name_;
  int rank_ = -1;
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
  auto* watchdog = new Watchdog;  // owned by gtest's listener list
  watchdog->set_rank(world.rank());
  ::testing::UnitTest::GetInstance()->listeners().Append(watchdog);
  return RUN_ALL_TESTS();
}
