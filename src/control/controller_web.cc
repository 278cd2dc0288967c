#include "control/controller_web.h"

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "control/web_assets.h"
#include "fmt/format.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "wire/proto_json.h"

namespace dar::control {
namespace {

// JSON text; bytes that are not UTF-8 (an event may quote an operator's file) are replaced,
// not thrown on.
std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Whether a request's Host is an IP address or localhost (with or without a port). The page
// and its API answer only those: a page on another site that has a DNS name of its own point
// at this listener (DNS rebinding) reaches it under that name, and is refused.
bool HostIsAnAddress(const httplib::Request& req) {
  std::string host = req.get_header_value("Host");
  if (!host.empty() && host.front() == '[') {  // [v6]:port
    const size_t end = host.find(']');
    if (end == std::string::npos) return false;
    host = host.substr(1, end - 1);
    in6_addr v6;
    return inet_pton(AF_INET6, host.c_str(), &v6) == 1;
  }
  host = host.substr(0, host.find(':'));
  in_addr v4;
  return host == "localhost" || inet_pton(AF_INET, host.c_str(), &v4) == 1;
}

void Reply(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(Dump(body), "application/json");
}

void ReplyError(httplib::Response& res, const absl::Status& status) {
  int code = 500;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      code = 400;
      break;
    case absl::StatusCode::kNotFound:
      code = 404;
      break;
    case absl::StatusCode::kUnavailable:
      code = 503;
      break;
    default:
      break;
  }
  Reply(res, code, {{"error", std::string(status.message())}});
}

// The traffic class a query names: latency (the default), bulk, 0 or 1.
absl::StatusOr<uint32_t> ClassOf(const httplib::Request& req) {
  const std::string c = req.has_param("class") ? req.get_param_value("class") : "latency";
  if (c == "latency" || c == "0") return 0;
  if (c == "bulk" || c == "1") return 1;
  return absl::InvalidArgumentError(fmt::format("class '{}': want latency or bulk (or 0, 1)", c));
}

absl::StatusOr<std::string> Required(const httplib::Request& req, const char* name) {
  if (!req.has_param(name) || req.get_param_value(name).empty()) {
    return absl::InvalidArgumentError(fmt::format("missing the query parameter '{}'", name));
  }
  return req.get_param_value(name);
}

// One server-sent event.
std::string SseMessage(const char* event, const nlohmann::json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", event, Dump(data));
}

}  // namespace

void AddWebView(net::HttpServer& http, ControllerCore& core) {
  const auto get = [&http](const std::string& pattern, net::HttpHandler handler) {
    http.Get(pattern, [handler = std::move(handler)](const httplib::Request& req,
                                                     httplib::Response& res) {
      if (!HostIsAnAddress(req)) {
        return Reply(res, 403,
                     {{"error", fmt::format("Host '{}': the web view answers requests to an IP "
                                            "address or localhost only",
                                            req.get_header_value("Host"))}});
      }
      handler(req, res);
    });
  };
  // The page: each built file at its own path (escaped: the server takes patterns), and the
  // index at /.
  for (const WebAsset& asset : WebAssets()) {
    std::string pattern;
    for (const char ch : asset.path) {
      if (std::string_view(".+*?^$()[]{}|\\").find(ch) != std::string_view::npos) pattern += '\\';
      pattern += ch;
    }
    const auto serve = [asset](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(asset.body), std::string(asset.content_type));
    };
    get(pattern, serve);
    if (asset.path == "/index.html") get("/", serve);
  }

  get("/api/topology", [&core](const httplib::Request&, httplib::Response& res) {
    const v1::TopologyView view = core.GetTopology();
    nlohmann::json out = wire::ToJson(view);
    out["version"] = core.LatestVersion().first;
    out["decision"] = core.DecisionLayer();
    Reply(res, 200, out);
  });

  get("/api/routes", [&core](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<std::string> dest = Required(req, "dest");
    absl::StatusOr<uint32_t> cls = ClassOf(req);
    if (!dest.ok()) return ReplyError(res, dest.status());
    if (!cls.ok()) return ReplyError(res, cls.status());
    v1::GetRoutesRequest request;
    request.set_destination(*dest);
    request.set_traffic_class(*cls);
    absl::StatusOr<v1::GetRoutesResponse> routes = core.GetRoutes(request);
    if (!routes.ok()) return ReplyError(res, routes.status());
    Reply(res, 200, wire::ToJson(*routes));
  });

  get("/api/explain", [&core](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<std::string> node = Required(req, "node");
    absl::StatusOr<std::string> dest = Required(req, "dest");
    absl::StatusOr<uint32_t> cls = ClassOf(req);
    for (const absl::Status& s : {node.status(), dest.status(), cls.status()}) {
      if (!s.ok()) return ReplyError(res, s);
    }
    v1::ExplainRouteRequest request;
    request.set_node(*node);
    request.set_destination(*dest);
    request.set_traffic_class(*cls);
    absl::StatusOr<v1::RouteExplanation> why = core.ExplainRoute(request);
    if (!why.ok()) return ReplyError(res, why.status());
    Reply(res, 200, wire::ToJson(*why));
  });

  get("/api/series", [&core](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<std::string> src = Required(req, "src");
    absl::StatusOr<std::string> dst = Required(req, "dst");
    if (!src.ok()) return ReplyError(res, src.status());
    if (!dst.ok()) return ReplyError(res, dst.status());
    absl::StatusOr<ControllerCore::LinkSeries> series = core.GetLinkSeries(*src, *dst);
    if (!series.ok()) return ReplyError(res, series.status());
    nlohmann::json out = {
        {"src", series->src}, {"dst", series->dst}, {"horizon_s", ToSeconds(series->horizon)}};
    nlohmann::json t = nlohmann::json::array(), u = nlohmann::json::array(),
                   f = nlohmann::json::array(), p = nlohmann::json::array(),
                   rtt = nlohmann::json::array(), q = nlohmann::json::array();
    for (const ControllerCore::LinkPoint& point : series->points) {
      t.push_back(static_cast<double>(point.unix_ns) * 1e-9);
      u.push_back(point.utilisation);
      f.push_back(point.forecast);
      p.push_back(point.planned);
      rtt.push_back(ToMillis(point.rtt));
      q.push_back(ToMillis(point.queueing));
    }
    out["t"] = std::move(t);
    out["utilisation"] = std::move(u);
    out["forecast"] = std::move(f);
    out["planned"] = std::move(p);
    out["rtt_ms"] = std::move(rtt);
    out["queueing_ms"] = std::move(q);
    Reply(res, 200, out);
  });

  // Each stream holds a listener thread while it lasts: a few at most, and each ends when its
  // client goes away (a write fails) or the server stops.
  auto streams = std::make_shared<std::atomic<int>>(0);
  get("/api/events", [&core, streams](const httplib::Request&, httplib::Response& res) {
    if (streams->fetch_add(1) >= kMaxEventStreams) {
      streams->fetch_sub(1);
      return Reply(res, 503,
                   {{"error", fmt::format("at most {} event streams at once", kMaxEventStreams)}});
    }
    // The newest events (oldest of them first), then what comes: one step, so that none
    // falls between the two.
    auto cursor = std::make_shared<uint64_t>(0);
    auto pending = std::make_shared<std::string>();
    for (const v1::Event& e : core.EventsSince(cursor.get(), kEventsAtConnect)) {
      *pending += SseMessage("event", wire::ToJson(e));
    }
    auto last_version = std::make_shared<uint64_t>(0);
    const auto until = std::chrono::steady_clock::now() + kEventStreamLifetime;
    res.set_header("Cache-Control", "no-store");
    res.set_chunked_content_provider(
        "text/event-stream",
        [&core, cursor, pending, last_version, until](size_t, httplib::DataSink& sink) {
          // The server does not catch what a provider throws: nothing may escape.
          try {
            for (const v1::Event& e : core.EventsSince(cursor.get())) {
              *pending += SseMessage("event", wire::ToJson(e));
            }
            const auto [version, at] = core.LatestVersion();
            if (version != *last_version) {
              *last_version = version;
              *pending += SseMessage("cycle", {{"version", version}, {"time_unix_ns", at}});
            }
            if (pending->empty()) *pending = ": idle\n\n";  // finds a client that went away
            const bool wrote = sink.write(pending->data(), pending->size());
            pending->clear();
            // A stream ends after its lifetime: the browser opens a new one, and a client
            // that holds one forever holds a thread forever.
            if (!wrote || std::chrono::steady_clock::now() >= until) return false;
            std::this_thread::sleep_for(std::chrono::seconds(1));
            return sink.is_writable();
          } catch (const std::exception&) {
            return false;
          }
        },
        [streams](bool) { streams->fetch_sub(1); });
  });
}

}  // namespace dar::control
