#include "kernel_registry.h"

#include <map>
#include <mutex>

#include "common.h"

namespace simdev {

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const KernelInfo>> kernels;
  std::map<std::string, Function*> functions;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

size_t natural_alignment(size_t size) {
  size_t a = 1;
  while (a < size && a < 8) a <<= 1;
  return a;
}

}  // namespace

std::shared_ptr<const KernelInfo> Function::info() const {
  std::lock_guard lock(registry().mu);
  auto it = registry().kernels.find(name);
  return it == registry().kernels.end() ? nullptr : it->second;
}

const Function* find_function(const std::string& name) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (!r.kernels.count(name)) return nullptr;
  Function*& f = r.functions[name];
  if (!f) f = new Function{name};
  return f;
}

}  // namespace simdev

using namespace simdev;

SIMDEV_API int simdev_register_kernel(const simdev_kernel_desc* desc) {
  if (!desc || !desc->name || !*desc->name || !desc->fn) return -1;
  if (desc->num_params > 0 && !desc->param_sizes) return -1;
  auto info = std::make_shared<KernelInfo>();
  info->name = desc->name;
  info->fn = desc->fn;
  info->modeled_ns = desc->modeled_ns;
  size_t cursor = 0;
  for (unsigned i = 0; i < desc->num_params; ++i) {
    size_t size = desc->param_sizes[i];
    if (size == 0) return -1;
    size_t offset = desc->param_offsets ? desc->param_offsets[i] : round_up(cursor, natural_alignment(size));
    if (offset < cursor) return -1;  // parameters must not overlap
    info->sizes.push_back(size);
    info->offsets.push_back(offset);
    cursor = offset + size;
  }
  info->buffer_bytes = cursor;
  std::lock_guard lock(registry().mu);
  registry().kernels[info->name] = std::move(info);
  return 0;
}
