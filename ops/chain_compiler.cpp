// NVRTC, declared here rather than through nvrtc.h, so that builds without the CUDA toolkit
// compile this file too (the library is opened at run time).
#include "ops/chain_compiler.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

#include "core/error.h"

namespace tide::kernels {

namespace {

using Program = struct NvrtcProgramOpaque*;
struct Nvrtc {
  int (*version)(int*, int*) = nullptr;
  int (*create)(Program*, const char*, const char*, int, const char* const*,
                const char* const*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*log_size)(Program, size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*cubin_size)(Program, size_t*) = nullptr;
  int (*cubin)(Program, char*) = nullptr;
  int (*ptx_size)(Program, size_t*) = nullptr;
  int (*ptx)(Program, char*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  const char* (*error_string)(int) = nullptr;
  std::string missing;  // why it did not load; empty when it did
};

template <class F>
bool bind(void* lib, F& f, const char* name, std::string* missing) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f && missing->empty()) *missing = std::string("NVRTC has no ") + name;
  return f != nullptr;
}

Nvrtc load() {
  Nvrtc n;
  void* lib = nullptr;
#ifndef TIDE_NVRTC_LIBRARY  // CMake sets it to the CUDA toolkit's copy in CUDA builds
#define TIDE_NVRTC_LIBRARY "libnvrtc.so"
#endif
  for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", TIDE_NVRTC_LIBRARY})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  if (!lib) {
    const char* e = dlerror();
    n.missing = std::string("cannot load NVRTC (libnvrtc.so.13): ") + (e ? e : "not found") +
                "; it comes with the CUDA toolkit, add its lib64 to LD_LIBRARY_PATH";
    return n;
  }
  bind(lib, n.version, "nvrtcVersion", &n.missing);
  bind(lib, n.create, "nvrtcCreateProgram", &n.missing);
  bind(lib, n.compile, "nvrtcCompileProgram", &n.missing);
  bind(lib, n.log_size, "nvrtcGetProgramLogSize", &n.missing);
  bind(lib, n.log, "nvrtcGetProgramLog", &n.missing);
  bind(lib, n.cubin_size, "nvrtcGetCUBINSize", &n.missing);
  bind(lib, n.cubin, "nvrtcGetCUBIN", &n.missing);
  bind(lib, n.ptx_size, "nvrtcGetPTXSize", &n.missing);
  bind(lib, n.ptx, "nvrtcGetPTX", &n.missing);
  bind(lib, n.destroy, "nvrtcDestroyProgram", &n.missing);
  bind(lib, n.error_string, "nvrtcGetErrorString", &n.missing);
  return n;  // the library stays loaded for the process
}

const Nvrtc& nvrtc() {
  static const Nvrtc n = load();
  return n;
}

// NVRTC has no C++ standard library. What ops/functors.h takes from it, on the device:
// the math through CUDA's own overloads (the functions nvcc's kernels call), the traits
// written out.
constexpr const char* kCmath = R"(#pragma once
namespace std {
using ::exp; using ::log; using ::sqrt; using ::pow; using ::tanh; using ::erfc; using ::fabs;
using ::floor; using ::ceil; using ::sin; using ::cos; using ::fmin; using ::fmax;
}
)";
constexpr const char* kCstdint = R"(#pragma once
typedef signed char int8_t; typedef unsigned char uint8_t;
typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned uint32_t;
typedef long long int64_t; typedef unsigned long long uint64_t;
namespace std {
using ::int8_t; using ::uint8_t; using ::int16_t; using ::uint16_t;
using ::int32_t; using ::uint32_t; using ::int64_t; using ::uint64_t;
}
)";
constexpr const char* kTypeTraits = R"(#pragma once
namespace std {
template <class T, T v> struct integral_constant {
  static constexpr T value = v;
  using value_type = T;
  using type = integral_constant;
  constexpr operator T() const { return v; }
};
template <bool b> using bool_constant = integral_constant<bool, b>;
using true_type = bool_constant<true>;
using false_type = bool_constant<false>;
template <bool c, class A, class B> struct conditional { using type = A; };
template <class A, class B> struct conditional<false, A, B> { using type = B; };
template <bool c, class A, class B> using conditional_t = typename conditional<c, A, B>::type;
template <class A, class B> inline constexpr bool is_same_v = false;
template <class A> inline constexpr bool is_same_v<A, A> = true;
template <class...> using void_t = void;
template <class T> inline constexpr bool is_floating_point_v =
    is_same_v<T, float> || is_same_v<T, double> || is_same_v<T, long double>;
template <class T> inline constexpr bool is_integral_v =
    is_same_v<T, bool> || is_same_v<T, char> || is_same_v<T, signed char> ||
    is_same_v<T, unsigned char> || is_same_v<T, short> || is_same_v<T, unsigned short> ||
    is_same_v<T, int> || is_same_v<T, unsigned> || is_same_v<T, long> ||
    is_same_v<T, unsigned long> || is_same_v<T, long long> || is_same_v<T, unsigned long long>;
template <class T> struct make_unsigned { using type = T; };
template <> struct make_unsigned<signed char> { using type = unsigned char; };
template <> struct make_unsigned<char> { using type = unsigned char; };
template <> struct make_unsigned<short> { using type = unsigned short; };
template <> struct make_unsigned<int> { using type = unsigned; };
template <> struct make_unsigned<long> { using type = unsigned long; };
template <> struct make_unsigned<long long> { using type = unsigned long long; };
template <class T> using make_unsigned_t = typename make_unsigned<T>::type;
}
)";

std::string program_log(const Nvrtc& n, Program p) {
  size_t size = 0;
  if (n.log_size(p, &size) != 0 || size <= 1) return "";
  std::string log(size, '\0');
  if (n.log(p, log.data()) != 0) return "";
  log.resize(std::strlen(log.c_str()));
  return log;
}

}  // namespace

CompiledChain compile_chain(const std::string& source, int sm) {
  CompiledChain out;
  const Nvrtc& n = nvrtc();
  if (!n.missing.empty()) {
    out.error = n.missing;
    return out;
  }
  const char* headers[] = {detail::kChainFunctorsHeader,
                           detail::kChainHostDeviceHeader,
                           detail::kChainFloat16Header,
                           detail::kChainAwaitGridsHeader,
                           kCmath,
                           kCstdint,
                           kTypeTraits};
  const char* names[] = {
      "ops/functors.h", "core/host_device.h", "core/float16.h", "core/cuda/await_grids.h", "cmath",
      "cstdint",        "type_traits"};
  Program p = nullptr;
  if (int rc =
          n.create(&p, source.c_str(), "tide_chain.cu", int(std::size(headers)), headers, names);
      rc != 0) {
    out.error = std::string("nvrtcCreateProgram: ") + n.error_string(rc);
    return out;
  }
  // The flags tide's kernels are built with where they decide the bits (no fast math,
  // IEEE division and square root, no FMA contraction: CMakeLists.txt), so each step
  // rounds as its own kernel does. With --fmad=true ptxas contracts one step's multiply
  // with the next step's add, which separate kernels round apart.
  const std::string arch = "--gpu-architecture=sm_" + std::to_string(sm);
  const char* options[] = {arch.c_str(),  "--std=c++20",     "-default-device", "--fmad=false",
                           "--ftz=false", "--prec-div=true", "--prec-sqrt=true"};
  const int rc = n.compile(p, int(std::size(options)), options);
  if (rc != 0) {
    out.error = std::string("nvrtcCompileProgram (") + arch + "): " + n.error_string(rc) + "\n" +
                program_log(n, p);
  } else {
    size_t size = 0;
    if (n.cubin_size(p, &size) == 0 && size > 0) {
      out.cubin.resize(size);
      if (n.cubin(p, out.cubin.data()) != 0) out.cubin.clear();
    }
    if (out.cubin.empty()) out.error = "NVRTC compiled the chain but returned no CUBIN";
    if (n.ptx_size(p, &size) == 0 && size > 0) {
      out.ptx.resize(size);
      if (n.ptx(p, out.ptx.data()) != 0) out.ptx.clear();
      else out.ptx.resize(size - 1);  // NVRTC counts the terminating NUL
    }
  }
  n.destroy(&p);
  return out;
}

namespace {

std::atomic<int>& enabled_flag() {  // -1: not read from the environment yet
  static std::atomic<int> flag{-1};
  return flag;
}

}  // namespace

std::string nvrtc_version(std::string* why) {
  const Nvrtc& n = nvrtc();
  int major = 0, minor = 0;
  if (!n.missing.empty() || n.version(&major, &minor) != 0) {
    if (why) *why = n.missing.empty() ? "nvrtcVersion failed" : n.missing;
    return "";
  }
  return std::to_string(major) + "." + std::to_string(minor);
}

bool compiled_chains_enabled() {
  int v = enabled_flag().load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("TIDE_CUDA_NVRTC");
    v = env && std::strcmp(env, "0") == 0 ? 0 : 1;
    int expected = -1;
    if (!enabled_flag().compare_exchange_strong(expected, v)) v = expected;
  }
  return v == 1;
}

void set_compiled_chains_enabled(bool on) { enabled_flag().store(on ? 1 : 0); }

}  // namespace tide::kernels
