// What the route computer's tests share (route_computer_test.cc, route_computer_links_test.cc,
// route_computer_policy_test.cc): a diamond, samples as agents report them, the controller's
// scale, the check that a cycle's tables are valid and downhill, and test policies.
#ifndef DAR_CORE_ROUTE_COMPUTER_TEST_UTIL_H_
#define DAR_CORE_ROUTE_COMPUTER_TEST_UTIL_H_

#include <cmath>
#include <functional>
#include <string>
#include <tuple>

#include "core/route_computer.h"
#include "core/validator.h"
#include "gtest/gtest.h"

namespace dar::test {

// The weight `tables` give `link` among `node`'s next hops towards `dest`; 0 if it is not one.
inline double WeightOf(const RoutingTables& tables, NodeId node, NodeId dest, LinkId link) {
  for (const NextHop& hop : tables.Lookup(node, dest)) {
    if (hop.link == link) return hop.weight;
  }
  return 0;
}

// Four routers: s reaches t over a or over b.
struct Diamond {
  explicit Diamond(DataRate capacity = DataRate::Gbps(10), Duration delay = Microseconds(10)) {
    s = topo.AddNode("s", NodeKind::kSwitch);
    a = topo.AddNode("a", NodeKind::kSwitch);
    b = topo.AddNode("b", NodeKind::kSwitch);
    t = topo.AddNode("t", NodeKind::kSwitch);
    LinkParams p;
    p.capacity = capacity;
    p.delay = delay;
    sa = topo.AddDuplexLink(s, a, p).first;
    sb = topo.AddDuplexLink(s, b, p).first;
    std::tie(at, ta) = topo.AddDuplexLink(a, t, p);
    std::tie(bt, tb) = topo.AddDuplexLink(b, t, p);
  }
  // The weight s gives to `link` toward t in `tables`, 0 if it is not a next hop.
  double Weight(const RoutingTables& tables, LinkId link) const {
    for (const NextHop& h : tables.Lookup(s, t)) {
      if (h.link == link) return h.weight;
    }
    return 0;
  }
  Topology topo;
  NodeId s, a, b, t;
  LinkId sa, sb, at, ta, bt, tb;
};

inline LinkSample Sample(double utilisation, bool up = true) {
  LinkSample x;
  x.rtt_smoothed = Microseconds(25);
  x.utilisation = utilisation;
  x.up = up;
  return x;
}

// A sample as an agent reports it: RTT, loss and queue as measured.
inline LinkSample Measured(double utilisation, Duration rtt, double loss = 0,
                           int64_t queue_bytes = 0) {
  LinkSample x;
  x.rtt_smoothed = rtt;
  x.utilisation = utilisation;
  x.loss = loss;
  x.queue_bytes = queue_bytes;
  return x;
}

// The controller's scale (1 ms of delay is a reference) on the lab's 100 Mb/s links.
inline RouteComputerConfig LabConfig() {
  RouteComputerConfig c;
  c.scales.reference_delay = Milliseconds(1);
  c.cost_decay_periods = 4;
  c.measured_links = true;
  return c;
}

// Every node reaches every destination downhill, and the validator finds nothing wrong.
inline void ExpectValid(const RouteComputer& rc, const RouteCycle& cycle) {
  Topology view = rc.topology();
  for (LinkId l = 0; l < view.num_links(); ++l) view.mutable_link(l).up = !rc.known_down(l);
  for (int cls = 0; cls < kTrafficClasses; ++cls) {
    const RoutingTables& t = *cycle.tables[cls];
    const ValidationReport report = ValidateTables(view, t);
    EXPECT_TRUE(report.ok()) << report.ToStatus();
    for (NodeId d : t.destinations()) {
      for (NodeId v = 0; v < view.num_nodes(); ++v) {
        for (const NextHop& h : t.Lookup(v, d)) {
          EXPECT_LT(rc.Potential(cls, d, view.link(h.link).dst), rc.Potential(cls, d, v));
        }
      }
    }
  }
}

// A weight policy for the tests: records the batch, answers with `weights_for` (a function of
// the candidate's index in its row), or fails.
class TestPolicy : public WeightPolicy {
 public:
  absl::Status Weigh(const PolicyBatch& batch, absl::Span<double> weights,
                     Executor& executor) override {
    last = batch;
    ++calls;
    if (!error.ok()) return error;
    for (const PolicyDecision& d : batch.decisions) WeighRow(batch, d, weights);
    return absl::OkStatus();
  }
  virtual void WeighRow(const PolicyBatch&, const PolicyDecision& d, absl::Span<double> weights) {
    for (uint32_t i = 0; i < d.count; ++i) weights[d.first + i] = weight(i, d.count);
  }
  std::string Describe() const override { return "test policy"; }

  std::function<double(uint32_t, uint32_t)> weight = [](uint32_t, uint32_t n) { return 1.0 / n; };
  absl::Status error;
  PolicyBatch last;
  int calls = 0;
};

// Softmax of the sum of a candidate's features: any feature out of place moves a weight.
class FeatureSum : public TestPolicy {
 public:
  void WeighRow(const PolicyBatch& batch, const PolicyDecision& d,
                absl::Span<double> weights) override {
    double sum = 0;
    for (uint32_t i = d.first; i < d.first + d.count; ++i) {
      double x = 0;
      for (float f : batch.candidates[i].features) x += f;
      weights[i] = std::exp(x / 4);
      sum += weights[i];
    }
    for (uint32_t i = d.first; i < d.first + d.count; ++i) weights[i] /= sum;
  }
};

}  // namespace dar::test

#endif  // DAR_CORE_ROUTE_COMPUTER_TEST_UTIL_H_
