#include "base/test_support.h"

#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

namespace dar::test {

TempDir::TempDir(std::string_view prefix) {
  std::string path = fmt::format("/tmp/dar_{}_{}_XXXXXX", prefix, getpid());
  if (mkdtemp(path.data()) != nullptr) path_ = std::move(path);
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::File(std::string_view name) const { return fmt::format("{}/{}", path_, name); }

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout,
             std::chrono::milliseconds poll) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace dar::test
