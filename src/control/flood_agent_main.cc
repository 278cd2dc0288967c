// dar_flood_agent: a test tool, not part of DAR. It holds a node's real certificate and speaks
// the agent protocol like a compromised node would: a hello for its own links, then valid
// samples of those links, 4,096 a message, as fast as its stream takes them, for a while.
// The lab's system test runs it in a node's namespace to check that the controller drops the
// flooding node's samples and nobody else's.
//
//   dar_flood_agent --controller 10.255.255.1:50051 --tls-dir certs --node 1
//       --neighbours 2,3 --seconds 5
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/time/clock.h"
#include "control/controller_test_util.h"
#include "security/certs.h"
#include "security/tls.h"

int main(int argc, char** argv) {
  CLI::App app{
      "dar_flood_agent: floods the controller with one node's valid samples (a test tool)"};
  std::string controller, tls_dir;
  uint32_t node = 0;
  std::vector<uint32_t> neighbours;
  double seconds = 5;
  app.add_option("--controller", controller, "host:port")->required();
  app.add_option("--tls-dir", tls_dir, "Directory with ca.crt and node-<ID>.crt/.key")->required();
  app.add_option("--node", node, "Node id")->required();
  app.add_option("--neighbours", neighbours, "Its neighbours' ids")->delimiter(',')->required();
  app.add_option("--seconds", seconds, "How long to flood");
  CLI11_PARSE(app, argc, argv);

  const dar::security::SpiffeId id = dar::security::SpiffeId::Node("unused", std::to_string(node));
  dar::security::ChannelTlsOptions tls;
  tls.files = {tls_dir + "/" + dar::security::CertFileName(id),
               tls_dir + "/" + dar::security::KeyFileName(id), tls_dir + "/ca.crt"};
  tls.server_is_own_controller = true;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      dar::security::CreateSecureChannel(controller, tls, absl::Now());
  if (!channel.ok()) {
    std::fprintf(stderr, "dar_flood_agent: %s\n", std::string(channel.status().message()).c_str());
    return 1;
  }
  dar::control::testing::TestAgent agent(
      *channel, [](const dar::v1::RouteTable&) { return std::nullopt; }, /*keep_messages=*/false);
  agent.SendHello(node, neighbours, /*delta_tables=*/true);
  dar::v1::AgentMessage m;
  for (size_t k = 0; k < 4096; ++k) {
    dar::v1::LinkSample* s = m.mutable_samples()->add_samples();
    s->set_neighbor_id(neighbours[k % neighbours.size()]);
    s->set_up(true);
    s->set_rtt_ms(0.3);
    s->set_utilisation(0.5);
  }
  uint64_t sent = 0;
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(seconds));
  while (std::chrono::steady_clock::now() < end) {
    if (agent.unsent() >= 8) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    agent.Send(m);
    sent += 4096;
  }
  std::printf("dar_flood_agent: node %u sent %llu samples in %.1f s\n", node,
              static_cast<unsigned long long>(sent), seconds);
  return 0;
}
