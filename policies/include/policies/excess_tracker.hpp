// How far each launch of a step is over budget, as blocks are chosen to be off the
// device over ranges of launches: range add and maximum in O(log n), so that the
// planner can choose among thousands of blocks within its time limit.
#pragma once

#include <cstdint>
#include <vector>

namespace tierrt::policy {

class ExcessTracker {
 public:
  // excess[i] = bytes resident at launch i minus the budget (negative: headroom).
  explicit ExcessTracker(const std::vector<double>& excess);
  // From the bytes resident at each launch (StepTimeline::resident_profile) and the budget.
  static ExcessTracker over_budget(const std::vector<std::uint64_t>& resident, std::uint64_t budget);

  // Subtract `bytes` over launches [begin, end).
  void relieve(std::uint32_t begin, std::uint32_t end, double bytes);
  double max_over(std::uint32_t begin, std::uint32_t end) const;  // -inf for an empty range
  double max_overall() const { return n_ == 0 ? 0 : tree_[1]; }

 private:
  void add(std::uint32_t node, std::uint32_t lo, std::uint32_t hi, std::uint32_t b, std::uint32_t e, double v);
  double query(std::uint32_t node, std::uint32_t lo, std::uint32_t hi, std::uint32_t b, std::uint32_t e) const;

  std::uint32_t n_ = 0;
  std::vector<double> tree_, lazy_;
};

}  // namespace tierrt::policy
