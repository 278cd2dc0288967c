#include "train/learning_curve.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "fmt/format.h"

namespace dar::train {
namespace {

std::string Num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : ""; }

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

struct Series {
  std::vector<double> y;
  std::string color;
  bool dashed;
  std::string label;
};

// "Nice" tick step for a range: 1, 2, 2.5 or 5 times a power of ten, about `n` ticks.
double TickStep(double span, int n) {
  const double raw = span / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

// One panel: axes with ticks and labels in the box (x0, y0, w, h), the series as polylines.
void Panel(std::string& svg, const std::vector<double>& x, const std::vector<Series>& series,
           const std::string& y_label, double x0, double y0, double w, double h) {
  double lo = INFINITY, hi = -INFINITY;
  for (const Series& s : series) {
    for (double v : s.y) {
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-9 * std::max(1.0, std::abs(hi))) {
    const double pad = std::max(1e-3, std::abs(hi) * 0.01);
    lo -= pad;
    hi += pad;
  }
  const double margin = (hi - lo) * 0.05;
  lo -= margin;
  hi += margin;
  const double xmin = x.empty() ? 0 : x.front();
  const double xmax = x.size() < 2 ? xmin + 1 : x.back();
  auto px = [&](double v) { return x0 + (v - xmin) / (xmax - xmin) * w; };
  auto py = [&](double v) { return y0 + h - (v - lo) / (hi - lo) * h; };

  svg += fmt::format(
      "<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='none' stroke='#333'/>\n",
      x0, y0, w, h);
  const double ystep = TickStep(hi - lo, 5);
  for (double t = std::ceil(lo / ystep) * ystep; t <= hi; t += ystep) {
    svg += fmt::format(
        "<line x1='{0:.1f}' y1='{1:.1f}' x2='{2:.1f}' y2='{1:.1f}' stroke='#ddd'/>"
        "<text x='{3:.1f}' y='{4:.1f}' font-size='11' text-anchor='end'>{5}</text>\n",
        x0, py(t), x0 + w, x0 - 6, py(t) + 4, fmt::format("{:.4g}", t));
  }
  const double xstep = std::max(1.0, TickStep(xmax - xmin, 8));
  for (double t = std::ceil(xmin / xstep) * xstep; t <= xmax + 1e-9; t += xstep) {
    svg += fmt::format(
        "<line x1='{0:.1f}' y1='{1:.1f}' x2='{0:.1f}' y2='{2:.1f}' stroke='#333'/>"
        "<text x='{0:.1f}' y='{3:.1f}' font-size='11' text-anchor='middle'>{4}</text>\n",
        px(t), y0 + h, y0 + h + 5, y0 + h + 18, fmt::format("{:g}", t));
  }
  svg += fmt::format(
      "<text x='{:.1f}' y='{:.1f}' font-size='12' text-anchor='middle'>iteration</text>\n",
      x0 + w / 2, y0 + h + 34);
  svg += fmt::format(
      "<text transform='translate({:.1f},{:.1f}) rotate(-90)' font-size='12' "
      "text-anchor='middle'>{}</text>\n",
      x0 - 52, y0 + h / 2, Escape(y_label));
  // The legend sits above the panel, right-aligned, so it never hides a curve.
  double legend_x = x0 + w - 170.0 * static_cast<double>(series.size());
  const double legend_y = y0 - 10;
  for (const Series& s : series) {
    std::string points;
    for (size_t i = 0; i < x.size() && i < s.y.size(); ++i) {
      if (std::isfinite(s.y[i])) points += fmt::format("{:.1f},{:.1f} ", px(x[i]), py(s.y[i]));
    }
    const std::string dash = s.dashed ? " stroke-dasharray='6,4'" : "";
    svg += fmt::format("<polyline points='{}' fill='none' stroke='{}' stroke-width='2'{}/>\n",
                       points, s.color, dash);
    svg += fmt::format(
        "<line x1='{0:.1f}' y1='{1:.1f}' x2='{2:.1f}' y2='{1:.1f}' stroke='{3}' "
        "stroke-width='2'{4}/><text x='{5:.1f}' y='{6:.1f}' font-size='11'>{7}</text>\n",
        legend_x, legend_y, legend_x + 25, s.color, dash, legend_x + 30, legend_y + 4,
        Escape(s.label));
    legend_x += 170;
  }
}

}  // namespace

std::string LearningCurveCsv(const std::vector<IterationRecord>& records) {
  std::string csv =
      "iteration,episodes,decisions,mean_reward,analytic_reward,fct_mean_s,fct_p99_s,"
      "latency_p99_s,completion_mean_s,metric_ratio,policy_loss,value_loss,entropy,approx_kl,"
      "clip_fraction,epochs,wall_s\n";
  for (const IterationRecord& r : records) {
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.iteration,
                       r.episodes, r.decisions, Num(r.mean_reward), Num(r.analytic_reward),
                       Num(r.fct_mean_s), Num(r.fct_p99_s), Num(r.latency_p99_s),
                       Num(r.completion_mean_s), Num(r.metric_ratio), Num(r.ppo.policy_loss),
                       Num(r.ppo.value_loss), Num(r.ppo.entropy), Num(r.ppo.approx_kl),
                       Num(r.ppo.clip_fraction), r.ppo.epochs, Num(r.wall_s));
  }
  return csv;
}

std::string LearningCurveSvg(const std::vector<IterationRecord>& records,
                             const std::string& title) {
  const double width = 760, panel_h = 230;
  std::vector<double> x, reward, analytic, ratio, one;
  for (const IterationRecord& r : records) {
    x.push_back(r.iteration);
    reward.push_back(r.mean_reward);
    analytic.push_back(r.analytic_reward);
    ratio.push_back(r.metric_ratio);
    one.push_back(1.0);
  }
  std::string svg = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{0}' height='{1}' viewBox='0 0 {0} {1}' "
      "font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{2}' y='22' font-size='15' text-anchor='middle'>{3}</text>\n",
      width, 2 * panel_h + 180, width / 2, Escape(title));
  Panel(svg, x,
        {{reward, "#1f77b4", false, "learned policy"},
         {analytic, "#888888", true, "analytic engine"}},
        "mean reward per decision", 80, 60, width - 110, panel_h);
  Panel(svg, x,
        {{ratio, "#d62728", false, "learned / analytic"}, {one, "#888888", true, "analytic = 1"}},
        "episode metrics / analytic (lower is better)", 80, panel_h + 130, width - 110, panel_h);
  svg += "</svg>\n";
  return svg;
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(path + ": cannot write");
  return absl::OkStatus();
}

}  // namespace dar::train
