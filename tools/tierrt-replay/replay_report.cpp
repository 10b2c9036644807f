#include "replay_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "text_format.hpp"

namespace tierrt::replay {
namespace {

std::string percent_or_dash(double v) { return v < 0 ? "-" : format_number("%.1f%%", 100 * v); }

// An overhead as a signed percentage; "n/a" when there is no ratio.
std::string percent(double overhead) {
  return std::isfinite(overhead) ? format_number("%+.2f%%", 100 * overhead) : "n/a";
}

}  // namespace

void print_table(std::ostream& out, const ReportContext& ctx, const policy::Comparison& c) {
  out << "MODELED figures (discrete-event model, not measured)\n"
      << "config   " << ctx.config << "\n"
      << "link     " << ctx.link << "\n"
      << "steps    " << ctx.steps << " replayed; figures for the last (tierrt learns in the first)\n"
      << "compute  " << format_number("%.1f", c.compute_ns / 1e6) << " ms per step; peak without offload "
      << format_number("%.2f", c.peak_without_offload / kGiB) << " GiB; activations "
      << format_number("%.2f", c.activation_bytes / kGiB)
      << " GiB (" << format_number("%.2f", c.activation_bytes_at_peak / kGiB) << " GiB live at the peak)\n"
      << "budget   " << format_number("%.2f", c.budget / kGiB) << " GiB, " << ctx.budget << "\n"
      << "bound    ";
  if (c.bound.feasible)
    out << format_number("%.1f", c.bound.step_ns() / 1e6) << " ms (compute + "
        << format_number("%.2f", c.bound.stall_ns / 1e6)
        << " ms of stall no schedule avoids)\n";
  else
    out << "none: a single launch needs more than the budget\n";
  out << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-11s %9s %10s %8s %9s %9s %8s %7s %9s %7s %s\n", "policy", "peak GiB", "step ms",
                "vs none", "vs bound", "moved GiB", "act.off", "recomp", "prefetch", "demand", "budget");
  out << line;
  for (const auto& p : c.policies) {
    const auto& s = p.steady;
    const bool bounded = p.name != "none";
    std::snprintf(line, sizeof line, "%-11s %9.2f %10.1f %8s %9s %9.2f %8s %7s %9s %7u %s\n", p.name.c_str(),
                  s.peak_bytes / kGiB, s.step_ns / 1e6, percent(p.overhead_vs_none).c_str(),
                  c.bound.feasible && bounded && !p.recomputes ? percent(p.overhead_vs_bound).c_str() : "-",
                  (s.bytes_d2h + s.bytes_h2d) / kGiB, format_number("%.0f%%", 100 * p.activation_off).c_str(),
                  format_number("%.0f%%", 100 * p.activation_recomputed).c_str(),
                  percent_or_dash(s.prefetch_hit_rate()).c_str(), s.demand_fetches,
                  !bounded ? "n/a" : s.over_budget_bytes == 0 ? "held" : "EXCEEDED");
    out << line;
  }
  out << "\nmoved: D2H + H2D bytes; act.off: share of activation bytes that reached the host;\n"
         "recomp: share of activation bytes recomputed in backward (its time is in step ms; the\n"
         "bound covers copies of the recorded step only, so vs bound is - for those policies);\n"
         "prefetch: fetches complete when needed; demand: fetches nobody planned (for save_on_cpu\n"
         "every fetch is one: unpack copies on demand).\n";
}

void write_csv_header(std::ostream& out) {
  out << "# modeled figures from tierrt-replay (discrete-event model, not measured)\n"
      << "config,link,steps,modeled_budget_gib,policy,modeled_peak_hbm_gib,modeled_step_ms,modeled_compute_ms,"
         "modeled_bound_ms,modeled_overhead_vs_none,modeled_overhead_vs_bound,modeled_bytes_d2h_gib,"
         "modeled_bytes_h2d_gib,modeled_activation_off,modeled_activation_recomputed,modeled_recompute_ms,"
         "modeled_stream_copy_ms,"
         "modeled_prefetch_hit_rate,modeled_demand_fetches,modeled_within_budget\n";
}

void write_csv_rows(std::ostream& out, const ReportContext& ctx, const policy::Comparison& c) {
  auto quoted = [](const std::string& s) { return "\"" + s + "\""; };
  const std::string bound_ms = c.bound.feasible ? format_number("%.3f", c.bound.step_ns() / 1e6) : "";
  for (const auto& p : c.policies) {
    const auto& s = p.steady;
    const bool bounded = p.name != "none";
    out << quoted(ctx.config) << ',' << quoted(ctx.link) << ',' << ctx.steps << ','
        << format_number("%.4f", c.budget / kGiB) << ',' << p.name << ','
        << format_number("%.4f", s.peak_bytes / kGiB) << ',' << format_number("%.3f", s.step_ns / 1e6) << ','
        << format_number("%.3f", c.compute_ns / 1e6) << ',' << bound_ms << ','
        << format_number("%.5f", p.overhead_vs_none) << ','
        << (c.bound.feasible && bounded && !p.recomputes ? format_number("%.5f", p.overhead_vs_bound) : "") << ','
        << format_number("%.4f", s.bytes_d2h / kGiB) << ',' << format_number("%.4f", s.bytes_h2d / kGiB) << ','
        << format_number("%.4f", p.activation_off) << ',' << format_number("%.4f", p.activation_recomputed) << ','
        << format_number("%.3f", p.recompute_ns / 1e6) << ',' << format_number("%.3f", p.stream_copy_ns / 1e6) << ','
        << (s.prefetch_hit_rate() < 0 ? "" : format_number("%.4f", s.prefetch_hit_rate())) << ','
        << s.demand_fetches << ',' << (!bounded ? "" : s.over_budget_bytes == 0 ? "yes" : "no") << '\n';
  }
}

}  // namespace tierrt::replay
