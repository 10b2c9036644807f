#include "runtime/rank.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace tierrt::config {

namespace {

// A whole number 0..INT_MAX, digits only: a rank goes into file names, so
// nothing else is let through.
std::optional<int> parse_index(std::string_view v) {
  if (v.empty() || v.size() > 10) return std::nullopt;
  long long x = 0;
  for (const char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    x = x * 10 + (c - '0');
  }
  if (x > INT_MAX) return std::nullopt;
  return static_cast<int>(x);
}

// The first variable of `names` that holds an index; a set variable that
// holds none is named in *warning and skipped.
int first_index(GetenvFn getenv_fn, std::initializer_list<const char*> names, std::string* warning) {
  for (const char* name : names) {
    const char* v = getenv_fn(name);
    if (v == nullptr || *v == '\0') continue;
    if (auto x = parse_index(v)) return *x;
    if (!warning->empty()) *warning += "; ";
    *warning += refusal(name, v, "a whole number from 0, so it is ignored").substr(8);  // without "tierrt: "
  }
  return -1;
}

}  // namespace

RankInfo read_rank(GetenvFn getenv_fn) {
  if (!getenv_fn) getenv_fn = [](const char* n) -> const char* { return std::getenv(n); };
  RankInfo r;
  r.rank = first_index(getenv_fn, {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"}, &r.warning);
  r.local_rank = first_index(getenv_fn, {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"}, &r.warning);
  const int size =
      first_index(getenv_fn, {"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE"}, &r.warning);
  r.local_ranks = size > 0 ? size : 0;
  return r;
}

std::string short_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown";
  std::string h(buf);
  if (const auto dot = h.find('.'); dot != std::string::npos && dot > 0) h.resize(dot);
  for (char& c : h)
    if (c == '/') c = '_';
  return h;
}

}  // namespace tierrt::config
