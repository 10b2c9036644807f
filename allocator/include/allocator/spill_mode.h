// How a spilled block's address is backed: the one spill-mode type, shared by
// the settings (TIERRT_SPILL_MODE) and the allocator.
#pragma once

#include <cstdint>

namespace tierrt::alloc {

enum class SpillMode : std::uint8_t {
  Auto,   // Remap where the device supports host VMM, else Copy
  Remap,  // the address is remapped onto host memory (a surprise access reads over the link)
  Copy,   // the bytes go to a pinned buffer and the address is left unmapped
};

constexpr const char* to_string(SpillMode m) noexcept {
  switch (m) {
    case SpillMode::Auto: return "auto";
    case SpillMode::Remap: return "remap";
    case SpillMode::Copy: return "copy";
  }
  return "?";
}

}  // namespace tierrt::alloc
