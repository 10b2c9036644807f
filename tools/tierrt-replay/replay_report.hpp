// The comparison as text table and CSV. Every figure is modeled and says so.
#pragma once

#include <ostream>
#include <string>

#include "policies/eval/policy_comparison.hpp"

namespace tierrt::replay {

struct ReportContext {
  std::string config;      // what was replayed
  std::string link;        // link preset and rates
  std::string budget;      // how the budget was chosen
  std::size_t steps = 0;   // steps replayed
};

void print_table(std::ostream& out, const ReportContext& ctx, const policy::Comparison& c);
void write_csv_header(std::ostream& out);
void write_csv_rows(std::ostream& out, const ReportContext& ctx, const policy::Comparison& c);

}  // namespace tierrt::replay
