#include "core/next_hop_chooser.h"

#include <cassert>

#include "fmt/format.h"

namespace dar {

absl::StatusOr<ForwardingMode> ParseForwardingMode(std::string_view name) {
  if (name == "per_flow") return ForwardingMode::kPerFlow;
  if (name == "per_flowlet") return ForwardingMode::kPerFlowlet;
  if (name == "per_packet") return ForwardingMode::kPerPacket;
  if (name == "per_packet_p2c") return ForwardingMode::kPerPacketP2C;
  if (name == "drill") return ForwardingMode::kDrill;
  if (name == "drill_flowlet") return ForwardingMode::kDrillFlowlet;
  return absl::InvalidArgumentError(
      fmt::format("unknown forwarding mode '{}' (expected per_flow, per_flowlet, per_packet, "
                  "per_packet_p2c, drill or drill_flowlet)",
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
    case ForwardingMode::kDrill:
      return "drill";
    case ForwardingMode::kDrillFlowlet:
      return "drill_flowlet";
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
  if (drill_samples < 1 || drill_samples > 16) {
    return absl::InvalidArgumentError(
        fmt::format("forwarding config: drill_samples is {}, must be in [1, 16]", drill_samples));
  }
  if (drill_memory < 0 || drill_memory > 1) {
    return absl::InvalidArgumentError(
        fmt::format("forwarding config: drill_memory is {}, must be 0 or 1", drill_memory));
  }
  if (sticky_packets < 0 || sticky_packets > (1 << 30)) {
    return absl::InvalidArgumentError(fmt::format(
        "forwarding config: sticky_packets is {}, must be in [0, 2^30]", sticky_packets));
  }
  if (bulk_sticky_packets < 0 || bulk_sticky_packets > (1 << 30)) {
    return absl::InvalidArgumentError(fmt::format(
        "forwarding config: bulk_sticky_packets is {}, must be in [0, 2^30]", bulk_sticky_packets));
  }
  if (line_rate.bps() < 0) {
    return absl::InvalidArgumentError(
        fmt::format("forwarding config: line_rate is {} b/s, must be >= 0", line_rate.bps()));
  }
  if (reroute_threshold_bytes < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "forwarding config: reroute_threshold_bytes is {}, must be >= 0", reroute_threshold_bytes));
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
  drill_memory_.clear();
  drill_memory_.shrink_to_fit();
}

}  // namespace dar
