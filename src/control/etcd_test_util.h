// A real etcd for the tests of the controller's replicas: Debian's `etcd` binary, one member on
// loopback ports picked free, its data in a scratch directory, with a 50 ms heartbeat and a
// 500 ms election timeout so that etcd grants leases of one second (its minimum is 1.5 election
// timeouts, rounded up to a second). Test code only.
#ifndef DAR_CONTROL_ETCD_TEST_UTIL_H_
#define DAR_CONTROL_ETCD_TEST_UTIL_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/test_support.h"

namespace dar::control::testing {

class EtcdProcess {
 public:
  // Whether the etcd binary is installed (tests skip without it).
  static bool Available();
  // Starts etcd and waits until it answers (up to 20 s). Errors: it cannot be run, or it does
  // not answer (its output is in the error).
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start();
  ~EtcdProcess();  // kills it

  const std::string& endpoint() const { return endpoint_; }  // 127.0.0.1:<port>
  // Freezes and thaws the process (SIGSTOP, SIGCONT): etcd unreachable, as a cut-off link.
  void Pause();
  void Resume();

 private:
  EtcdProcess() = default;
  test::TempDir dir_{"etcd"};
  pid_t pid_ = -1;
  std::string endpoint_;
};

}  // namespace dar::control::testing

#endif  // DAR_CONTROL_ETCD_TEST_UTIL_H_
