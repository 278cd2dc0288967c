#include "sim/seed_summary.h"

#include <cmath>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/runner.h"

namespace dar::sim {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

Json SeedRun(uint64_t seed, std::vector<std::pair<std::string, Json>> policies) {
  Json run = {{"scenario", "s"}, {"seed", seed}, {"policies", Json::array()}};
  for (auto& [name, metrics] : policies) {
    run["policies"].push_back({{"name", name}, {"metrics", std::move(metrics)}});
  }
  return run;
}

TEST(SeedSummaryTest, MeanOfRunsAveragesNumbersAndKeepsTheRest) {
  auto run = [](int seed, double fct, bool completed, int drops) {
    nlohmann::json metrics = {{"fct_mean_s", fct},
                              {"completed", completed},
                              {"drops_by_reason", {{"queue_full", drops}}},
                              {"learned_policy", fmt::format("model {}", seed)}};
    if (seed == 1) metrics["only_in_one"] = 5;
    return Json{{"scenario", "s"},
                {"seed", seed},
                {"policies", {{{"name", "ecmp"}, {"metrics", metrics}}}}};
  };
  const nlohmann::json mean = MeanOfRuns({run(1, 0.002, true, 3), run(2, 0.004, false, 6)});
  EXPECT_EQ(mean["scenario"], "s");
  EXPECT_FALSE(mean.contains("seed"));
  EXPECT_EQ(mean["seeds"], nlohmann::json::array({1, 2}));
  const nlohmann::json& m = mean["policies"][0]["metrics"];
  EXPECT_DOUBLE_EQ(m["fct_mean_s"].get<double>(), 0.003);
  EXPECT_EQ(m["completed"], false);
  EXPECT_DOUBLE_EQ(m["drops_by_reason"]["queue_full"].get<double>(), 4.5);
  EXPECT_EQ(m["learned_policy"], "model 1");
  EXPECT_DOUBLE_EQ(m["only_in_one"].get<double>(), 5);
  // The table shows nested numbers under their path.
  EXPECT_THAT(FormatComparison(mean), ::testing::HasSubstr("drops_by_reason.queue_full"));
}

// The paired difference is taken seed by seed: a policy that is 1 ms faster than the
// baseline under every seed is significantly faster although the seeds move both by far more
// than 1 ms, and the two means' intervals overlap.
TEST(SummarizeSeedsTest, PairedDifferenceCancelsWhatASeedDoesToBoth) {
  std::vector<Json> runs;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const double t = 0.010 * static_cast<double>(seed);  // the seed sets the scale
    runs.push_back(SeedRun(
        seed,
        {{"ecmp", {{"fct_mean_s", t}, {"drops", 5}}},
         {"dar", {{"fct_mean_s", t - 0.001}, {"drops", 5 + (seed % 2 ? 1 : -1)}}},
         {"static",
          {{"fct_mean_s", t + 0.002 * (seed % 2 ? 1 : -1)}, {"drops", 7}, {"only_here", 1}}}}));
  }
  absl::StatusOr<Json> s = SummarizeSeeds(runs, "ecmp");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)["baseline"], "ecmp");
  EXPECT_EQ((*s)["seeds"].size(), 10u);
  const Json& ecmp = (*s)["policies"][0];
  const Json& dar = (*s)["policies"][1];
  const Json& stat = (*s)["policies"][2];
  EXPECT_FALSE(ecmp.contains("vs_baseline"));
  // The means' intervals overlap widely...
  EXPECT_LT(ecmp["ci95"]["fct_mean_s"][0].get<double>(),
            dar["metrics"]["fct_mean_s"].get<double>());
  EXPECT_GT(dar["ci95"]["fct_mean_s"][1].get<double>(),
            ecmp["metrics"]["fct_mean_s"].get<double>());
  // ...but the paired difference is exactly -1 ms, with a zero-width interval.
  const Json& d = dar["vs_baseline"]["fct_mean_s"];
  EXPECT_NEAR(d["diff"].get<double>(), -0.001, 1e-12);
  EXPECT_NEAR(d["ci95"][0].get<double>(), -0.001, 1e-12);
  EXPECT_NEAR(d["ci95"][1].get<double>(), -0.001, 1e-12);
  EXPECT_TRUE(d["significant"].get<bool>());
  EXPECT_NEAR(d["relative"].get<double>(), -0.001 / 0.055, 1e-12);
  // Drops alternate +1/-1 around the baseline: no significant difference.
  EXPECT_FALSE(dar["vs_baseline"]["drops"]["significant"].get<bool>());
  EXPECT_NEAR(dar["vs_baseline"]["drops"]["diff"].get<double>(), 0, 1e-12);
  // A difference that changes sign from seed to seed is not significant either.
  EXPECT_FALSE(stat["vs_baseline"]["fct_mean_s"]["significant"].get<bool>());
  EXPECT_TRUE(stat["vs_baseline"]["drops"]["significant"].get<bool>());
  // A metric the baseline lacks has no paired difference.
  EXPECT_FALSE(stat["vs_baseline"].contains("only_here"));
  EXPECT_TRUE(stat["ci95"].contains("only_here"));

  const std::string table = FormatSeedSummary(*s);
  EXPECT_THAT(table, HasSubstr("mean over 10 seeds"));
  EXPECT_THAT(table, HasSubstr("paired difference against ecmp"));
  EXPECT_THAT(table, HasSubstr("(baseline)"));
  EXPECT_THAT(table, HasSubstr("-1.82% [-1.82,-1.82]*"));  // dar's fct_mean_s
  EXPECT_THAT(table, HasSubstr("+40% [+40,+40]*"));        // static's drops
}

// The report table: means in the baseline's unit with their half-widths, the paired
// differences relative to the baseline, bold where significant.
TEST(SummarizeSeedsTest, MarkdownTableShowsMeansAndPairedDifferences) {
  std::vector<Json> runs;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const double t = 0.010 + 0.001 * static_cast<double>(seed);
    runs.push_back(SeedRun(seed, {{"ecmp", {{"fct_mean_s", t}, {"drops", 4}}},
                                  {"dar", {{"fct_mean_s", t * 0.9}, {"drops", 3 + seed % 2}}}}));
  }
  absl::StatusOr<Json> s = SummarizeSeeds(runs, "ecmp");
  ASSERT_TRUE(s.ok());
  const std::string md = FormatSeedMarkdown(*s, {"fct_mean_s", "drops", "absent"}, {"dar", "ecmp"});
  EXPECT_THAT(md,
              HasSubstr("| policy | fct_mean_s | vs ecmp | drops | vs ecmp | absent | vs ecmp |"));
  // dar first, as asked: 11.25 ms mean (the seeds' 11..14 ms times 0.9), 10% faster every seed.
  const size_t dar = md.find("| dar |");
  const size_t ecmp = md.find("| ecmp |");
  ASSERT_NE(dar, std::string::npos);
  ASSERT_LT(dar, ecmp);
  EXPECT_THAT(md, HasSubstr("| dar | 11.2 ±"));
  EXPECT_THAT(md, HasSubstr("| **-10% [-11.6, -8.36]** |"));  // -0.1 t, t varying by seed
  EXPECT_THAT(md, HasSubstr("| ecmp | 12.5 ±"));
  EXPECT_THAT(md, HasSubstr("(baseline)"));
  EXPECT_THAT(md, HasSubstr(" – | – |"));  // the absent metric
  // Drops alternate 3, 4 against 4: not significant, so not bold.
  EXPECT_THAT(md, HasSubstr("| -12.5% [-35.5, +10.5] |"));
}

TEST(SummarizeSeedsTest, IntervalsMirrorNestedMetricsAndSkipFlags) {
  std::vector<Json> runs;
  for (uint64_t seed : {4, 5, 6}) {
    runs.push_back(SeedRun(seed, {{"ecmp",
                                   {{"completed", true},
                                    {"drops_by_reason", {{"queue_full", 2 * seed}}},
                                    {"name_of", "x"}}}}));
  }
  absl::StatusOr<Json> s = SummarizeSeeds(runs, "ecmp");
  ASSERT_TRUE(s.ok()) << s.status();
  const Json& ci = (*s)["policies"][0]["ci95"];
  EXPECT_FALSE(ci.contains("completed"));
  EXPECT_FALSE(ci.contains("name_of"));
  // 8, 10, 12: mean 10, sd 2, half-width 4.303 * 2 / sqrt(3).
  EXPECT_NEAR(ci["drops_by_reason"]["queue_full"][0].get<double>(), 10 - 4.303 * 2 / std::sqrt(3.0),
              1e-9);
  // One seed: null ends.
  absl::StatusOr<Json> one = SummarizeSeeds({runs[0]}, "ecmp");
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE((*one)["policies"][0]["ci95"]["drops_by_reason"]["queue_full"][0].is_null());
}

// A metric that the first seed lacks (or reports as null, as a workload does when nothing of
// it finished) is still summarised over the seeds that have it, and the summary says how many.
TEST(SummarizeSeedsTest, AMetricSomeSeedsLackIsSummarisedOverTheOthers) {
  std::vector<Json> runs;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    Json ecmp = {{"qct_p99_s", seed == 1 ? Json(nullptr) : Json(0.001 * seed)}, {"drops", 0}};
    Json dar = {{"qct_p99_s", 0.0009 * seed}, {"drops", seed == 3 ? 0 : 2}};
    if (seed > 2) dar["late"] = 1.0;
    runs.push_back(SeedRun(seed, {{"ecmp", ecmp}, {"dar", dar}}));
  }
  runs[1]["policies"][0]["metrics"]["completed"] = false;
  absl::StatusOr<Json> s = SummarizeSeeds(runs, "ecmp");
  ASSERT_TRUE(s.ok()) << s.status();
  const Json& ecmp = (*s)["policies"][0];
  const Json& dar = (*s)["policies"][1];
  EXPECT_DOUBLE_EQ(ecmp["metrics"]["qct_p99_s"].get<double>(), 0.0035);  // seeds 2..5
  EXPECT_EQ(ecmp["missing_seeds"]["qct_p99_s"], 1);
  EXPECT_TRUE(ecmp["ci95"]["qct_p99_s"][0].is_number());
  EXPECT_DOUBLE_EQ(dar["metrics"]["late"].get<double>(), 1.0);
  EXPECT_EQ(dar["missing_seeds"]["late"], 2);
  EXPECT_FALSE(dar["missing_seeds"].contains("qct_p99_s"));
  // Paired over the four seeds where both have it: -0.1 x seed ms.
  EXPECT_NEAR(dar["vs_baseline"]["qct_p99_s"]["diff"].get<double>(), -0.00035, 1e-12);
  EXPECT_EQ((*s)["unfinished_seeds"], Json::array({2}));
  const std::string table = FormatSeedSummary(*s);
  EXPECT_THAT(table, HasSubstr("work left unfinished at the drain limit under seeds 2"));
  EXPECT_THAT(table, HasSubstr("(n=4)"));

  // Drops: the baseline's mean is 0, so the difference is absolute, and significant (+1.6,
  // four seeds of five at +2).
  const std::string md = FormatSeedMarkdown(*s, {"drops", "late", "qct_p99_s"});
  EXPECT_THAT(md, HasSubstr("| **+1.6 [+0.49, +2.71]** |"));
  EXPECT_THAT(md, HasSubstr("1 (n=3)"));
  EXPECT_THAT(md, HasSubstr("3.5 ±"));  // ms, the baseline's unit
}

TEST(SummarizeSeedsTest, RefusesAnUnknownBaselineOrMismatchedRuns) {
  const Json a = SeedRun(1, {{"ecmp", {{"x", 1}}}, {"dar", {{"x", 2}}}});
  const Json b = SeedRun(2, {{"dar", {{"x", 1}}}, {"ecmp", {{"x", 2}}}});
  absl::StatusOr<Json> s = SummarizeSeeds({a}, "spray");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("baseline 'spray'"));
  s = SummarizeSeeds({a, b}, "ecmp");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("seed 2"));
  EXPECT_FALSE(SummarizeSeeds({}, "ecmp").ok());
}

TEST(ParseSeedListTest, TakesListsAndRanges) {
  EXPECT_EQ(*ParseSeedList("1..10"), (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(*ParseSeedList("3,4"), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(*ParseSeedList("0,7..9,2"), (std::vector<uint64_t>{0, 7, 8, 9, 2}));
  EXPECT_EQ(*ParseSeedList("18446744073709551614..18446744073709551615"),
            (std::vector<uint64_t>{18446744073709551614ULL, 18446744073709551615ULL}));
  for (const char* bad :
       {"", "a", "1..", "5..3", "1,,2", "-1", "1..2,2", "0..1000000", "18446744073709551616"}) {
    EXPECT_FALSE(ParseSeedList(bad).ok()) << bad;
  }
  EXPECT_THAT(std::string(ParseSeedList("1,x").status().message()), HasSubstr("'x'"));
}

}  // namespace
}  // namespace dar::sim
