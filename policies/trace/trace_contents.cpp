#include <string>
#include <unordered_set>

#include "policies/trace/trace_file.hpp"

namespace tierrt::policy {
namespace {

std::string hex(std::uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  do s.insert(s.begin(), kDigits[v & 15]);
  while (v >>= 4);
  return "0x" + s;
}

[[noreturn]] void refuse(std::string_view name, std::size_t index, const std::string& what) {
  throw TraceError(std::string(name) + ": invalid trace: record " + std::to_string(index) + " (offset " +
                   std::to_string(kTraceHeaderBytes + index * kTraceRecordBytes) + "): " + what);
}

}  // namespace

void check_trace_contents(const Trace& trace, std::string_view name) {
  std::unordered_set<BlockId> live;
  bool launched = false;
  LaunchSeq last_launch = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const Event& e = trace[i];
    switch (e.kind) {
      case EventKind::Alloc:
        if (e.b == 0 || e.b > kTraceMaxValue)
          refuse(name, i, "allocation of block " + hex(e.a) + " with size " + std::to_string(e.b) +
                              " (sizes are 1 to 2^48 bytes)");
        if (!live.insert(e.a).second) refuse(name, i, "duplicate allocation of live block " + hex(e.a));
        break;
      case EventKind::Free:
        if (live.erase(e.a) == 0) refuse(name, i, "free of unknown block " + hex(e.a));
        break;
      case EventKind::Launch:
        if (launched && e.a <= last_launch)
          refuse(name, i, "launch number " + std::to_string(e.a) + " after launch " + std::to_string(last_launch) +
                              " (launch numbers must increase)");
        if (e.b > kTraceMaxValue)
          refuse(name, i, "launch " + std::to_string(e.a) + " lasting " + std::to_string(e.b) +
                              " ns (at most 2^48 ns)");
        launched = true;
        last_launch = e.a;
        break;
      case EventKind::Use:
        if (!launched || e.b != last_launch)
          refuse(name, i, "use of block " + hex(e.a) + " by launch " + std::to_string(e.b) +
                              ", which is not the launch before it");
        if (!live.contains(e.a)) refuse(name, i, "use of unknown block " + hex(e.a) + " (not allocated, or freed)");
        break;
      case EventKind::Tag:
        if (!live.contains(e.a)) refuse(name, i, "tag of unknown block " + hex(e.a) + " (not allocated, or freed)");
        if (e.b > kNoLayer) refuse(name, i, "tag of block " + hex(e.a) + " with layer " + std::to_string(e.b) +
                                                " (layers are 32-bit)");
        break;
      case EventKind::CopyRate:
        if (e.a == 0 || e.a > kTraceMaxValue)
          refuse(name, i, "copy rate of " + std::to_string(e.a) + " bytes/s (rates are 1 to 2^48 bytes/s)");
        break;
      case EventKind::Sync:
      case EventKind::Step:
      case EventKind::Phase:
        break;
    }
  }
}

}  // namespace tierrt::policy
