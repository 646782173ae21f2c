// What a failed library call's error message names: the function, not its arguments. The
// check macros stringise the whole call ("cudaMalloc(&p, bytes)"); a message that quoted
// it would change with every argument list and bury the error. Plain C++: the CPU tests
// check the format that the CUDA, cuBLASLt, cuDNN and NCCL checks produce.
#pragma once

#include <string>
#include <string_view>

namespace tide::cuda {

// The called function of a stringised call: the qualified identifier before its first
// '(' ("cudaGraphAddMemcpyNode1D(&n, g, ...)" -> "cudaGraphAddMemcpyNode1D",
// "d.Create(&h)" -> "d.Create"). Text that is not a call (a description) comes back whole.
constexpr std::string_view call_name(std::string_view call) {
  const size_t paren = call.find('(');
  if (paren == std::string_view::npos) return call;
  std::string_view head = call.substr(0, paren);
  while (!head.empty() && (head.front() == ' ' || head.front() == '\n')) head.remove_prefix(1);
  while (!head.empty() && (head.back() == ' ' || head.back() == '\n')) head.remove_suffix(1);
  if (head.empty()) return call;
  for (char c : head) {
    const bool ident = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == ':' || c == '.' || c == '>' || c == '-';
    if (!ident) return call;
  }
  return head;
}

// "<function> failed: <error name>: <description>", the one format of every library check
// (the name is left out when the library has none, as NCCL's status strings).
inline std::string library_error(std::string_view call, std::string_view name,
                                 std::string_view what) {
  std::string m(call_name(call));
  m += " failed: ";
  if (!name.empty()) {
    m += name;
    m += ": ";
  }
  m += what;
  return m;
}

}  // namespace tide::cuda
