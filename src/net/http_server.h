// A small plain-HTTP server for the daemons' operational endpoints (/metrics, /healthz,
// /readyz, the controller's web view): cpp-httplib on a thread pool of its own, with timeouts
// that keep a slow or idle client from holding a thread.
//
// A client gets 2 s for each read and write and a connection at most 5 s idle between
// requests. Handlers are registered before Start and run on the pool's threads, so they must
// be thread-safe.
#ifndef DAR_NET_HTTP_SERVER_H_
#define DAR_NET_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace dar::net {

using HttpHandler = std::function<void(const httplib::Request&, httplib::Response&)>;

class HttpServer {
 public:
  // `threads` serve requests; a connection carries at most `keep_alive_requests` requests
  // (1: one a connection, so an idle keep-alive client cannot hold one of a few threads).
  HttpServer(int threads, int keep_alive_requests);
  ~HttpServer();  // stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves GET `pattern` (an exact path, or a regular expression as cpp-httplib takes it).
  // REQUIRES: before Start.
  void Get(const std::string& pattern, HttpHandler handler);
  // Serves GET `path` with the text `body()` returns, as `content_type`.
  void GetText(const std::string& path, std::function<std::string()> body,
               const std::string& content_type);
  // Serves GET `path` as a probe: 200 with `good` when `problem()` returns empty, else 503
  // with its text.
  void GetProbe(const std::string& path, std::function<std::string()> problem,
                const std::string& good);

  // Binds `address` ("host:port" or "[v6]:port"; port 0 for any free port) and starts
  // serving. Returns the port bound. Errors: InvalidArgument for an address without a port,
  // Unavailable naming the address if it cannot bind.
  absl::StatusOr<int> Start(const std::string& address);
  // Stops serving and joins the thread; no-op when not serving.
  void Stop();

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace dar::net

#endif  // DAR_NET_HTTP_SERVER_H_
