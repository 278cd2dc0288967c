// The controller's web view in a real browser: `dar-lab up` builds the diamond (A-B-D, A-C-D)
// with the real controller and agents of this build; in the controller's namespace Debian's
// chromium, driven by playwright-core (web/tests/view.mjs), loads the view from the
// controller's http listener, sees the four nodes and A's route to D through B, takes B-D
// down with dar-lab, sees the link turn red and the route move to C, opens a link's charts and
// finds the link_down event. What the script saw is printed.
//
// Needs root (skips otherwise, as every lab test does). Fails without node, /usr/bin/chromium
// or web/node_modules: scripts/install-deps.sh installs all three. The lab is removed by the
// fixture's TearDown, also when the test fails; the browser's screenshots are copied to
// <build>/web-view-test/ first.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "lab/lab_test_util.h"

namespace dar::lab {
namespace {

std::string Bin(const std::string& name) { return BinaryPath(name); }

class WebViewTest : public LabTest {
 protected:
  // Copies the script's screenshots out of the lab dir, which TearDown removes.
  void KeepScreenshots() {
    const std::filesystem::path to = std::filesystem::path(DAR_BINARY_DIR) / "web-view-test";
    std::filesystem::create_directories(to);
    for (const char* name : {"web-view.png", "web-view-failure.png"}) {
      const std::filesystem::path from = std::filesystem::path(dir_) / name;
      std::filesystem::remove(to / name);
      if (std::filesystem::exists(from)) {
        std::filesystem::copy_file(from, to / name);
        std::cout << "screenshot: " << (to / name).string() << "\n";
      }
    }
  }
};

TEST_F(WebViewTest, ShowsTheLabAndFollowsALinkGoingDown) {
  Start("wv", 'w');
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string web = std::string(DAR_SOURCE_DIR) + "/web";
  const std::string install = "run ./scripts/install-deps.sh, which installs it";
  ASSERT_TRUE(runner_.Run({"node", "--version"}).ok()) << "no node: " << install;
  ASSERT_EQ(::access("/usr/bin/chromium", X_OK), 0) << "no /usr/bin/chromium: " << install;
  ASSERT_TRUE(std::filesystem::exists(web + "/node_modules/playwright-core/package.json"))
      << "no " << web << "/node_modules: " << install;

  // C-D is the slower branch, so that A sends its traffic to D through B at first.
  const std::string file = WriteDiamond(
      {"100mbit", "100mbit", "100mbit", "50mbit"},
      fmt::format("  controller:\n    command: [{}, --config, \"{{config}}\", --listen, "
                  "\"{{controller_addr}}\"]\n  agent:\n    command: [{}, --config, "
                  "\"{{config}}\"]\n",
                  Bin("dar-controller"), Bin("dar-agent")));
  const CommandResult up = Cli({"up", file, "--dir", dir_});
  ASSERT_EQ(up.exit_code, 0) << up.out << up.err;

  SubprocessRunner runner(Seconds(240));
  absl::StatusOr<CommandResult> view =
      runner.Execute({"ip", "netns", "exec", Netns("ctl"), "node", web + "/tests/view.mjs",
                      "http://10.255.255.1:9090/", dir_, Bin("dar-lab")});
  ASSERT_TRUE(view.ok()) << view.status();
  std::cout << view->out << view->err;
  KeepScreenshots();
  EXPECT_EQ(view->exit_code, 0) << view->err << "controller log:\n"
                                << ReadFile(dir_ + "/controller.log");
}

}  // namespace
}  // namespace dar::lab
