#include "cli/svg_chart.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "fmt/format.h"

namespace dar::cli {
namespace {

constexpr double kWidth = 760;
constexpr double kHeight = 440;
constexpr double kLeft = 80;     // room for the y ticks and label
constexpr double kRight = 580;   // the plot's right edge; the legend is beyond it
constexpr double kTop = 40;      // room for the title
constexpr double kBottom = 380;  // the plot's bottom edge; x ticks and label below it

// Tableau's ten colours (distinct, and readable by most colour-blind people), then two more
// for scenarios that compare a dozen policies.
constexpr std::array<const char*, 12> kColours = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                  "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                                                  "#9c755f", "#bab0ac", "#222222", "#17becf"};

const char* Colour(size_t i) { return kColours[i % kColours.size()]; }

// The range an axis shows and its ticks.
struct Range {
  double lo = 0;
  double hi = 1;
  bool log = false;
  std::vector<double> ticks;
};

Range AxisRange(const Axis& axis, const std::vector<double>& values) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (double v : values) {
    if (!std::isfinite(v) || (axis.log && v <= 0)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) {
    lo = axis.log ? 1 : 0;
    hi = axis.log ? 10 : 1;
  }
  lo = axis.min.value_or(lo);
  hi = axis.max.value_or(hi);
  if (lo >= hi) {  // one value: a range around it
    if (axis.log) {
      lo /= 10;
      hi = lo * 100;
    } else {
      const double pad = lo == 0 ? 1 : std::abs(lo) / 2;
      lo -= pad;
      hi = lo + 3 * pad;
    }
    // Never past a bound the axis sets (all zeros on an axis from 0: 0 to 2, not -1 to 2).
    if (axis.min && lo < *axis.min) {
      hi += *axis.min - lo;
      lo = *axis.min;
    }
    if (axis.max && hi > *axis.max) hi = *axis.max;
  }
  Range r{lo, hi, axis.log, axis.log ? LogTicks(lo, hi) : LinearTicks(lo, hi)};
  if (!axis.min) r.lo = r.ticks.front();
  if (!axis.max) r.hi = r.ticks.back();
  const double slack = (axis.log ? 1e-9 * r.lo : 1e-9 * (r.hi - r.lo));
  std::erase_if(r.ticks, [&](double t) { return t < r.lo - slack || t > r.hi + slack; });
  return r;
}

// Data to pixels along one axis, clamped to the plot.
struct Scale {
  Range range;
  double px0;
  double px1;

  double operator()(double v) const {
    auto at = [this](double x) { return range.log ? std::log10(x) : x; };
    const double f = (at(v) - at(range.lo)) / (at(range.hi) - at(range.lo));
    return px0 + std::clamp(f, 0.0, 1.0) * (px1 - px0);
  }
};

std::string Open() {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      kWidth, kHeight);
}

std::string Title(const std::string& title) {
  return fmt::format(
      "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" "
      "font-weight=\"bold\">{}</text>\n",
      (kLeft + kRight) / 2, XmlEscape(title));
}

// The x axis: ticks, grid lines and labels.
std::string XAxis(const Scale& x, const std::string& label) {
  std::string out;
  for (double t : x.range.ticks) {
    const double px = x(t);
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e5e5e5\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px, kTop, kBottom, kBottom + 16, XmlEscape(TickLabel(t)));
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     (kLeft + kRight) / 2, kBottom + 40, XmlEscape(label));
  return out;
}

// The y axis: ticks, grid lines and labels.
std::string YAxis(const Scale& y, const std::string& label) {
  std::string out;
  for (double t : y.range.ticks) {
    const double py = y(t);
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#e5e5e5\"/>\n"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, py, kRight, kLeft - 6, py + 4, XmlEscape(TickLabel(t)));
  }
  const double mid = (kTop + kBottom) / 2;
  out += fmt::format(
      "<text x=\"20\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {0})\">{1}"
      "</text>\n",
      mid, XmlEscape(label));
  return out;
}

std::string Frame() {
  return fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", kLeft,
      kTop, kRight - kLeft, kBottom - kTop);
}

// A legend entry per name, down the right of the plot.
std::string Legend(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    const double y = kTop + 10 + 20 * static_cast<double>(i);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{}\"/>\n"
        "<text x=\"{}\" y=\"{}\">{}</text>\n",
        kRight + 16, y - 9, Colour(i), kRight + 36, y, XmlEscape(names[i]));
  }
  return out;
}

}  // namespace

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<double> LinearTicks(double lo, double hi, int target) {
  const double raw = (hi - lo) / (target - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
  const auto first = static_cast<int64_t>(std::floor(lo / step + 1e-9));
  const auto last = static_cast<int64_t>(std::ceil(hi / step - 1e-9));
  std::vector<double> ticks;
  for (int64_t i = first; i <= last; ++i) {
    const double t = static_cast<double>(i) * step;
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::vector<double> LogTicks(double lo, double hi) {
  std::vector<double> ticks;
  const auto first = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const auto last = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  for (int k = first; k <= std::max(last, first + 1); ++k) ticks.push_back(std::pow(10.0, k));
  return ticks;
}

std::string TickLabel(double v) { return v == 0 ? "0" : fmt::format("{:.4g}", v); }

std::string RenderLineChart(const LineChart& chart) {
  std::vector<double> xs;
  std::vector<double> ys;
  for (const LineSeries& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      xs.push_back(x);
      ys.push_back(y);
    }
  }
  const Scale x{AxisRange(chart.x, xs), kLeft, kRight};
  const Scale y{AxisRange(chart.y, ys), kBottom, kTop};
  std::string out = Open() + Title(chart.title) + XAxis(x, chart.x.label) + YAxis(y, chart.y.label);
  std::vector<std::string> names;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const LineSeries& s = chart.series[i];
    names.push_back(s.name);
    std::string points;
    double last_py = std::numeric_limits<double>::quiet_NaN();
    for (const auto& [vx, vy] : s.points) {
      if (!std::isfinite(vx) || !std::isfinite(vy)) continue;
      if ((chart.x.log && vx <= 0) || (chart.y.log && vy <= 0)) continue;
      const double px = x(vx);
      const double py = y(vy);
      if (chart.steps && std::isfinite(last_py))
        points += fmt::format("{:.1f},{:.1f} ", px, last_py);
      points += fmt::format("{:.1f},{:.1f} ", px, py);
      last_py = py;
    }
    if (!points.empty()) points.pop_back();
    out += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"><title>{}</title>"
        "</polyline>\n",
        Colour(i), points, XmlEscape(s.name));
  }
  return out + Frame() + Legend(names) + "</svg>\n";
}

std::string RenderBarChart(const BarChart& chart) {
  std::vector<double> ys = {0};
  for (const BarSeries& s : chart.series) {
    ys.insert(ys.end(), s.values.begin(), s.values.end());
    for (const auto& [low, high] : s.errors) ys.push_back(high);
  }
  Axis y_axis{chart.y_label};
  y_axis.min = 0;
  const Scale y{AxisRange(y_axis, ys), kBottom, kTop};
  std::string out = Open() + Title(chart.title) + YAxis(y, chart.y_label);
  const double group =
      (kRight - kLeft) / static_cast<double>(std::max<size_t>(1, chart.categories.size()));
  const double bar = group * 0.8 / static_cast<double>(std::max<size_t>(1, chart.series.size()));
  std::vector<std::string> names;
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double left = kLeft + group * static_cast<double>(c) + group * 0.1;
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       kLeft + group * (static_cast<double>(c) + 0.5), kBottom + 16,
                       XmlEscape(chart.categories[c]));
    for (size_t i = 0; i < chart.series.size(); ++i) {
      const BarSeries& s = chart.series[i];
      const double v = s.values[c];
      if (!std::isfinite(v)) continue;
      const double bx = left + bar * static_cast<double>(i);
      const double top = y(std::max(v, 0.0));
      out += fmt::format(
          "<rect class=\"bar\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "fill=\"{}\"><title>{}: {}</title></rect>\n",
          bx, top, bar * 0.9, kBottom - top, Colour(i), XmlEscape(s.name), TickLabel(v));
      if (s.errors.empty()) continue;
      const auto [low, high] = s.errors[c];
      if (!std::isfinite(low) || !std::isfinite(high)) continue;
      const double cx = bx + bar * 0.45;
      out += fmt::format(
          "<path d=\"M{0:.1f},{1:.1f}V{2:.1f}M{3:.1f},{1:.1f}H{4:.1f}M{3:.1f},{2:.1f}H{4:.1f}\" "
          "stroke=\"#222\" fill=\"none\"/>\n",
          cx, y(low), y(high), cx - bar * 0.2, cx + bar * 0.2);
    }
  }
  for (const BarSeries& s : chart.series) names.push_back(s.name);
  return out + Frame() + Legend(names) + "</svg>\n";
}

}  // namespace dar::cli
