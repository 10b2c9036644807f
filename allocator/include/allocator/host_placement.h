// Where the host tier's memory lives relative to the GPU's NUMA node: a
// pinned buffer on the far socket of a two-socket machine is copied across
// the inter-socket link, slower than one on the GPU's own node.
#pragma once

#include <cstdint>

namespace tierrt::alloc {

enum class HostPlacement : std::uint8_t {
  FirstTouch,    // copy: the device names no NUMA node, the kernel puts the pages where they are touched
  OnNode,        // on the device's node (remap: chunks created there; copy: pinned chunks bound there)
  Unplaced,      // copy: the device's node cannot be used on this host; pinned chunks go anywhere
  DriverChoice,  // remap on CU_MEM_LOCATION_TYPE_HOST: the driver picks the node
};

constexpr const char* to_string(HostPlacement p) noexcept {
  switch (p) {
    case HostPlacement::FirstTouch: return "first touch";
    case HostPlacement::OnNode: return "on node";
    case HostPlacement::Unplaced: return "unplaced";
    case HostPlacement::DriverChoice: return "driver's choice";
  }
  return "?";
}

}  // namespace tierrt::alloc
