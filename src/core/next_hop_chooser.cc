#include "core/next_hop_chooser.h"

#include <cassert>

#include "fmt/format.h"

namespace dar {

absl::StatusOr<ForwardingMode> ParseForwardingMode(std::string_view name) {
  if (name == "per_flow") return ForwardingMode::kPerFlow;
  if (name == "per_flowlet") return ForwardingMode::kPerFlowlet;
  if (name == "per_packet") return ForwardingMode::kPerPacket;
  if (name == "per_packet_p2c") return ForwardingMode::kPerPacketP2C;
  return absl::InvalidArgumentError(
      fmt::format("unknown forwarding mode '{}' (expected per_flow, per_flowlet, per_packet or "
                  "per_packet_p2c)",
                  name));
}

std::string_view ForwardingModeName(ForwardingMode mode) {
  switch (mode) {
    case ForwardingMode::kPerFlow:
      return "per_flow";
    case ForwardingMode::kPerFlowlet:
      return "per_flowlet";
    case ForwardingMode::kPerPacket:
      return "per_packet";
    case ForwardingMode::kPerPacketP2C:
      return "per_packet_p2c";
  }
  return "?";
}

absl::Status ForwardingConfig::Validate() const {
  if (queue_bias_bytes < 0) {
    return absl::InvalidArgumentError(
        fmt::format("forwarding config: queue_bias_bytes is {}, must be >= 0", queue_bias_bytes));
  }
  if (flowlet_gap < Duration(0)) {
    return absl::InvalidArgumentError(
        fmt::format("forwarding config: flowlet_gap is {} ns, must be >= 0", flowlet_gap.count()));
  }
  if (flowlet_table_size < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "forwarding config: flowlet_table_size is {}, must be >= 1", flowlet_table_size));
  }
  return absl::OkStatus();
}

NextHopChooser::NextHopChooser(const ForwardingConfig& config, uint64_t salt)
    : config_(config), salt_(salt) {
  assert(config_.Validate().ok());
}

void NextHopChooser::set_config(const ForwardingConfig& config) {
  assert(config.Validate().ok());
  config_ = config;
  flowlets_.clear();
  flowlets_.shrink_to_fit();
}

}  // namespace dar
