#include "net/http_server.h"

#include <atomic>
#include <chrono>
#include <cstdlib>

#include "fmt/format.h"
#include "httplib.h"

namespace dar::net {

HttpServer::HttpServer(int threads, int keep_alive_requests)
    : server_(std::make_unique<httplib::Server>()) {
  server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  server_->set_read_timeout(2, 0);
  server_->set_write_timeout(2, 0);
  server_->set_keep_alive_timeout(5);
  server_->set_keep_alive_max_count(static_cast<size_t>(keep_alive_requests));
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Get(const std::string& pattern, HttpHandler handler) {
  server_->Get(pattern, std::move(handler));
}

void HttpServer::GetText(const std::string& path, std::function<std::string()> body,
                         const std::string& content_type) {
  server_->Get(path, [body = std::move(body), content_type](const httplib::Request&,
                                                            httplib::Response& res) {
    res.set_content(body(), content_type);
  });
}

void HttpServer::GetProbe(const std::string& path, std::function<std::string()> problem,
                          const std::string& good) {
  server_->Get(
      path, [problem = std::move(problem), good](const httplib::Request&, httplib::Response& res) {
        const std::string text = problem();
        if (text.empty()) {
          res.set_content(good, "text/plain");
        } else {
          res.status = 503;
          res.set_content(text + "\n", "text/plain");
        }
      });
}

absl::StatusOr<int> HttpServer::Start(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(fmt::format("http address '{}': want host:port", address));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const int port = std::atoi(address.c_str() + colon + 1);
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (!server_->bind_to_port(host, port)) {
    bound = -1;
  }
  if (bound < 0) {
    return absl::UnavailableError(fmt::format("http {}: cannot listen there", address));
  }
  auto finished = std::make_shared<std::atomic<bool>>(false);
  thread_ = std::thread([this, finished] {
    server_->listen_after_bind();
    *finished = true;
  });
  // stop() only works on a running server; the socket already listens, so this is short.
  while (!server_->is_running() && !*finished) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (*finished) {
    thread_.join();
    return absl::UnavailableError(fmt::format("http {}: the server stopped at once", address));
  }
  return bound;
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace dar::net
