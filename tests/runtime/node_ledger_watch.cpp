// The checker of the node ledger's end-to-end test (node_ranks_test.sh):
//   node_ledger_watch NAME BUDGET STOP
// opens (or creates, with BUDGET bytes) the ledger NAME, prints "ready",
// then samples what the ranks hold together until the file STOP exists,
// and prints "max BYTES samples COUNT budget BUDGET_SEEN".
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "runtime/node_ledger.h"

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  tierrt::NodeLedger ledger(argv[1], std::strtoull(argv[2], nullptr, 10));
  if (!ledger.ok()) {
    std::printf("%s\n", ledger.error().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  std::uint64_t most = 0, samples = 0;
  while (access(argv[3], F_OK) != 0) {
    const std::uint64_t held = ledger.held_by_all();
    if (held > most) most = held;
    ++samples;
    usleep(200);
  }
  std::printf("max %llu samples %llu budget %llu\n", static_cast<unsigned long long>(most),
              static_cast<unsigned long long>(samples), static_cast<unsigned long long>(ledger.budget()));
  return 0;
}
