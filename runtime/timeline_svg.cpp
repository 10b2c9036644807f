#include "timeline_svg.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "policies/lifetime_class.hpp"
#include "runtime/config.h"
#include "log.h"

namespace tierrt {

namespace {

constexpr double kLeft = 90, kRight = 780, kTop = 50, kBottom = 400, kWidth = 1000, kHeight = 460;
constexpr const char* kClassColors[8] = {"#bbbbbb", "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1",
                                         "#76b7b2", "#edc948", "#ff9da7"};

const char* class_name(int c) {
  return c == 0 ? "unclassified" : policy::to_string(static_cast<policy::LifetimeClass>(c - 1));
}

struct Unit {
  const char* name;
  double size;
};

// The largest unit the axis' top is at least two of.
Unit bytes_unit(double max) noexcept {
  if (max >= 2.0 * (1ull << 30)) return {"GiB", double(1ull << 30)};
  if (max >= 2.0 * (1ull << 20)) return {"MiB", double(1ull << 20)};
  return {"KiB", 1024.0};
}
Unit time_unit(double max_ns) noexcept {
  if (max_ns >= 2e9) return {"s", 1e9};
  if (max_ns >= 2e6) return {"ms", 1e6};
  return {"us", 1e3};
}

class Svg {
 public:
  explicit Svg(FILE* f) : f_(f) {}
  template <class... A>
  void out(const char* fmt, A... a) {
    std::fprintf(f_, fmt, a...);
  }

 private:
  FILE* f_;
};

}  // namespace

double axis_step(double max, int ticks) noexcept {
  if (!(max > 0)) return 1;
  const double raw = max / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

bool write_timeline_svg(const std::string& where, const RunMonitor::Snapshot& run) {
  const std::vector<TimelinePoint>& pts = run.points;
  const std::string path = config::expand_output_path(where);
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    TIERRT_LOG(Error, "cannot write TIERRT_PLOT=\"%s\"", where.c_str());
    return false;
  }
  double tmax = 1, ymax = static_cast<double>(run.device_budget);
  for (const TimelinePoint& p : pts) {
    double stacked = 0;
    for (std::uint64_t b : p.class_bytes) stacked += static_cast<double>(b);
    ymax = std::max({ymax, stacked, static_cast<double>(p.device_used), static_cast<double>(p.host_used)});
    tmax = std::max(tmax, static_cast<double>(p.ns));
  }
  ymax = std::max(ymax, 1024.0);
  const Unit bu = bytes_unit(ymax), tu = time_unit(tmax);
  const double ystep = axis_step(ymax / bu.size, 5), tstep = axis_step(tmax / tu.size, 8);
  const double ytop = std::ceil(ymax / bu.size / ystep) * ystep * bu.size;
  const double tright = std::ceil(tmax / tu.size / tstep) * tstep * tu.size;
  auto x = [&](double ns) { return kLeft + (kRight - kLeft) * ns / tright; };
  auto y = [&](double bytes) { return kBottom - (kBottom - kTop) * bytes / ytop; };

  Svg s(f);
  s.out("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  s.out("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
        "font-family=\"sans-serif\" font-size=\"12\">\n", kWidth, kHeight, kWidth, kHeight);
  s.out("<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  // The sampler's period is what it asks for; a loaded machine stretches it.
  const double spacing_ms =
      pts.size() > 1 ? static_cast<double>(pts.back().ns - pts.front().ns) / 1e6 / static_cast<double>(pts.size() - 1)
                     : static_cast<double>(run.period_ns) / 1e6;
  s.out("<text x=\"%g\" y=\"24\" font-size=\"16\">tierrt memory timeline (pid %d): %zu samples, one every %.2g ms%s"
        "</text>\n", kLeft, static_cast<int>(getpid()), pts.size(), spacing_ms,
        run.downsamplings ? " (downsampled to fit)" : "");
  // Axes and grid.
  s.out("<g id=\"axes\" stroke=\"#999\" stroke-width=\"1\">\n");
  for (double v = 0; v <= ytop / bu.size + ystep / 2; v += ystep)
    s.out("<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#eee\"/>"
          "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\" stroke=\"none\" fill=\"black\">%g %s</text>\n",
          kLeft, y(v * bu.size), kRight, y(v * bu.size), kLeft - 6, y(v * bu.size) + 4, v, bu.name);
  for (double t = 0; t <= tright / tu.size + tstep / 2; t += tstep)
    s.out("<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\"/>"
          "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\" stroke=\"none\" fill=\"black\">%g %s</text>\n",
          x(t * tu.size), kBottom, x(t * tu.size), kBottom + 5, x(t * tu.size), kBottom + 20, t, tu.name);
  s.out("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\"/><line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\"/>\n", kLeft,
        kTop, kLeft, kBottom, kLeft, kBottom, kRight, kBottom);
  s.out("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\" stroke=\"none\" fill=\"black\">time since tierrt started</text>\n",
        (kLeft + kRight) / 2, kBottom + 40);
  s.out("</g>\n");
  // Live bytes by class, stacked (the lower classes first).
  std::vector<double> below(pts.size(), 0.0);
  s.out("<g id=\"classes\">\n");
  for (int c = 0; c < 8; ++c) {
    bool any = false;
    for (const TimelinePoint& p : pts) any |= p.class_bytes[c] != 0;
    if (!any) continue;
    s.out("<polygon id=\"class-%s\" fill=\"%s\" fill-opacity=\"0.75\" stroke=\"none\" points=\"", class_name(c),
          kClassColors[c]);
    for (std::size_t i = 0; i < pts.size(); ++i)
      s.out("%.1f,%.1f ", x(double(pts[i].ns)), y(below[i] + double(pts[i].class_bytes[c])));
    for (std::size_t i = pts.size(); i-- > 0;) s.out("%.1f,%.1f ", x(double(pts[i].ns)), y(below[i]));
    s.out("\"/>\n");
    for (std::size_t i = 0; i < pts.size(); ++i) below[i] += double(pts[i].class_bytes[c]);
  }
  s.out("</g>\n");
  auto series = [&](const char* id, const char* color, const char* dash, auto value) {
    s.out("<polyline id=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", id, color, dash);
    for (const TimelinePoint& p : pts) s.out("%.1f,%.1f ", x(double(p.ns)), y(double(value(p))));
    s.out("\"/>\n");
  };
  series("device", "#222222", "", [](const TimelinePoint& p) { return p.device_used; });
  series("host-tier", "#e15759", " stroke-dasharray=\"6,3\"", [](const TimelinePoint& p) { return p.host_used; });
  s.out("<line id=\"budget\" x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#d00\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"2,2\"/>\n", kLeft, y(double(run.device_budget)), kRight, y(double(run.device_budget)));
  // Step boundaries, and what moved between two samples.
  s.out("<g id=\"steps\" stroke=\"#555\" stroke-dasharray=\"3,4\">\n");
  for (const TimelinePoint& p : pts)
    if (p.steps) s.out("<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\"/>\n", x(double(p.ns)), kTop, x(double(p.ns)), kBottom);
  s.out("</g>\n<g id=\"spills\" fill=\"#e15759\">\n");
  for (const TimelinePoint& p : pts)
    if (p.spilled) s.out("<path d=\"M%.1f %g l-4 -8 h8 z\"><title>%.2f MiB spilled</title></path>\n", x(double(p.ns)),
                         kTop - 2, double(p.spilled) / 1048576.0);
  s.out("</g>\n<g id=\"fetches\" fill=\"#59a14f\">\n");
  for (const TimelinePoint& p : pts)
    if (p.fetched) s.out("<path d=\"M%.1f %g l-4 8 h8 z\"><title>%.2f MiB fetched</title></path>\n", x(double(p.ns)),
                         kBottom + 2, double(p.fetched) / 1048576.0);
  s.out("</g>\n");
  // Legend.
  double ly = kTop;
  auto legend = [&](const char* color, const char* label, bool line) {
    if (line) s.out("<line x1=\"795\" y1=\"%.1f\" x2=\"815\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>", ly - 4, ly - 4, color);
    else s.out("<rect x=\"795\" y=\"%.1f\" width=\"20\" height=\"10\" fill=\"%s\"/>", ly - 10, color);
    s.out("<text x=\"822\" y=\"%.1f\">%s</text>\n", ly, label);
    ly += 18;
  };
  s.out("<g id=\"legend\">\n");
  for (int c = 7; c >= 0; --c) {
    bool any = false;
    for (const TimelinePoint& p : pts) any |= p.class_bytes[c] != 0;
    if (any) legend(kClassColors[c], (std::string(class_name(c)) + " (live, either tier)").c_str(), false);
  }
  legend("#222222", "device bytes in use", true);
  legend("#d00", "device budget", true);
  legend("#e15759", "host-tier bytes", true);
  legend("#555", "step boundary", true);
  legend("#e15759", "\u25bc spill (top)", false);
  legend("#59a14f", "\u25b2 fetch (bottom)", false);
  s.out("</g>\n</svg>\n");
  if (std::fclose(f) != 0) {
    TIERRT_LOG(Error, "cannot write TIERRT_PLOT=\"%s\"", where.c_str());
    return false;
  }
  return true;
}

}  // namespace tierrt
