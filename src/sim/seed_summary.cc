#include "sim/seed_summary.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "sim/stats.h"

namespace dar::sim {
namespace {

using Json = nlohmann::json;

// The first of `values` that is not null, or null if all are.
const Json* Representative(const std::vector<const Json*>& values) {
  for (const Json* v : values) {
    if (!v->is_null()) return v;
  }
  return nullptr;
}

// The keys of the objects among `values`, first seen first: a metric that one run lacks (or
// reports as null) is still summarised over the runs that have it.
std::vector<std::string> UnionKeys(const std::vector<const Json*>& values) {
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (const Json* v : values) {
    if (!v->is_object()) continue;
    for (const auto& [k, inner] : v->items()) {
      if (seen.insert(k).second) keys.push_back(k);
    }
  }
  return keys;
}

std::vector<const Json*> Member(const std::vector<const Json*>& values, const std::string& k) {
  std::vector<const Json*> inner;
  for (const Json* run : values) {
    if (run->is_object() && run->contains(k)) inner.push_back(&(*run)[k]);
  }
  return inner;
}

// The mean of `values` as MeanOfRuns takes it (see its comment).
Json MeanOf(const std::vector<const Json*>& values) {
  const Json* first = Representative(values);
  if (first == nullptr) return nullptr;
  if (first->is_boolean()) {
    bool all = true;
    for (const Json* v : values) all = all && v->is_boolean() && v->get<bool>();
    return all;
  }
  if (first->is_number()) {
    double sum = 0;
    int n = 0;
    for (const Json* v : values) {
      if (v->is_number()) sum += v->get<double>(), ++n;
    }
    return sum / n;
  }
  if (first->is_object()) {
    Json out = Json::object();
    for (const std::string& k : UnionKeys(values)) out[k] = MeanOf(Member(values, k));
    return out;
  }
  return *first;
}

Json Ends(const MeanInterval& m) {
  if (std::isnan(m.low)) return Json::array({nullptr, nullptr});
  return Json::array({m.low, m.high});
}

// The shape of the values' mean with every number replaced by its interval over `values`.
Json IntervalOf(const std::vector<const Json*>& values) {
  const Json* first = Representative(values);
  if (first != nullptr && first->is_number()) {
    std::vector<double> xs;
    for (const Json* v : values) {
      if (v->is_number()) xs.push_back(v->get<double>());
    }
    return Ends(MeanCi95(xs));
  }
  Json out = Json::object();
  for (const std::string& k : UnionKeys(values)) {
    const std::vector<const Json*> inner = Member(values, k);
    const Json* rep = Representative(inner);
    if (rep == nullptr || (!rep->is_number() && !rep->is_object())) continue;
    Json ci = IntervalOf(inner);
    if (!ci.is_object() || !ci.empty()) out[k] = std::move(ci);
  }
  return out;
}

// For every number of the runs' metrics (dotted path), how many of the `total` runs lack it,
// where any do.
void CountMissing(const std::vector<const Json*>& values, size_t total, const std::string& prefix,
                  Json& out) {
  for (const std::string& k : UnionKeys(values)) {
    const std::vector<const Json*> inner = Member(values, k);
    const Json* rep = Representative(inner);
    if (rep == nullptr) continue;
    if (rep->is_object()) {
      CountMissing(inner, total, prefix + k + ".", out);
    } else if (rep->is_number()) {
      size_t have = 0;
      for (const Json* v : inner) have += v->is_number();
      if (have < total) out[prefix + k] = total - have;
    }
  }
}

// Every number in `metrics`, at any depth, under its dotted path, in key order.
void FlattenNumbers(const Json& metrics, const std::string& prefix,
                    std::vector<std::pair<std::string, double>>& out) {
  for (const auto& [k, v] : metrics.items()) {
    if (v.is_number()) {
      out.emplace_back(prefix + k, v.get<double>());
    } else if (v.is_object()) {
      FlattenNumbers(v, prefix + k + ".", out);
    }
  }
}

// The node at dotted `path` in `root`, or null.
const Json* FindPath(const Json& root, const std::string& path) {
  const Json* at = &root;
  for (const absl::string_view part : absl::StrSplit(path, '.')) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(std::string(part));
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

// The number at dotted `path` in `metrics`, or null.
const Json* FindDotted(const Json& metrics, const std::string& path) {
  const Json* at = FindPath(metrics, path);
  return at != nullptr && at->is_number() ? at : nullptr;
}

// Flattened metric paths of every policy, first seen first.
std::vector<std::string> MetricPaths(const Json& policies) {
  std::vector<std::string> paths;
  std::set<std::string> seen;
  for (const Json& p : policies) {
    std::vector<std::pair<std::string, double>> flat;
    FlattenNumbers(p.at("metrics"), "", flat);
    for (const auto& [k, v] : flat) {
      if (seen.insert(k).second) paths.push_back(k);
    }
  }
  return paths;
}

std::string Signed(double x, const char* unit) {
  return fmt::format("{}{:.3g}{}", x >= 0 ? "+" : "", x, unit);
}

// Policy `p`'s paired difference for `metric` (a vs_baseline entry), or null.
const Json* PairedEntry(const Json& p, const std::string& metric) {
  if (!p.contains("vs_baseline")) return nullptr;
  const Json& paired = p.at("vs_baseline");
  auto it = paired.find(metric);
  return it == paired.end() ? nullptr : &*it;
}

// A paired difference and its interval, "+x% [lo<sep>hi]" relative to the baseline's mean, or
// absolute times `absolute_scale` where that mean is 0.
std::string DiffText(const Json& e, double absolute_scale, const char* separator) {
  const bool rel = e.at("relative").is_number();
  const double scale = rel ? 100 / std::fabs(e.at("baseline_mean").get<double>()) : absolute_scale;
  std::string text = Signed(e.at("diff").get<double>() * scale, rel ? "%" : "");
  const Json& ci = e.at("ci95");
  if (ci[0].is_number()) {
    text += fmt::format(" [{}{}{}]", Signed(ci[0].get<double>() * scale, ""), separator,
                        Signed(ci[1].get<double>() * scale, ""));
  }
  return text;
}

// Half the width of policy `p`'s 95% interval for `metric`; 0 where it has none or it is
// within rounding of the mean's magnitude (the same value under every seed).
double HalfWidth(const Json& p, const std::string& metric) {
  const Json* ci = p.contains("ci95") ? FindPath(p.at("ci95"), metric) : nullptr;
  if (ci == nullptr || !ci->is_array() || ci->size() != 2 || !(*ci)[0].is_number()) return 0;
  const double low = (*ci)[0].get<double>();
  const double high = (*ci)[1].get<double>();
  const double half = (high - low) / 2;
  return half > 1e-9 * std::max(1.0, std::fabs(low + half)) ? half : 0;
}

// " (n=K)" where only K of the summary's seeds report `metric` for policy `p`, else "".
std::string SeedsMissing(const Json& p, const std::string& metric) {
  if (!p.contains("missing_seeds")) return "";
  const Json& missing = p.at("missing_seeds");
  auto it = missing.find(metric);
  if (it == missing.end()) return "";
  const size_t seeds = p.value("seeds_total", size_t{0});
  return fmt::format(" (n={})", seeds - it->get<size_t>());
}

std::string Number(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e9) return fmt::format("{:.0f}", x);
  return fmt::format("{:.4g}", x);
}

}  // namespace

nlohmann::json MeanOfRuns(const std::vector<nlohmann::json>& runs) {
  Json out = runs.front();
  out.erase("seed");
  out["seeds"] = Json::array();
  for (const Json& r : runs) out["seeds"].push_back(r.value("seed", uint64_t{0}));
  Json& policies = out["policies"];
  for (size_t i = 0; i < policies.size(); ++i) {
    std::vector<const Json*> metrics;
    metrics.reserve(runs.size());
    for (const Json& r : runs) metrics.push_back(&r.at("policies").at(i).at("metrics"));
    policies[i]["metrics"] = MeanOf(metrics);
  }
  return out;
}

absl::StatusOr<nlohmann::json> SummarizeSeeds(const std::vector<nlohmann::json>& runs,
                                              const std::string& baseline) {
  if (runs.empty()) return absl::InvalidArgumentError("no runs to summarise");
  const Json& first = runs.front().at("policies");
  for (const Json& r : runs) {
    const Json& ps = r.at("policies");
    bool same = ps.size() == first.size();
    for (size_t i = 0; same && i < ps.size(); ++i) same = ps[i].at("name") == first[i].at("name");
    if (!same) {
      return absl::InvalidArgumentError(
          fmt::format("seed {}: the runs do not list the same policies", r.value("seed", 0)));
    }
  }
  size_t base = first.size();
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i].at("name") == baseline) base = i;
  }
  if (base == first.size()) {
    return absl::InvalidArgumentError(
        fmt::format("baseline '{}' is not a policy of the scenario", baseline));
  }

  Json out = MeanOfRuns(runs);
  Json unfinished = Json::array();
  for (const Json& r : runs) {
    bool done = true;
    for (const Json& p : r.at("policies")) {
      done = done && p.at("metrics").value("completed", true);
    }
    if (!done) unfinished.push_back(r.value("seed", uint64_t{0}));
  }
  out["unfinished_seeds"] = std::move(unfinished);
  out["baseline"] = baseline;
  out["interval"] = "95% Student t";
  Json& policies = out["policies"];
  for (size_t i = 0; i < policies.size(); ++i) {
    std::vector<const Json*> metrics;
    metrics.reserve(runs.size());
    for (const Json& r : runs) metrics.push_back(&r["policies"][i]["metrics"]);
    policies[i]["ci95"] = IntervalOf(metrics);
    Json missing = Json::object();
    CountMissing(metrics, runs.size(), "", missing);
    if (!missing.empty()) {
      policies[i]["missing_seeds"] = std::move(missing);
      policies[i]["seeds_total"] = runs.size();
    }
    if (i == base) continue;
    Json paired = Json::object();
    std::vector<std::pair<std::string, double>> flat;
    FlattenNumbers(policies[i]["metrics"], "", flat);
    for (const auto& [path, mean] : flat) {
      std::vector<double> diffs;
      std::vector<double> base_values;
      for (const Json& r : runs) {
        const Json* a = FindDotted(r["policies"][i]["metrics"], path);
        const Json* b = FindDotted(r["policies"][base]["metrics"], path);
        if (a == nullptr || b == nullptr) continue;
        diffs.push_back(a->get<double>() - b->get<double>());
        base_values.push_back(b->get<double>());
      }
      if (diffs.empty()) continue;
      const MeanInterval d = MeanCi95(diffs);
      const double base_mean = Mean(base_values);
      // A difference within rounding of zero is none, whatever its interval's width (sums
      // taken in another order differ in the last bits).
      const bool real = std::fabs(d.mean) > 1e-9 * std::max(1.0, std::fabs(base_mean));
      Json entry = {{"diff", d.mean},
                    {"ci95", Ends(d)},
                    {"significant", real && d.ExcludesZero()},
                    {"baseline_mean", base_mean}};
      entry["relative"] = base_mean != 0 ? Json(d.mean / std::fabs(base_mean)) : Json(nullptr);
      paired[path] = std::move(entry);
    }
    policies[i]["vs_baseline"] = std::move(paired);
  }
  return out;
}

std::string FormatSeedSummary(const nlohmann::json& summary) {
  const Json& policies = summary.at("policies");
  const std::vector<std::string> paths = MetricPaths(policies);
  size_t width = 28;
  for (const std::string& k : paths) width = std::max(width, k.size() + 2);
  constexpr int kColumn = 26;
  auto header = [&](const std::string& title) {
    std::string line = fmt::format("{:<{}}", title, width);
    for (const Json& p : policies) {
      line += fmt::format("{:>{}}", p.at("name").get<std::string>(), kColumn);
    }
    return line + "\n";
  };

  const std::string baseline = summary.value("baseline", "");
  std::string out =
      fmt::format("mean over {} seeds, ± the half-width of its 95% interval (Student t)\n",
                  summary.at("seeds").size());
  if (summary.contains("unfinished_seeds") && !summary["unfinished_seeds"].empty()) {
    std::vector<std::string> seeds;
    for (const Json& seed : summary["unfinished_seeds"]) seeds.push_back(seed.dump());
    out += fmt::format("work left unfinished at the drain limit under seeds {}\n",
                       fmt::join(seeds, ", "));
  }
  out += header("metric");
  for (const std::string& k : paths) {
    out += fmt::format("{:<{}}", k, width);
    for (const Json& p : policies) {
      const Json* mean = FindDotted(p.at("metrics"), k);
      if (mean == nullptr) {
        out += fmt::format("{:>{}}", "-", kColumn);
        continue;
      }
      std::string cell = Number(mean->get<double>());
      if (const double half = HalfWidth(p, k); half > 0) cell += fmt::format(" ±{:.2g}", half);
      cell += SeedsMissing(p, k);
      out += fmt::format("{:>{}}", cell, kColumn);
    }
    out += "\n";
  }

  if (baseline.empty()) return out;
  out += fmt::format(
      "\npaired difference against {} over the same seeds: mean [95% interval], relative to\n"
      "{}'s mean where it is not 0; * where the interval excludes 0\n",
      baseline, baseline);
  out += header("metric");
  for (const std::string& k : paths) {
    out += fmt::format("{:<{}}", k, width);
    for (const Json& p : policies) {
      const bool is_base = p.at("name") == baseline;
      const Json* e = is_base ? nullptr : PairedEntry(p, k);
      if (e == nullptr) {
        out += fmt::format("{:>{}}", is_base ? "(baseline)" : "-", kColumn);
        continue;
      }
      std::string cell = DiffText(*e, 1, ",");
      if (e->at("significant").get<bool>()) cell += "*";
      out += fmt::format("{:>{}}", cell, kColumn);
    }
    out += "\n";
  }
  return out;
}

namespace {

// How a metric's values are written: seconds scaled to the baseline's magnitude.
struct Scale {
  double factor = 1;
  const char* unit = "";
};

Scale ScaleFor(const std::string& metric, double typical) {
  if (metric.size() < 2 || metric.compare(metric.size() - 2, 2, "_s") != 0) return {};
  const double t = std::fabs(typical);
  if (t >= 1) return {1, " s"};
  if (t >= 1e-3) return {1e3, " ms"};
  return {1e6, " µs"};
}

std::string Significant(double x) {
  if (x != 0 && std::fabs(x) < 1e-3) return fmt::format("{:.2g}", x);
  if (std::fabs(x) >= 1e4 || x == std::floor(x)) return fmt::format("{:.0f}", x);
  return fmt::format("{:.3g}", x);
}

}  // namespace

std::string FormatSeedMarkdown(const nlohmann::json& summary,
                               const std::vector<std::string>& metrics,
                               const std::vector<std::string>& policies) {
  const Json& all = summary.at("policies");
  const std::string baseline = summary.value("baseline", "");
  const Json* base = nullptr;
  for (const Json& p : all) {
    if (p.at("name") == baseline) base = &p;
  }
  std::string out = "| policy |";
  std::string rule = "|---|";
  for (const std::string& m : metrics) {
    out += fmt::format(" {} | vs {} |", m, baseline);
    rule += "---|---|";
  }
  out += "\n" + rule + "\n";
  std::vector<const Json*> rows;
  for (const Json& p : all) {
    if (policies.empty() || std::find(policies.begin(), policies.end(),
                                      p.at("name").get<std::string>()) != policies.end()) {
      rows.push_back(&p);
    }
  }
  if (!policies.empty()) {
    std::sort(rows.begin(), rows.end(), [&](const Json* a, const Json* b) {
      return std::find(policies.begin(), policies.end(), a->at("name").get<std::string>()) <
             std::find(policies.begin(), policies.end(), b->at("name").get<std::string>());
    });
  }
  for (const Json* p : rows) {
    out += fmt::format("| {} |", p->at("name").get<std::string>());
    for (const std::string& m : metrics) {
      const Json* mean = FindDotted(p->at("metrics"), m);
      if (mean == nullptr) {
        out += " – | – |";
        continue;
      }
      const Json* typical = base != nullptr ? FindDotted(base->at("metrics"), m) : nullptr;
      const Scale sc = ScaleFor(m, (typical != nullptr ? *typical : *mean).get<double>());
      std::string cell = Significant(mean->get<double>() * sc.factor);
      if (const double half = HalfWidth(*p, m); half > 0)
        cell += " ±" + Significant(half * sc.factor);
      out += fmt::format(" {}{}{} |", cell, sc.unit, SeedsMissing(*p, m));
      const Json* e = PairedEntry(*p, m);
      if (e == nullptr) {
        out += p == base ? " (baseline) |" : " – |";
        continue;
      }
      std::string diff = DiffText(*e, sc.factor, ", ");
      if (!e->at("relative").is_number()) diff += sc.unit;
      if (e->at("significant").get<bool>()) diff = fmt::format("**{}**", diff);
      out += " " + diff + " |";
    }
    out += "\n";
  }
  return out;
}

absl::StatusOr<std::vector<uint64_t>> ParseSeedList(const std::string& text) {
  std::vector<uint64_t> seeds;
  std::set<uint64_t> seen;
  auto add = [&](uint64_t s) -> absl::Status {
    if (!seen.insert(s).second) {
      return absl::InvalidArgumentError(fmt::format("seed {} is listed twice", s));
    }
    seeds.push_back(s);
    return absl::OkStatus();
  };
  for (const absl::string_view part : absl::StrSplit(text, ',')) {
    const size_t dots = part.find("..");
    uint64_t lo = 0;
    uint64_t hi = 0;
    const bool ok = dots == absl::string_view::npos
                        ? absl::SimpleAtoi(part, &lo) && (hi = lo, true)
                        : absl::SimpleAtoi(part.substr(0, dots), &lo) &&
                              absl::SimpleAtoi(part.substr(dots + 2), &hi) && lo <= hi;
    if (!ok) {
      return absl::InvalidArgumentError(
          fmt::format("'{}' is not a seed or a range A..B of seeds (A <= B, non-negative integers)",
                      std::string(part)));
    }
    if (hi - lo >= 100000) {
      return absl::InvalidArgumentError(
          fmt::format("'{}': at most 100000 seeds", std::string(part)));
    }
    for (uint64_t s = lo;; ++s) {
      if (absl::Status st = add(s); !st.ok()) return st;
      if (s == hi) break;  // not s <= hi: hi may be the largest seed there is
    }
  }
  if (seeds.empty()) return absl::InvalidArgumentError("no seeds listed");
  return seeds;
}

}  // namespace dar::sim
