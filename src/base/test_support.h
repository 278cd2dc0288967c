// What DAR's tests share: a scratch directory that cleans up after itself, and waiting for a
// condition with a deadline (for tests of real processes, sockets and threads, where nothing
// can be awaited directly). Test code only: linked through dar_test_support.
#ifndef DAR_BASE_TEST_SUPPORT_H_
#define DAR_BASE_TEST_SUPPORT_H_

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace dar::test {

// A fresh directory under /tmp ("/tmp/dar_<prefix>_<pid>_XXXXXX"), removed with everything in
// it when the object goes, pass or fail. path() is empty if it could not be made.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // `name` inside the directory.
  std::string File(std::string_view name) const;

 private:
  std::string path_;
};

// Polls `done` every `poll` until it holds or `timeout` has passed; returns its last value.
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout,
             std::chrono::milliseconds poll = std::chrono::milliseconds(2));

}  // namespace dar::test

#endif  // DAR_BASE_TEST_SUPPORT_H_
