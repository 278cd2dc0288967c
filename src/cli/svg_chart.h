// Small SVG charts for `dar-sim report`: lines or steps with axes, ticks and a legend (linear
// or log x and y), and grouped bars with error bars. Self-contained SVG 1.1 text, no script
// and no external style, so a browser, an image viewer or a Markdown page shows it as it is.
// Pure functions; thread-compatible.
#ifndef DAR_CLI_SVG_CHART_H_
#define DAR_CLI_SVG_CHART_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dar::cli {

// `text` with &, <, >, " and ' escaped, for XML text and attribute values.
std::string XmlEscape(std::string_view text);

// Tick values covering [lo, hi] at a step of 1, 2 or 5 times a power of ten, the one nearest
// (hi - lo) / (target - 1); the first at or below lo, the last at or above hi.
// REQUIRES: lo < hi, target >= 2.
std::vector<double> LinearTicks(double lo, double hi, int target = 5);
// The powers of ten covering [lo, hi]: the first at or below lo, the last at or above hi.
// REQUIRES: 0 < lo < hi.
std::vector<double> LogTicks(double lo, double hi);
// A tick's label: the shortest of fixed or exponent notation, at most 4 significant digits
// ("0.25", "1e-05", "2000").
std::string TickLabel(double v);

struct Axis {
  std::string label;
  bool log = false;  // log10 scale: values <= 0 are left out
  // The range shown; unset: the data's, widened to whole ticks.
  std::optional<double> min;
  std::optional<double> max;
};

struct LineSeries {
  std::string name;                               // in the legend
  std::vector<std::pair<double, double>> points;  // (x, y) in x order; NaNs are left out
};

struct LineChart {
  std::string title;
  Axis x;
  Axis y;
  bool steps = false;  // each y held until the next point's x (a CDF, counts per interval)
  std::vector<LineSeries> series;
};

// One <polyline> per series (empty when it has no point), in the order given.
std::string RenderLineChart(const LineChart& chart);

struct BarSeries {
  std::string name;            // in the legend
  std::vector<double> values;  // one per category; NaN: no bar
  // Error bars: empty for none, else one (low, high) per category; NaN ends: none for it.
  std::vector<std::pair<double, double>> errors;
};

// Grouped bars: a group per category along x, a bar per series in every group, y from 0.
struct BarChart {
  std::string title;
  std::string y_label;
  std::vector<std::string> categories;
  std::vector<BarSeries> series;  // REQUIRES: values (and errors, if any) sized as categories
};

// One <rect class="bar"> per bar with a value.
std::string RenderBarChart(const BarChart& chart);

}  // namespace dar::cli

#endif  // DAR_CLI_SVG_CHART_H_
