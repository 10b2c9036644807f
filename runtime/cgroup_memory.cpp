#include "cgroup_memory.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

namespace tierrt {

namespace {

// The limit in one file: 0 for "max", a missing file or anything else that
// is not a number.
std::uint64_t read_limit(const std::string& file) {
  std::ifstream in(file);
  std::string v;
  if (!(in >> v) || v.empty() || v.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::strtoull(v.c_str(), nullptr, 10);
}

// The lowest limit in `file_name` from `dir` (root + cgroup path) up to the
// root. In a cgroup namespace the listed path may not exist under the
// mount: its missing levels are skipped and the root is read.
std::uint64_t lowest_limit(const std::string& root, std::string path, const char* file_name) {
  std::uint64_t lowest = 0;
  while (true) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const std::string dir = path == "/" || path.empty() ? root : root + path;
    if (const std::uint64_t l = read_limit(dir + "/" + file_name); l != 0 && (lowest == 0 || l < lowest)) lowest = l;
    const auto slash = path.rfind('/');
    if (path.empty() || path == "/" || slash == std::string::npos) break;
    path.resize(slash == 0 ? 1 : slash);
  }
  return lowest;
}

bool names_memory(std::string_view controllers) {
  while (!controllers.empty()) {
    const auto comma = controllers.find(',');
    if (controllers.substr(0, comma) == "memory") return true;
    if (comma == std::string_view::npos) break;
    controllers.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

std::uint64_t cgroup_memory_limit(const std::string& proc_cgroup, const std::string& cgroup_root) {
  std::ifstream in(proc_cgroup);
  std::string line;
  std::uint64_t v1 = 0, v2 = 0;
  // Lines are "ID:CONTROLLERS:PATH"; v2's is "0::PATH".
  while (std::getline(in, line)) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string_view controllers = std::string_view(line).substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (controllers.empty() && line.compare(0, a, "0") == 0)
      v2 = lowest_limit(cgroup_root, path, "memory.max");
    else if (names_memory(controllers))
      v1 = lowest_limit(cgroup_root + "/memory", path, "memory.limit_in_bytes");
  }
  if (v1 == 0) return v2;
  return v2 == 0 || v1 < v2 ? v1 : v2;
}

}  // namespace tierrt
