#include "lab/lab_config.h"

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::lab {
namespace {

using ::testing::HasSubstr;

constexpr char kDiamond[] = R"(name: dmd
underlay: 10.7.0.0/16
nodes:
  - {id: 1, name: A}
  - {id: 2, name: B}
  - {id: 3, name: C}
  - {id: 4, name: D}
links:
  - {a: A, b: B, rate: 100mbit}
  - {a: A, b: C}
  - {a: B, b: D, rate: 1.5Gbit}
  - {a: D, b: C, rate: 10mbps}
services:
  controller:
    command: [dar-controller, --listen, "{controller_addr}", --config, "{config}"]
    port: 7000
  agent:
    command: [dar-agent, --config, "{config}", --id, "{node}", "{{literal}}"]
)";

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<LabConfig> c = ParseLabConfig(text, "t.yaml");
  EXPECT_FALSE(c.ok()) << "parsed:\n" << text;
  return std::string(c.status().message());
}

// The diamond with one line replaced (1-based).
std::string DiamondWithLine(int line, const std::string& replacement) {
  std::vector<std::string> lines;
  std::string current;
  for (char c : std::string(kDiamond)) {
    if (c == '\n') {
      lines.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  lines.at(line - 1) = replacement;
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

TEST(LabConfigTest, ParsesTheDiamond) {
  absl::StatusOr<LabConfig> c = ParseLabConfig(kDiamond, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "dmd");
  EXPECT_EQ(c->underlay_octet, 7);
  ASSERT_EQ(c->nodes.size(), 4u);
  EXPECT_EQ(c->nodes[2].id, 3);
  EXPECT_EQ(c->nodes[2].name, "C");
  ASSERT_EQ(c->links.size(), 4u);
  EXPECT_EQ(c->links[0].a, "A");
  EXPECT_EQ(c->links[0].b, "B");
  EXPECT_EQ(c->links[0].rate, DataRate::Mbps(100));
  EXPECT_FALSE(c->links[1].rate.has_value());
  EXPECT_EQ(c->links[2].rate, DataRate::BitsPerSecond(1'500'000'000));
  EXPECT_EQ(c->links[3].rate, DataRate::Mbps(80));  // 10 megabytes per second
  ASSERT_TRUE(c->controller.has_value());
  EXPECT_EQ(c->controller->command.size(), 5u);
  EXPECT_EQ(c->controller_port, 7000);
  ASSERT_TRUE(c->agent.has_value());
  EXPECT_EQ(c->agent->command[5], "{{literal}}");
}

TEST(LabConfigTest, DefaultsAndOptionalSections) {
  absl::StatusOr<LabConfig> c = ParseLabConfig("name: x\nnodes: [{id: 9, name: n9}]\n", "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->underlay_octet, 1);
  EXPECT_TRUE(c->links.empty());
  EXPECT_FALSE(c->controller.has_value());
  EXPECT_FALSE(c->agent.has_value());
  EXPECT_EQ(c->controller_port, kDefaultControllerPort);
}

TEST(LabConfigTest, TheExampleLabFilesParse) {
  int files = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(fmt::format("{}/lab", DAR_SOURCE_DIR))) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    absl::StatusOr<LabConfig> c = LoadLabConfig(entry.path().string());
    EXPECT_TRUE(c.ok()) << c.status();
  }
  EXPECT_GE(files, 1);
}

TEST(LabConfigTest, FileErrors) {
  EXPECT_THAT(std::string(LoadLabConfig("/nonexistent/lab.yaml").status().message()),
              HasSubstr("cannot open '/nonexistent/lab.yaml'"));
  EXPECT_THAT(ErrorOf("name: [unclosed\n"), HasSubstr("t.yaml: "));
  EXPECT_EQ(ErrorOf("- a\n- b\n"),
            "t.yaml:1: a lab file is a map (name, nodes, links, services), got a list");
  EXPECT_EQ(ErrorOf(""), "t.yaml: name: required");
}

TEST(LabConfigTest, BadNames) {
  EXPECT_EQ(ErrorOf(DiamondWithLine(1, "name: Dmd")),
            "t.yaml:1: name: must be a lower-case letter followed by lower-case letters and "
            "digits, got 'Dmd'");
  EXPECT_EQ(ErrorOf(DiamondWithLine(1, "name: d-m")),
            "t.yaml:1: name: must be a lower-case letter followed by lower-case letters and "
            "digits, got 'd-m'");
  EXPECT_EQ(ErrorOf(DiamondWithLine(1, "name: abcdefghijk")),
            "t.yaml:1: name: 'abcdefghijk' is 11 characters, at most 10: interface names "
            "(<name>-<link>a) must fit in 15 characters");
  EXPECT_EQ(ErrorOf(DiamondWithLine(1, "")), "t.yaml:2: name: required");
}

TEST(LabConfigTest, BadUnderlay) {
  for (const char* bad : {"10.255.0.0/16", "10.1.0.0/24", "192.168.0.0/16", "10.x.0.0/16"}) {
    EXPECT_EQ(ErrorOf(DiamondWithLine(2, fmt::format("underlay: {}", bad))),
              fmt::format("t.yaml:2: underlay: must be 10.<x>.0.0/16 with x in 0..254 (10.255 "
                          "is for management), got '{}'",
                          bad));
  }
}

TEST(LabConfigTest, BadNodes) {
  EXPECT_EQ(ErrorOf("name: x\nnodes: []\n"), "t.yaml:2: nodes: must list at least one node");
  EXPECT_EQ(ErrorOf("name: x\nnodes: 3\n"), "t.yaml:2: nodes: must be a list, got '3'");
  EXPECT_EQ(ErrorOf("name: x\nlinks: []\n"), "t.yaml:1: nodes: required");
  EXPECT_EQ(ErrorOf(DiamondWithLine(5, "  - {id: 0, name: B}")),
            "t.yaml:5: nodes[1].id: must be >= 1 and <= 254, got 0");
  EXPECT_EQ(ErrorOf(DiamondWithLine(5, "  - {id: 255, name: B}")),
            "t.yaml:5: nodes[1].id: must be >= 1 and <= 254, got 255");
  EXPECT_EQ(ErrorOf(DiamondWithLine(5, "  - {id: 1, name: B}")),
            "t.yaml:5: nodes[1].id: 1 is already the id of nodes[0]");
  EXPECT_EQ(ErrorOf(DiamondWithLine(5, "  - {id: 2, name: A}")),
            "t.yaml:5: nodes[1].name: 'A' is already the name of nodes[0]");
  EXPECT_EQ(ErrorOf(DiamondWithLine(5, "  - {id: 2, name: ctl}")),
            "t.yaml:5: nodes[1].name: 'ctl' is reserved for the controller");
  EXPECT_EQ(ErrorOf(DiamondWithLine(5, "  - {id: 2, name: b/c}")),
            "t.yaml:5: nodes[1].name: must be letters, digits and '_', got 'b/c'");
  EXPECT_EQ(ErrorOf(DiamondWithLine(5, "  - {id: 2}")), "t.yaml:5: nodes[1].name: required");
  EXPECT_EQ(ErrorOf(DiamondWithLine(5, "  - {id: 2, name: B, nmae: x}")),
            "t.yaml:5: nodes[1].nmae: unknown key (known: id, name)");
  EXPECT_EQ(ErrorOf(DiamondWithLine(5, "  - B")), "t.yaml:5: nodes[1]: must be a map, got 'B'");
}

TEST(LabConfigTest, BadLinks) {
  EXPECT_EQ(ErrorOf(DiamondWithLine(10, "  - {a: A, b: E}")),
            "t.yaml:10: links[1].b: unknown node 'E' (nodes: A, B, C, D)");
  EXPECT_EQ(ErrorOf(DiamondWithLine(10, "  - {a: A, b: A}")),
            "t.yaml:10: links[1].b: a link from 'A' to itself");
  EXPECT_EQ(ErrorOf(DiamondWithLine(10, "  - {b: A}")), "t.yaml:10: links[1].a: required");
  EXPECT_EQ(ErrorOf(DiamondWithLine(10, "  - {a: B, b: A}")),
            "t.yaml:10: links[1]: B-A is already links[0]; parallel links are not supported");
  EXPECT_EQ(ErrorOf(DiamondWithLine(10, "  - {a: A, b: C, rate: 100}")),
            "t.yaml:10: links[1].rate: must be a rate such as 100mbit (a number and one of bit, "
            "kbit, mbit, gbit, tbit, bps, kbps, mbps, gbps, tbps), got '100'");
  EXPECT_EQ(ErrorOf(DiamondWithLine(10, "  - {a: A, b: C, rate: 1bit}")),
            "t.yaml:10: links[1].rate: rate '1bit' is outside 8kbit..1tbit");
  EXPECT_EQ(ErrorOf(DiamondWithLine(10, "  - {a: A, b: C, delay_ms: 5}")),
            "t.yaml:10: links[1].delay_ms: delay is not supported: the lab shapes links with tc "
            "tbf only (no netem); remove it");
  EXPECT_EQ(ErrorOf(DiamondWithLine(10, "  - {a: A, b: C, loss: 0.01}")),
            "t.yaml:10: links[1].loss: loss is not supported: the lab shapes links with tc tbf "
            "only (no netem); remove it");
  EXPECT_EQ(ErrorOf(DiamondWithLine(10, "  - {a: A, b: C, rtae: 1mbit}")),
            "t.yaml:10: links[1].rtae: unknown key (known: a, b, rate)");
}

TEST(LabConfigTest, TooManyLinks) {
  // 24 nodes have 276 distinct pairs; the 257th link is one too many.
  std::string text = "name: big\nnodes:\n";
  for (int i = 1; i <= 24; ++i) text += fmt::format("  - {{id: {}, name: n{}}}\n", i, i);
  text += "links:\n";
  int count = 0;
  for (int i = 1; i <= 24 && count < 257; ++i) {
    for (int j = i + 1; j <= 24 && count < 257; ++j, ++count) {
      text += fmt::format("  - {{a: n{}, b: n{}}}\n", i, j);
    }
  }
  EXPECT_EQ(ErrorOf(text), "t.yaml:284: links: 257 links, at most 256 (one 10.<x>.<i>.0/30 each)");
}

TEST(LabConfigTest, BadServices) {
  EXPECT_EQ(ErrorOf(DiamondWithLine(15, "    command: []")),
            "t.yaml:15: services.controller.command: must list the program and its arguments");
  EXPECT_EQ(ErrorOf(DiamondWithLine(15, "    command: dar-controller")),
            "t.yaml:15: services.controller.command: must be a list, got 'dar-controller'");
  EXPECT_EQ(ErrorOf(DiamondWithLine(15, "    command: [x, \"{node}\"]")),
            "t.yaml:15: services.controller.command[1]: unknown placeholder '{node}' (known: "
            "{config}, {controller_addr}, {controller_ip}, {controller_port}, {lab}, {lab_dir}, "
            "{netns})");
  EXPECT_EQ(ErrorOf(DiamondWithLine(18, "    command: [x, \"{node\"]")),
            "t.yaml:18: services.agent.command[1]: unmatched '{' in '{node' (write '{{' for a "
            "brace)");
  EXPECT_EQ(ErrorOf(DiamondWithLine(18, "    command: [x, \"a}b\"]")),
            "t.yaml:18: services.agent.command[1]: unmatched '}' in 'a}b' (write '}}' for a "
            "brace)");
  EXPECT_EQ(ErrorOf(DiamondWithLine(16, "    port: 70000")),
            "t.yaml:16: services.controller.port: must be >= 1 and <= 65535, got 70000");
  EXPECT_EQ(ErrorOf(DiamondWithLine(17, "  agnet:")),
            "t.yaml:17: services.agnet: unknown key (known: controller, agent)");
  EXPECT_EQ(ErrorOf(DiamondWithLine(16, "    replicas: 6")),
            "t.yaml:16: services.controller.replicas: must be >= 1 and <= 5, got 6");
  EXPECT_EQ(ErrorOf(DiamondWithLine(16, "    port: 65534\n    replicas: 3")),
            "t.yaml:16: services.controller.port: leaves no port for every replica");
  EXPECT_EQ(ErrorOf(DiamondWithLine(16, "    env: {}")),
            "t.yaml:16: services.controller.env: unknown key (known: command, port, replicas)");
  EXPECT_EQ(ErrorOf(DiamondWithLine(17, "extra:")),
            "t.yaml:17: extra: unknown key (known: name, underlay, nodes, links, services)");
}

TEST(ParseRateTest, UnitsAndErrors) {
  EXPECT_EQ(*ParseRate("100mbit"), DataRate::Mbps(100));
  EXPECT_EQ(*ParseRate("100Mbit"), DataRate::Mbps(100));
  EXPECT_EQ(*ParseRate("2gbit"), DataRate::Gbps(2));
  EXPECT_EQ(*ParseRate("500kbit"), DataRate::BitsPerSecond(500'000));
  EXPECT_EQ(*ParseRate("8000bit"), DataRate::BitsPerSecond(8000));
  EXPECT_EQ(*ParseRate("1kbps"), DataRate::BitsPerSecond(8000));
  EXPECT_EQ(*ParseRate("1tbit"), DataRate::BitsPerSecond(1'000'000'000'000));
  for (const char* bad :
       {"", "mbit", "100", "100 mbit", "1e3mbit", "-1mbit", "5furlongs", "1.2.3mbit"}) {
    EXPECT_FALSE(ParseRate(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseRate("7999bit").status().message(), "rate '7999bit' is outside 8kbit..1tbit");
  EXPECT_FALSE(ParseRate("2tbit").ok());
}

TEST(ParseRateTest, FormatRateRoundTrips) {
  EXPECT_EQ(FormatRate(DataRate::Mbps(100)), "100mbit");
  EXPECT_EQ(FormatRate(DataRate::Gbps(10)), "10gbit");
  EXPECT_EQ(FormatRate(DataRate::BitsPerSecond(1'500'000)), "1500kbit");
  EXPECT_EQ(FormatRate(DataRate::BitsPerSecond(12'345)), "12345bit");
  for (int64_t bps : std::vector<int64_t>{8'000, 12'345, 1'500'000, 100'000'000, 40'000'000'000}) {
    const DataRate r = DataRate::BitsPerSecond(bps);
    EXPECT_EQ(*ParseRate(FormatRate(r)), r);
  }
}

TEST(ExpandCommandTest, ReplacesPlaceholdersAndEscapes) {
  const Placeholders values = {{"node", "3"}, {"config", "/d/C.yaml"}};
  absl::StatusOr<std::vector<std::string>> out =
      ExpandCommand({"agent", "--config={config}", "{node}{node}", "{{x}}", "}}{{"}, values);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, (std::vector<std::string>{"agent", "--config=/d/C.yaml", "33", "{x}", "}{"}));
  EXPECT_EQ(ExpandCommand({"a", "{nope}"}, values).status().message(),
            "command[1]: unknown placeholder '{nope}' (known: {config}, {node})");
}

TEST(LayoutTest, NamesAndAddressesFollowTheScheme) {
  absl::StatusOr<LabConfig> c = ParseLabConfig(kDiamond, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const LabLayout l = MakeLayout(*c);
  EXPECT_EQ(l.prefix(), "dmd-");
  EXPECT_EQ(l.ctl_netns, "dmd-ctl");
  EXPECT_EQ(l.controller_addr(), "10.255.255.1:7000");
  ASSERT_EQ(l.nodes.size(), 4u);
  EXPECT_EQ(l.nodes[1].netns, "dmd-B");
  EXPECT_EQ(l.nodes[1].mgmt_ifname, "dmd-m2");
  EXPECT_EQ(l.nodes[1].mgmt_address, "10.255.2.2");
  EXPECT_EQ(l.nodes[1].ctl_ifname, "dmd-c2");
  EXPECT_EQ(l.nodes[1].ctl_address, "10.255.2.1");
  ASSERT_EQ(l.links.size(), 4u);
  const LinkLayout& dc = l.links[3];
  EXPECT_EQ(dc.a.node, 3);
  EXPECT_EQ(dc.a.ifname, "dmd-3a");
  EXPECT_EQ(dc.a.address, "10.7.3.1");
  EXPECT_EQ(dc.b.node, 2);
  EXPECT_EQ(dc.b.ifname, "dmd-3b");
  EXPECT_EQ(dc.b.address, "10.7.3.2");
  EXPECT_EQ(dc.prefix_length, 30);
  EXPECT_TRUE(dc.up);

  EXPECT_EQ(*l.FindNode("C"), 2);
  EXPECT_EQ(*l.FindNode("3"), 2);
  EXPECT_EQ(l.FindNode("E").status().message(),
            "lab 'dmd' has no node 'E' (nodes: A (1), B (2), C (3), D (4))");
  EXPECT_EQ(*l.FindLink("C", "D"), 3);
  EXPECT_EQ(*l.FindLink("D", "C"), 3);
  EXPECT_EQ(l.FindLink("A", "D").status().message(), "lab 'dmd' has no link between A and D");
}

TEST(LayoutTest, LongestNamesFitInIfnamsiz) {
  // The longest lab name, the largest node id and link index.
  std::string text = "name: abcdefghij\nnodes:\n";
  for (int i = 1; i <= 24; ++i) text += fmt::format("  - {{id: {}, name: n{}}}\n", 230 + i, i);
  text += "links:\n";
  int count = 0;
  for (int i = 1; i <= 24 && count < 256; ++i) {
    for (int j = i + 1; j <= 24 && count < 256; ++j, ++count) {
      text += fmt::format("  - {{a: n{}, b: n{}}}\n", i, j);
    }
  }
  absl::StatusOr<LabConfig> c = ParseLabConfig(text, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const LabLayout l = MakeLayout(*c);
  std::set<std::string> names;
  for (const NodeLayout& n : l.nodes) {
    for (const std::string& name : {n.mgmt_ifname, n.ctl_ifname}) {
      EXPECT_LE(name.size(), 15u) << name;
      EXPECT_TRUE(names.insert(name).second) << name;
    }
  }
  for (const LinkLayout& link : l.links) {
    for (const std::string& name : {link.a.ifname, link.b.ifname}) {
      EXPECT_LE(name.size(), 15u) << name;
      EXPECT_TRUE(names.insert(name).second) << name;
    }
  }
  EXPECT_EQ(l.links.back().b.ifname, "abcdefghij-255b");
  EXPECT_EQ(l.links.back().b.address, "10.1.255.2");
}

}  // namespace
}  // namespace dar::lab
