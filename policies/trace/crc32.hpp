// CRC-32 (IEEE 802.3 polynomial, reflected), the trace file's integrity check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tierrt::policy {

// `seed` chains calls: crc32(b, crc32(a)) == crc32(a followed by b).
std::uint32_t crc32(std::span<const std::byte> bytes, std::uint32_t seed = 0);

}  // namespace tierrt::policy
