// The profiler: op records (enqueue <= start <= end), counter samples, and the Chrome
// trace file, parsed here with a small JSON reader so that the test fails on a file that
// Perfetto would reject, not only on missing words.
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>

#include "test_support.h"

namespace tide {
namespace {

using namespace testing_support;

// ---- a minimal JSON reader (objects, arrays, strings, numbers, literals) -------------

struct Json {
  std::variant<std::nullptr_t, bool, double, std::string, std::vector<Json>,
               std::map<std::string, Json>>
      v;
  bool is_object() const { return v.index() == 5; }
  bool is_array() const { return v.index() == 4; }
  bool is_string() const { return v.index() == 3; }
  bool is_number() const { return v.index() == 2; }
  const std::map<std::string, Json>& object() const { return std::get<5>(v); }
  const std::vector<Json>& array() const { return std::get<4>(v); }
  const std::string& str() const { return std::get<3>(v); }
  double num() const { return std::get<2>(v); }
  const Json* get(const std::string& key) const {
    if (!is_object()) return nullptr;
    auto it = object().find(key);
    return it == object().end() ? nullptr : &it->second;
  }
};

class JsonReader {
 public:
  explicit JsonReader(std::string text) : s_(std::move(text)) {}
  Json parse() {
    Json j = value();
    ws();
    if (i_ != s_.size()) fail("trailing characters");
    return j;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(i_));
  }
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  Json value() {
    char c = peek();
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') return Json{string()};
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return number();
    for (auto [word, val] : {std::pair<const char*, Json>{"true", Json{true}},
                             {"false", Json{false}},
                             {"null", Json{nullptr}}})
      if (s_.compare(i_, std::strlen(word), word) == 0) {
        i_ += std::strlen(word);
        return val;
      }
    fail("unexpected character");
  }
  Json object() {
    expect('{');
    std::map<std::string, Json> m;
    if (peek() == '}') {
      ++i_;
      return Json{m};
    }
    for (;;) {
      if (peek() != '"') fail("expected a key");
      std::string k = string();
      expect(':');
      m[k] = value();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}');
      return Json{m};
    }
  }
  Json array() {
    expect('[');
    std::vector<Json> a;
    if (peek() == ']') {
      ++i_;
      return Json{a};
    }
    for (;;) {
      a.push_back(value());
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect(']');
      return Json{a};
    }
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c == '\\') {
        if (i_ >= s_.size()) fail("bad escape");
        char e = s_[i_++];
        if (e == 'u') {
          i_ += 4;  // kept as '?': enough for this test
          out += '?';
        } else {
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        }
      } else {
        out += c;
      }
    }
    expect('"');
    return out;
  }
  Json number() {
    size_t used = 0;
    double d = std::stod(s_.substr(i_, 40), &used);
    i_ += used;
    return Json{d};
  }
  std::string s_;
  size_t i_ = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "tide_" + std::to_string(::getpid()) + "_" + name;
}

class Profiler : public EngineTest {
 protected:
  void TearDown() override {
    profiler::stop();
    EngineTest::TearDown();
  }
};

TEST_F(Profiler, RecordsOpsWithOrderedTimes) {
  profiler::start();
  EXPECT_TRUE(profiler::enabled());
  Tensor a = ones({64});
  Tensor b = add(a, a);
  Tensor c;
  {
    StreamGuard g(test_stream(0));
    c = mul(b, 2.0);
  }
  c.wait_to_read();
  profiler::stop();
  EXPECT_FALSE(profiler::enabled());
  std::vector<profiler::OpRecord> ops = profiler::ops();
  ASSERT_GE(ops.size(), 3u);
  int adds = 0, muls = 0;
  for (const auto& r : ops) {
    EXPECT_LE(r.enqueue_ns, r.start_ns) << r.op;
    EXPECT_LE(r.start_ns, r.end_ns) << r.op;
    if (std::string(r.op) == "add") {
      ++adds;
      EXPECT_EQ(r.stream, Stream::default_stream().id());
    }
    if (std::string(r.op) == "mul") {
      ++muls;
      EXPECT_EQ(r.stream, test_stream(0).id());
    }
  }
  EXPECT_EQ(adds, 1);
  EXPECT_EQ(muls, 1);
  for (size_t i = 1; i < ops.size(); ++i) EXPECT_LE(ops[i - 1].enqueue_ns, ops[i].enqueue_ns);
  // One counter sample per submit.
  std::vector<profiler::CounterSample> cs = profiler::counters();
  EXPECT_GE(cs.size(), 3u);
  for (const auto& s : cs) EXPECT_GE(s.active_bytes, s.inflight_bytes);
}

TEST_F(Profiler, OpsAfterStopAreNotRecordedAndStartClears) {
  profiler::start();
  add(ones({4}), 1.0).wait_to_read();
  profiler::stop();
  const size_t n = profiler::ops().size();
  EXPECT_GE(n, 2u);
  add(ones({4}), 1.0).wait_to_read();
  EXPECT_EQ(profiler::ops().size(), n);
  profiler::start();
  EXPECT_TRUE(profiler::ops().empty());
  EXPECT_TRUE(profiler::counters().empty());
  profiler::stop();
}

TEST_F(Profiler, QueueDepthCounterSeesQueuedWork) {
  Tensor tag = zeros({1});
  Engine::get().synchronize();
  profiler::start();
  Gate gate;
  gate.hold(tag);
  Tensor x = zeros({4}), one = ones({4});
  for (int i = 0; i < 10; ++i) x.add_(one);
  gate.open();
  x.wait_to_read();
  profiler::stop();
  uint64_t deepest = 0;
  for (const auto& s : profiler::counters()) deepest = std::max(deepest, s.queue_depth);
  EXPECT_GE(deepest, 12u);  // the gate, two fills and ten adds were queued at once
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(Profiler, SynchronousOpsAreRecordedOnTheCallingThread) {
  profiler::start();
  {
    SynchronousGuard sync;
    add(ones({4}), 1.0);
  }
  profiler::stop();
  bool found = false;
  for (const auto& r : profiler::ops())
    if (std::string(r.op) == "add") {
      found = true;
      EXPECT_EQ(r.stream, -1);
      EXPECT_LE(r.enqueue_ns, r.start_ns);
      EXPECT_LE(r.start_ns, r.end_ns);
    }
  EXPECT_TRUE(found);
}

TEST_F(Profiler, WritesAValidChromeTrace) {
  profiler::start();
  Tensor a = ones({256});
  Tensor b = add(a, a);
  Tensor c;
  {
    StreamGuard g(test_stream(1));
    c = add(b, 1.0);
  }
  c.wait_to_read();
  profiler::stop();
  const std::string path = temp_path("trace.json");
  profiler::write_chrome_trace(path);
  const std::string text = read_file(path);
  ASSERT_FALSE(text.empty());
  Json doc;
  ASSERT_NO_THROW(doc = JsonReader(text).parse()) << text.substr(0, 2000);
  ASSERT_TRUE(doc.is_object());
  const Json* events = doc.get("traceEvents");
  ASSERT_NE(events, nullptr);
  ASSERT_TRUE(events->is_array());

  int add_default = 0, add_side = 0, depth = 0, memory = 0, enqueues = 0;
  for (const Json& e : events->array()) {
    ASSERT_TRUE(e.is_object());
    const Json* name = e.get("name");
    const Json* ph = e.get("ph");
    ASSERT_TRUE(name && name->is_string());
    ASSERT_TRUE(ph && ph->is_string());
    if (ph->str() == "X") {
      const Json* tid = e.get("tid");
      const Json* ts = e.get("ts");
      const Json* dur = e.get("dur");
      ASSERT_TRUE(tid && tid->is_number() && ts && ts->is_number() && dur && dur->is_number());
      EXPECT_GE(dur->num(), 0.0);
      if (name->str() == "add") {
        // tid 1 + k is stream k's worker.
        if (int(tid->num()) == Stream::default_stream().id() + 1) ++add_default;
        if (int(tid->num()) == test_stream(1).id() + 1) ++add_side;
      }
    } else if (ph->str() == "C") {
      const Json* args = e.get("args");
      ASSERT_TRUE(args && args->is_object());
      if (name->str() == "queue depth") ++depth;
      if (name->str() == "memory") ++memory;
    } else if (ph->str() == "i") {
      ++enqueues;
    }
  }
  EXPECT_EQ(add_default, 1);
  EXPECT_EQ(add_side, 1);
  EXPECT_GT(depth, 0);
  EXPECT_GT(memory, 0);
  EXPECT_GE(enqueues, 3);
  std::remove(path.c_str());
}

TEST_F(Profiler, UnwritablePathThrows) {
  profiler::start();
  add(ones({4}), 1.0).wait_to_read();
  profiler::stop();
  std::string m =
      error_of([] { profiler::write_chrome_trace("/nonexistent-dir/tide/trace.json"); });
  EXPECT_TRUE(contains(m, "[profiler]"));
  EXPECT_TRUE(contains(m, "/nonexistent-dir/tide/trace.json"));
}

TEST_F(Profiler, SessionWritesAtScopeExit) {
  const std::string path = temp_path("session.json");
  std::remove(path.c_str());
  {
    profiler::Session s(path);
    EXPECT_TRUE(profiler::enabled());
    add(ones({4}), 1.0);
  }
  EXPECT_FALSE(profiler::enabled());
  const std::string text = read_file(path);
  Json doc;
  ASSERT_NO_THROW(doc = JsonReader(text).parse());
  EXPECT_NE(doc.get("traceEvents"), nullptr);
  std::remove(path.c_str());
  {
    profiler::Session none("");  // records nothing
    EXPECT_FALSE(profiler::enabled());
  }
}

}  // namespace
}  // namespace tide
