// `serving`: request/response traffic from clients to replicated servers (inference serving).
//
// YAML:
//   type: serving
//   clients: [h0, h1]     default: every host that is not a server
//   servers: [h7]         replicas; default: the last host that is not a client
//   rate_per_client: 1000 requests per second per client, Poisson arrivals (required, > 0)
//   request:  {short_kb: 4, long_mb: 2, long_fraction: 0.1}   size mixture (required)
//   response: {kb: 64}                                          size mixture (required)
//   server_time_us: 50    processing delay at the server (any duration unit; default 0)
//   traffic_class: 0      for requests and responses (default 0, the latency class)
//   start_ms: 0           first arrivals after this time (default 0)
//
// A size mixture is either one size ({kb: 64}; units bytes, kb, mb, gb) or a short size with an
// optional long one: {short_kb: 4, long_mb: 2, long_fraction: 0.1} makes 10% of messages 2 MB
// (long-context requests) and the rest 4 KB. Request and response sizes are drawn
// independently. Every request goes to a replica chosen uniformly at random. Servers have no
// queue: each request is answered server_time after it fully arrives. Clients issue no request
// at or after the scenario's end time; the workload is done when every issued request has
// been answered.
//
// Latency = response fully received at the client - request issued.
// Metrics: latency_p50_s, latency_p99_s, latency_p999_s, latency_mean_s, requests_completed,
// requests_issued; with a long request size also latency_{short,long}_{p50,p99}_s and
// requests_long_completed.
#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "fmt/format.h"
#include "sim/workloads/common.h"

namespace dar::sim::workloads {
namespace {

// Sizes drawn from a two-point mixture.
struct SizeMix {
  int64_t short_bytes = 0;
  int64_t long_bytes = 0;
  double long_fraction = 0;  // 0 when there is no long size

  bool has_long() const { return long_fraction > 0; }
};

absl::StatusOr<SizeMix> ReadSizeMix(YamlReader& parent, std::string_view key) {
  ASSIGN_OR_RETURN(YamlReader r, parent.RequiredMap(key));
  SizeMix mix;
  const bool single = r.HasSize("");
  const bool has_short = r.HasSize("short");
  const bool has_long = r.HasSize("long");
  const bool has_fraction = r.Has("long_fraction");
  if (single && (has_short || has_long || has_fraction)) {
    return r.Error("", "give either one size (kb: 64) or short_/long_ sizes, not both");
  }
  if (single) {
    ASSIGN_OR_RETURN(mix.short_bytes, r.RequiredSize("", Bounds::Positive(), kMaxMessageBytes));
  } else {
    ASSIGN_OR_RETURN(mix.short_bytes,
                     r.RequiredSize("short", Bounds::Positive(), kMaxMessageBytes));
    if (has_long != has_fraction) {
      return r.Error(has_long ? "long_fraction" : "long_mb",
                     "long_{bytes,kb,mb,gb} and long_fraction go together");
    }
    if (has_long) {
      ASSIGN_OR_RETURN(mix.long_bytes,
                       r.RequiredSize("long", Bounds::Positive(), kMaxMessageBytes));
      ASSIGN_OR_RETURN(mix.long_fraction, r.Required<double>("long_fraction", Bounds::Fraction()));
    }
  }
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return mix;
}

struct ServingConfig {
  std::vector<NodeId> clients;
  std::vector<NodeId> servers;
  double rate_per_client = 0;
  SizeMix request;
  SizeMix response;
  Duration server_time{0};
  uint8_t traffic_class = 0;
  Duration start{0};
};

class Serving : public Workload {
 public:
  explicit Serving(ServingConfig config) : config_(std::move(config)) {}

  void Start(WorkloadContext& ctx) override {
    loop_ = &ctx.loop;
    transport_ = &ctx.transport;
    rng_ = &ctx.rng;
    records_ = ctx.records;
    end_time_ = ctx.end_time;
    server_timer_ = std::make_unique<Timer>(ctx.loop, [this] { OnServerReady(); });
    const Time first = std::max(ctx.loop.now(), Time{0} + config_.start);
    for (size_t c = 0; c < config_.clients.size(); ++c) {
      arrivals_.push_back(std::make_unique<Timer>(ctx.loop, [this, c] { OnArrival(c); }));
      ScheduleArrival(c, first);
    }
    started_ = true;
  }

  bool Done() const override {
    if (!started_ || outstanding_ > 0) return false;
    return std::none_of(arrivals_.begin(), arrivals_.end(),
                        [](const std::unique_ptr<Timer>& t) { return t->pending(); });
  }

  void Report(nlohmann::json& metrics) const override {
    const std::vector<double>& all = latencies_;
    metrics["requests_issued"] = requests_.size();
    metrics["requests_completed"] = all.size();
    metrics["latency_mean_s"] = MeanOrNull(all);
    metrics["latency_p50_s"] = QuantileOrNull(all, 0.5);
    metrics["latency_p99_s"] = QuantileOrNull(all, 0.99);
    metrics["latency_p999_s"] = QuantileOrNull(all, 0.999);
    if (config_.request.has_long()) {
      metrics["requests_long_completed"] = long_latencies_.size();
      metrics["latency_short_p50_s"] = QuantileOrNull(short_latencies_, 0.5);
      metrics["latency_short_p99_s"] = QuantileOrNull(short_latencies_, 0.99);
      metrics["latency_long_p50_s"] = QuantileOrNull(long_latencies_, 0.5);
      metrics["latency_long_p99_s"] = QuantileOrNull(long_latencies_, 0.99);
    }
  }

 private:
  struct Request {
    size_t client;
    size_t server;
    Time issued;
    bool long_request;
    int64_t request_bytes;
    int64_t response_bytes;
  };

  int64_t Draw(const SizeMix& mix, bool* is_long) {
    *is_long = mix.has_long() && rng_->Uniform() < mix.long_fraction;
    return *is_long ? mix.long_bytes : mix.short_bytes;
  }

  // Schedules client c's next request one exponential gap after `from`, unless that is at or
  // after the end time.
  void ScheduleArrival(size_t c, Time from) {
    const Time at = from + FromSeconds(rng_->Exponential(1.0 / config_.rate_per_client));
    if (at < end_time_) arrivals_[c]->ScheduleAt(at);
  }

  void OnArrival(size_t c) {
    Request req;
    req.client = c;
    req.server = rng_->Below(config_.servers.size());
    req.issued = loop_->now();
    req.request_bytes = Draw(config_.request, &req.long_request);
    bool long_response = false;
    req.response_bytes = Draw(config_.response, &long_response);
    const size_t id = requests_.size();
    requests_.push_back(req);
    ++outstanding_;
    transport_->Send(config_.clients[c], config_.servers[req.server], req.request_bytes,
                     config_.traffic_class,
                     [this, id](const MessageResult&) { OnRequestReceived(id); });
    ScheduleArrival(c, loop_->now());
  }

  // The delay is the same for every request, so requests leave the server in arrival order.
  void OnRequestReceived(size_t id) {
    processing_.push_back({loop_->now() + config_.server_time, id});
    if (!server_timer_->pending()) server_timer_->ScheduleAt(processing_.front().ready);
  }

  void OnServerReady() {
    const Time now = loop_->now();
    while (!processing_.empty() && processing_.front().ready <= now) {
      const size_t id = processing_.front().request;
      processing_.pop_front();
      const Request& req = requests_[id];
      transport_->Send(config_.servers[req.server], config_.clients[req.client], req.response_bytes,
                       config_.traffic_class,
                       [this, id](const MessageResult&) { OnResponseReceived(id); });
    }
    if (!processing_.empty()) server_timer_->ScheduleAt(processing_.front().ready);
  }

  void OnResponseReceived(size_t id) {
    const Request& req = requests_[id];
    const double latency = ToSeconds(loop_->now() - req.issued);
    latencies_.push_back(latency);
    (req.long_request ? long_latencies_ : short_latencies_).push_back(latency);
    if (records_ != nullptr) {
      records_->push_back(WorkRecord{.kind = "request",
                                     .traffic_class = config_.traffic_class,
                                     .bytes = req.request_bytes,
                                     .start = req.issued,
                                     .finish = loop_->now()});
    }
    --outstanding_;
  }

  struct Pending {
    Time ready;
    size_t request;
  };

  ServingConfig config_;
  EventLoop* loop_ = nullptr;
  Transport* transport_ = nullptr;
  Random* rng_ = nullptr;
  WorkRecords* records_ = nullptr;
  Time end_time_{0};
  std::vector<std::unique_ptr<Timer>> arrivals_;  // by client
  std::unique_ptr<Timer> server_timer_;
  std::deque<Pending> processing_;
  std::vector<Request> requests_;
  int64_t outstanding_ = 0;
  std::vector<double> latencies_;
  std::vector<double> short_latencies_;
  std::vector<double> long_latencies_;
  bool started_ = false;
};

absl::StatusOr<WorkloadPtr> CreateServing(const YAML::Node& node, const ConfigContext& ctx) {
  ASSIGN_OR_RETURN(YamlReader r, OpenWorkloadBlock(node, ctx));
  const Topology& topo = *ctx.topology;
  const std::vector<NodeId> all = SendingHosts(topo);
  ServingConfig c;
  const bool has_clients = r.Has("clients");
  const bool has_servers = r.Has("servers");
  if (has_clients) {
    ASSIGN_OR_RETURN(c.clients, r.RequiredHosts("clients", topo));
  }
  if (has_servers) {
    ASSIGN_OR_RETURN(c.servers, r.RequiredHosts("servers", topo));
  }
  if (!has_servers) {
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (std::find(c.clients.begin(), c.clients.end(), *it) == c.clients.end()) {
        c.servers.push_back(*it);
        break;
      }
    }
  }
  if (!has_clients) {
    for (NodeId h : all) {
      if (std::find(c.servers.begin(), c.servers.end(), h) == c.servers.end()) {
        c.clients.push_back(h);
      }
    }
  }
  if (c.servers.empty()) return r.Error("servers", "needs at least one server");
  if (c.clients.empty()) return r.Error("clients", "needs at least one client");
  for (size_t i = 0; i < c.clients.size(); ++i) {
    if (std::find(c.servers.begin(), c.servers.end(), c.clients[i]) != c.servers.end()) {
      return r.Error(fmt::format("clients[{}]", i),
                     fmt::format("'{}' is also a server", topo.node(c.clients[i]).name));
    }
  }
  ASSIGN_OR_RETURN(
      c.rate_per_client,
      r.Required<double>("rate_per_client", Bounds::PositiveAtMost(kMaxArrivalsPerSecond)));
  ASSIGN_OR_RETURN(c.request, ReadSizeMix(r, "request"));
  ASSIGN_OR_RETURN(c.response, ReadSizeMix(r, "response"));
  ASSIGN_OR_RETURN(c.server_time, r.OptionalDuration("server_time", Duration(0)));
  ASSIGN_OR_RETURN(c.traffic_class, ReadTrafficClass(r, 0));
  ASSIGN_OR_RETURN(c.start, r.OptionalDuration("start", Duration(0)));
  RETURN_IF_ERROR(r.CheckNoUnknownKeys());
  return std::make_unique<Serving>(std::move(c));
}

REGISTER_WORKLOAD("serving", CreateServing);

}  // namespace
}  // namespace dar::sim::workloads
