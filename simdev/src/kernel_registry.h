// Host kernels registered through simdev.h, found by name the way a GPU
// program finds kernels in a loaded module.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "simdev/simdev.h"

namespace simdev {

struct KernelInfo {
  std::string name;
  simdev_kernel_fn fn = nullptr;
  std::vector<size_t> sizes, offsets;
  size_t buffer_bytes = 0;  // end of the last parameter
  unsigned long long modeled_ns = 0;
};

// One per registered name, for the life of the process, so that handles
// stay meaningful across re-registration. Module and library handles
// (code_handles.h) point at these.
struct Function {
  std::string name;
  std::shared_ptr<const KernelInfo> info() const;
};

// The function registered under `name`, or null.
const Function* find_function(const std::string& name);

}  // namespace simdev
