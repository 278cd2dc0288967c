#include "control/etcd_test_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include "control/etcd_client.h"
#include "fmt/format.h"

extern char** environ;

namespace dar::control::testing {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";

// A port no socket holds now (bound to 0, read back, closed).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

bool EtcdProcess::Available() { return ::access(kEtcd, X_OK) == 0; }

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start() {
  std::unique_ptr<EtcdProcess> e(new EtcdProcess());
  if (e->dir_.path().empty()) return absl::InternalError("no scratch directory for etcd");
  const int client = FreePort();
  const int peer = FreePort();
  e->endpoint_ = fmt::format("127.0.0.1:{}", client);
  const std::string client_url = fmt::format("http://{}", e->endpoint_);
  const std::string peer_url = fmt::format("http://127.0.0.1:{}", peer);
  const std::vector<std::string> argv = {kEtcd,
                                         "--name",
                                         "test",
                                         "--data-dir",
                                         e->dir_.File("data"),
                                         "--listen-client-urls",
                                         client_url,
                                         "--advertise-client-urls",
                                         client_url,
                                         "--listen-peer-urls",
                                         peer_url,
                                         "--initial-advertise-peer-urls",
                                         peer_url,
                                         "--initial-cluster",
                                         fmt::format("test={}", peer_url),
                                         "--heartbeat-interval",
                                         "50",
                                         "--election-timeout",
                                         "500",
                                         "--log-level",
                                         "info"};
  const std::string log = e->dir_.File("etcd.log");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int err = posix_spawn(&e->pid_, kEtcd, &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    e->pid_ = -1;
    return absl::ErrnoToStatus(err, "cannot run etcd");
  }
  // A connection made before etcd serves hangs for seconds: first its log says it serves.
  if (!test::WaitFor(
          [&] {
            return ReadAll(log).find("serving insecure client requests") != std::string::npos;
          },
          std::chrono::seconds(20), std::chrono::milliseconds(20))) {
    return absl::UnavailableError(
        fmt::format("etcd at {} does not serve; its output:\n{}", e->endpoint_, ReadAll(log)));
  }
  EtcdClientOptions o;
  o.endpoint = e->endpoint_;
  absl::StatusOr<std::unique_ptr<EtcdClient>> client_or = EtcdClient::Create(o);
  if (!client_or.ok()) return client_or.status();
  absl::Status last;
  const bool up = test::WaitFor(
      [&] {
        last = (*client_or)->Get("/probe").status();
        return last.ok();
      },
      std::chrono::seconds(20), std::chrono::milliseconds(50));
  if (!up) {
    return absl::UnavailableError(fmt::format("etcd at {} does not answer ({}); its output:\n{}",
                                              e->endpoint_, last.ToString(), ReadAll(log)));
  }
  return e;
}

EtcdProcess::~EtcdProcess() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

void EtcdProcess::Pause() { ::kill(pid_, SIGSTOP); }
void EtcdProcess::Resume() { ::kill(pid_, SIGCONT); }

}  // namespace dar::control::testing
