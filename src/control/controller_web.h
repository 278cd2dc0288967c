// The controller's web view over its plain-HTTP listener (`http`): the JSON API the page reads,
// the server-sent events it follows, and the page itself (web/, compiled in: web_assets.h).
// Read-only: nothing here changes what the controller does.
//
//   GET /  (and the files it loads)         the page (web/)
//   GET /api/topology                       {"version", "decision", "nodes": [NodeView],
//                                            "links": [LinkView]}
//   GET /api/routes?dest=D&class=latency    GetRoutesResponse: every node's row toward D
//   GET /api/explain?node=A&dest=D&class=…  RouteExplanation
//   GET /api/series?src=A&dst=B             {"src", "dst", "horizon_s", "t": [unix s],
//                                            "utilisation", "forecast", "planned", "rtt_ms",
//                                            "queueing_ms": [...]}
//   GET /api/events                         text/event-stream: the newest events, then each
//                                           new one ("event"), and "cycle" {version,
//                                           time_unix_ns} at most once a second
// Messages are JSON by wire/proto_json.h (proto field names, integers as numbers). A bad
// request is 400, an unknown node or link 404, no tables yet 503, each with {"error": "..."}.
// The page and the API answer requests whose Host is an IP address or localhost only (403
// otherwise): a DNS name would let another site's page reach them (DNS rebinding).
#ifndef DAR_CONTROL_CONTROLLER_WEB_H_
#define DAR_CONTROL_CONTROLLER_WEB_H_

#include <chrono>
#include <cstddef>

#include "control/controller_core.h"
#include "net/http_server.h"

namespace dar::control {

// At most this many event streams at once: each holds one of the listener's threads; each
// ends after kEventStreamLifetime (a browser's EventSource opens a new one by itself).
inline constexpr int kMaxEventStreams = 4;
inline constexpr std::chrono::minutes kEventStreamLifetime{10};
// The events a new stream starts with.
inline constexpr size_t kEventsAtConnect = 50;

// Registers the API and the page on `http` (before it starts). `core` outlives `http`'s
// serving.
void AddWebView(net::HttpServer& http, ControllerCore& core);

}  // namespace dar::control

#endif  // DAR_CONTROL_CONTROLLER_WEB_H_
