// Test-only helpers: a small network with transport and baseline tables, ready to run.
#ifndef DAR_SIM_SIM_TEST_UTIL_H_
#define DAR_SIM_SIM_TEST_UTIL_H_

#include <memory>

#include "core/random.h"
#include "core/routing.h"
#include "core/topology.h"
#include "sim/event_loop.h"
#include "sim/network.h"
#include "sim/transport.h"

namespace dar::sim::testing {

// A host-switch-...-host chain: h0 - s0 - s1 - ... - s{n-1} - h1, all links alike.
inline Topology Chain(int switches, const LinkParams& params) {
  Topology t;
  const NodeId h0 = t.AddNode("h0", NodeKind::kHost);
  const NodeId h1 = t.AddNode("h1", NodeKind::kHost);
  NodeId prev = h0;
  for (int i = 0; i < switches; ++i) {
    const NodeId s = t.AddNode("s" + std::to_string(i), NodeKind::kSwitch);
    t.AddDuplexLink(prev, s, params);
    prev = s;
  }
  t.AddDuplexLink(prev, h1, params);
  return t;
}

struct Harness {
  Harness(const Topology& topo, ForwardingMode mode, const NetworkConfig& nc = {},
          const TransportConfig& tc = {}, uint64_t seed = 1)
      : rng(seed), net(loop, rng, topo, nc), transport(net, tc) {
    ForwardingConfig f;
    f.mode = mode;
    net.set_forwarding(f);
    net.InstallTables(std::make_shared<const RoutingTables>(ComputeEcmpTables(topo)));
  }

  EventLoop loop;
  Random rng;
  Network net;
  Transport transport;
};

}  // namespace dar::sim::testing

#endif  // DAR_SIM_SIM_TEST_UTIL_H_
