#include "policies/trigger_table.hpp"

#include <algorithm>

namespace tierrt::policy {

TriggerTable::TriggerTable(std::vector<Trigger> triggers, std::uint32_t op_count) : triggers_(std::move(triggers)) {
  std::erase_if(triggers_, [&](const Trigger& t) { return t.op >= op_count; });
  std::stable_sort(triggers_.begin(), triggers_.end(), [](const Trigger& a, const Trigger& b) { return a.op < b.op; });
  first_.assign(op_count + 1, 0);
  for (const Trigger& t : triggers_) ++first_[t.op + 1];
  for (std::uint32_t i = 0; i < op_count; ++i) first_[i + 1] += first_[i];
}

std::span<const Trigger> TriggerTable::at(std::uint32_t op) const {
  if (op + 1 >= first_.size()) return {};
  return {triggers_.data() + first_[op], first_[op + 1] - first_[op]};
}

std::span<const Trigger> TriggerTable::between(std::uint32_t first_op, std::uint32_t last_op) const {
  if (first_op > last_op || first_op + 1 >= first_.size()) return {};
  const std::uint32_t end = std::min<std::uint32_t>(last_op + 1, static_cast<std::uint32_t>(first_.size() - 1));
  return {triggers_.data() + first_[first_op], first_[end] - first_[first_op]};
}

}  // namespace tierrt::policy
