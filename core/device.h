// Device: where a tensor lives (cpu, or cuda with an index).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace tide {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  friend bool operator==(const Device&, const Device&) = default;
  std::string str() const {
    return type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
  }
};
inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace tide
