// The control plane of the static and ECMP baselines: a link-state routing protocol. Every
// node learns of a link change after `reconvergence_delay` (flooding, SPF and FIB update
// folded into one delay) and then forwards with tables recomputed from the network as it is.
// Until then a forwarder only skips its own dead links (network.h).
#ifndef DAR_SIM_LINK_STATE_ROUTING_H_
#define DAR_SIM_LINK_STATE_ROUTING_H_

#include <memory>

#include "core/routing.h"
#include "sim/control_plane.h"

namespace dar::sim {

struct LinkStateConfig {
  Duration reconvergence_delay = Milliseconds(100);
};

// Reads the key `reconvergence` (any duration unit) of a policy.
absl::StatusOr<LinkStateConfig> ReadLinkStateConfig(YamlReader& policy);

class LinkStateRouting : public ControlPlane {
 public:
  LinkStateRouting(TablePolicy compute, const LinkStateConfig& config);

  void Start(ControlContext& ctx) override;
  void OnLinkChange(LinkId link) override;
  void Report(nlohmann::json& metrics) const override;

 private:
  void Recompute();

  TablePolicy compute_;
  LinkStateConfig config_;
  ControlContext* ctx_ = nullptr;
  std::unique_ptr<Timer> reconverge_;
  uint64_t version_ = 0;
  int64_t installs_ = 0;
  int64_t refused_ = 0;
  int64_t loops_ = 0;
};

}  // namespace dar::sim

#endif  // DAR_SIM_LINK_STATE_ROUTING_H_
