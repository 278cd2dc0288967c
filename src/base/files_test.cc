#include "base/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar {
namespace {

using ::testing::HasSubstr;

// A directory under /tmp removed with everything in it when the test ends, pass or fail.
class ScratchDir {
 public:
  ScratchDir() {
    std::string path = fmt::format("/tmp/dar_files_test_{}_XXXXXX", getpid());
    path_ = mkdtemp(path.data()) != nullptr ? path : "";
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

TEST(FilesTest, ReadErrorsNameThePathAndTheKind) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const absl::StatusOr<std::string> missing = ReadFile(dir.File("nope"));
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir.File("nope")));
  const absl::StatusOr<std::string> directory = ReadFile(dir.path());
  EXPECT_TRUE(absl::IsInvalidArgument(directory.status()));
  EXPECT_THAT(std::string(directory.status().message()), HasSubstr("is a directory"));
  ASSERT_TRUE(WriteFileAtomically(dir.File("big"), std::string(2000, 'x'), 0644).ok());
  const absl::StatusOr<std::string> big = ReadFile(dir.File("big"), 1000);
  EXPECT_TRUE(absl::IsInvalidArgument(big.status()));
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("larger than 1000 bytes"));
  EXPECT_EQ(ReadFile(dir.File("big"), 2000)->size(), 2000u);
}

TEST(FilesTest, AtomicWriteReplacesWithTheExactModeOrRefusesToReplace) {
  ScratchDir dir;
  const std::string f = dir.File("state.json");
  ASSERT_TRUE(WriteFileAtomically(f, "one", 0600).ok());
  ASSERT_TRUE(WriteFileAtomically(f, "two", 0640).ok());
  EXPECT_EQ(*ReadFile(f), "two");
  struct stat st {};
  ASSERT_EQ(stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);  // whatever the umask
  const absl::Status kept = WriteFileAtomically(f, "three", 0600, /*overwrite=*/false);
  EXPECT_TRUE(absl::IsAlreadyExists(kept));
  EXPECT_EQ(*ReadFile(f), "two");
  // No temporary file is left behind either way.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    entries += !e.is_directory();
  EXPECT_EQ(entries, 1);
  EXPECT_TRUE(absl::IsNotFound(WriteFileAtomically(dir.File("no/such/dir"), "x", 0600)));
}

TEST(FilesTest, AtomicWriteGetsPastATemporaryFileLeftByADeadProcessWithItsPid) {
  ScratchDir dir;
  const std::string f = dir.File("state.json");
  const std::string stale = fmt::format("{}.tmp.{}", f, getpid());
  ASSERT_TRUE(WriteFileAtomically(stale, "half a write", 0600).ok());
  ASSERT_TRUE(WriteFileAtomically(f, "whole", 0600).ok());
  EXPECT_EQ(*ReadFile(f), "whole");
  EXPECT_FALSE(std::filesystem::exists(stale));
}

}  // namespace
}  // namespace dar
