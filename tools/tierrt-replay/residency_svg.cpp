#include "residency_svg.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "text_format.hpp"

namespace tierrt::replay {
namespace {

constexpr double kW = 960, kH = 540, kLeft = 70, kRight = 150, kTop = 50, kBottom = 50;
constexpr const char* kColors[] = {"#7f7f7f", "#d62728", "#9467bd", "#ff7f0e", "#2ca02c",
                                   "#e377c2", "#17becf", "#1f77b4", "#8c564b"};
constexpr std::size_t kMaxPoints = 1500;  // per line: the max in each bucket keeps the peaks visible

std::string num(double v) { return format_number("%.1f", v); }

std::string escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '<') o += "&lt;";
    else if (ch == '>') o += "&gt;";
    else if (ch == '&') o += "&amp;";
    else o += ch;
  }
  return o;
}

// Step-shaped residency, thinned to at most kMaxPoints buckets keeping each bucket's maximum.
std::vector<std::pair<double, double>> thin(const std::vector<std::pair<double, std::uint64_t>>& r, double t_end) {
  std::vector<std::pair<double, double>> out;
  if (r.empty()) return out;
  const double bucket = t_end / kMaxPoints;
  std::size_t i = 0;
  double prev = static_cast<double>(r.front().second);
  for (std::size_t k = 0; k < kMaxPoints && i < r.size(); ++k) {
    const double end = (k + 1) * bucket;
    double hi = prev;
    for (; i < r.size() && r[i].first < end; ++i) hi = std::max(hi, static_cast<double>(r[i].second)), prev = static_cast<double>(r[i].second);
    out.emplace_back(k * bucket, hi);
  }
  return out;
}

}  // namespace

void write_residency_svg(std::ostream& out, const ReportContext& ctx, const policy::Comparison& c) {
  double t_max = 1, y_max = static_cast<double>(c.budget);
  for (const auto& p : c.policies) {
    t_max = std::max(t_max, p.steady.step_ns);
    y_max = std::max(y_max, static_cast<double>(p.steady.peak_bytes));
  }
  y_max *= 1.08;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double t) { return kLeft + t / t_max * pw; };
  auto Y = [&](double b) { return kTop + ph - b / y_max * ph; };

  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kLeft << "\" y=\"22\" font-size=\"15\">MODELED device memory over one step: "
      << escape(ctx.config) << "</text>\n"
      << "<text x=\"" << kLeft << "\" y=\"40\" fill=\"#555\">" << escape(ctx.link) << "; budget "
      << num(c.budget / kGiB) << " GiB (" << escape(ctx.budget) << "); modeled, not measured</text>\n";
  // Axes and grid.
  for (int k = 0; k <= 5; ++k) {
    const double b = y_max * k / 5, y = Y(b);
    out << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << y << "\" y2=\"" << y
        << "\" stroke=\"#eee\"/><text x=\"" << kLeft - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
        << num(b / kGiB) << "</text>\n";
    const double t = t_max * k / 5, x = X(t);
    out << "<text x=\"" << x << "\" y=\"" << kTop + ph + 18 << "\" text-anchor=\"middle\">" << num(t / 1e6)
        << "</text>\n";
  }
  out << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kH - 10 << "\" text-anchor=\"middle\">modeled time (ms)</text>\n"
      << "<text transform=\"translate(18," << kTop + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << "modeled HBM (GiB)</text>\n"
      << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\"" << ph
      << "\" fill=\"none\" stroke=\"#333\"/>\n";
  // Budget.
  out << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << Y(static_cast<double>(c.budget))
      << "\" y2=\"" << Y(static_cast<double>(c.budget)) << "\" stroke=\"black\" stroke-dasharray=\"6,4\"/>\n";
  double legend_y = kTop + 10;
  out << "<text x=\"" << kLeft + pw + 10 << "\" y=\"" << legend_y << "\">- - budget</text>\n";
  std::size_t color = 0;
  for (const auto& p : c.policies) {
    const char* col = kColors[color++ % std::size(kColors)];
    const auto pts = thin(p.steady.residency, p.steady.step_ns);
    out << "<polyline fill=\"none\" stroke=\"" << col << "\" stroke-width=\"1.5\" points=\"";
    double prev_y = -1;
    for (const auto& [t, b] : pts) {
      if (prev_y >= 0) out << num(X(t)) << ',' << num(prev_y) << ' ';
      prev_y = Y(b);
      out << num(X(t)) << ',' << num(prev_y) << ' ';
    }
    out << "\"/>\n";
    legend_y += 18;
    out << "<line x1=\"" << kLeft + pw + 10 << "\" x2=\"" << kLeft + pw + 30 << "\" y1=\"" << legend_y - 4
        << "\" y2=\"" << legend_y - 4 << "\" stroke=\"" << col << "\" stroke-width=\"2\"/><text x=\""
        << kLeft + pw + 36 << "\" y=\"" << legend_y << "\">" << escape(p.name) << "</text>\n";
  }
  out << "</svg>\n";
}

}  // namespace tierrt::replay
