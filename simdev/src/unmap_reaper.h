// Tears down private mappings that nothing refers to any more on a thread of
// its own. Unmapping a populated 64 MiB mapping costs Linux milliseconds
// (every page-table entry is cleared), which cuMemUnmap on a GPU does not
// cost its caller: simdev moves such a mapping out of the device VA at once
// (mremap moves whole page tables) and leaves its teardown to this thread.
#pragma once

#include <cstdint>

namespace simdev {

// munmap(va, size), now or soon; the range must be simdev's own and unused.
void unmap_later(uint64_t va, uint64_t size);

}  // namespace simdev
