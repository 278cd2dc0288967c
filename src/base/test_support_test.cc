#include "base/test_support.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace dar::test {
namespace {

TEST(TempDirTest, MadeFreshAndRemovedWithItsContents) {
  std::string path;
  {
    TempDir a("support"), b("support");
    ASSERT_FALSE(a.path().empty());
    EXPECT_NE(a.path(), b.path());
    EXPECT_TRUE(std::filesystem::is_directory(a.path()));
    std::filesystem::create_directories(a.File("sub/dir"));
    std::ofstream(a.File("sub/dir/f")) << "x";
    EXPECT_EQ(a.File("f"), a.path() + "/f");
    path = a.path();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(WaitForTest, TrueAsSoonAsTheConditionHoldsFalseAtTheDeadline) {
  int calls = 0;
  EXPECT_TRUE(WaitFor([&] { return ++calls >= 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(calls, 3);
  calls = 0;
  EXPECT_FALSE(WaitFor([&] { return ++calls < 0; }, std::chrono::milliseconds(0)));
  EXPECT_EQ(calls, 2);  // once before the deadline is seen, once at it
}

}  // namespace
}  // namespace dar::test
