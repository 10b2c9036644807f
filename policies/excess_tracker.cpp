#include "policies/excess_tracker.hpp"

#include <algorithm>
#include <limits>

namespace tierrt::policy {
namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}

ExcessTracker::ExcessTracker(const std::vector<double>& excess)
    : n_(static_cast<std::uint32_t>(excess.size())), tree_(4 * excess.size() + 4, kNegInf), lazy_(4 * excess.size() + 4, 0) {
  // Build bottom-up through the same recursion the queries use.
  struct Builder {
    const std::vector<double>& v;
    std::vector<double>& t;
    double build(std::uint32_t node, std::uint32_t lo, std::uint32_t hi) {
      if (hi - lo == 1) return t[node] = v[lo];
      const std::uint32_t mid = lo + (hi - lo) / 2;
      return t[node] = std::max(build(2 * node, lo, mid), build(2 * node + 1, mid, hi));
    }
  };
  if (n_ > 0) Builder{excess, tree_}.build(1, 0, n_);
}

ExcessTracker ExcessTracker::over_budget(const std::vector<std::uint64_t>& resident, std::uint64_t budget) {
  std::vector<double> excess(resident.size());
  for (std::size_t i = 0; i < resident.size(); ++i)
    excess[i] = static_cast<double>(resident[i]) - static_cast<double>(budget);
  return ExcessTracker(excess);
}

void ExcessTracker::add(std::uint32_t node, std::uint32_t lo, std::uint32_t hi, std::uint32_t b, std::uint32_t e,
                        double v) {
  if (e <= lo || hi <= b) return;
  if (b <= lo && hi <= e) {
    tree_[node] += v;
    lazy_[node] += v;
    return;
  }
  const std::uint32_t mid = lo + (hi - lo) / 2;
  add(2 * node, lo, mid, b, e, v);
  add(2 * node + 1, mid, hi, b, e, v);
  tree_[node] = std::max(tree_[2 * node], tree_[2 * node + 1]) + lazy_[node];
}

double ExcessTracker::query(std::uint32_t node, std::uint32_t lo, std::uint32_t hi, std::uint32_t b,
                            std::uint32_t e) const {
  if (e <= lo || hi <= b) return kNegInf;
  if (b <= lo && hi <= e) return tree_[node];
  const std::uint32_t mid = lo + (hi - lo) / 2;
  return std::max(query(2 * node, lo, mid, b, e), query(2 * node + 1, mid, hi, b, e)) + lazy_[node];
}

void ExcessTracker::relieve(std::uint32_t begin, std::uint32_t end, double bytes) {
  if (begin < end && n_ > 0) add(1, 0, n_, begin, std::min(end, n_), -bytes);
}

double ExcessTracker::max_over(std::uint32_t begin, std::uint32_t end) const {
  if (begin >= end || n_ == 0) return kNegInf;
  return query(1, 0, n_, begin, std::min(end, n_));
}

}  // namespace tierrt::policy
