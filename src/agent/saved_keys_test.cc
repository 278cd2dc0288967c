#include "agent/saved_keys.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::agent {
namespace {

using ::testing::HasSubstr;

class SavedKeysTest : public ::testing::Test {
 protected:
  SavedKeysTest() {
    std::string path = fmt::format("/tmp/dar_saved_keys_test_{}_XXXXXX", getpid());
    if (mkdtemp(path.data()) != nullptr) dir_ = path;
  }
  ~SavedKeysTest() override {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  std::string File() const { return dir_ + "/state/" + kKeysFileName; }
  void Write(const std::string& text) { std::ofstream(File()) << text; }

  static google::protobuf::RepeatedPtrField<v1::OverlayKey> Keys() {
    google::protobuf::RepeatedPtrField<v1::OverlayKey> keys;
    for (uint32_t id : {4u, 5u}) {
      v1::OverlayKey* k = keys.Add();
      k->set_key_id(id);
      k->set_key(std::string(32, static_cast<char>(id * 17)));
      k->set_active(id == 5);
    }
    return keys;
  }

  std::string dir_;
};

TEST_F(SavedKeysTest, KeysComeBackAsSavedInAFileOnlyTheOwnerReads) {
  ASSERT_FALSE(dir_.empty());
  EXPECT_TRUE(absl::IsNotFound(LoadKeys(dir_ + "/state").status()));
  ASSERT_TRUE(SaveKeys(dir_ + "/state", Keys()).ok());  // creates the state dir
  struct stat st {};
  ASSERT_EQ(::stat(File().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  absl::StatusOr<std::vector<KeyUpdate>> back = LoadKeys(dir_ + "/state");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].id, 4u);
  EXPECT_FALSE((*back)[0].active);
  EXPECT_EQ((*back)[0].key[31], 4 * 17);
  EXPECT_EQ((*back)[1].id, 5u);
  EXPECT_TRUE((*back)[1].active);
  EXPECT_EQ((*back)[1].key[0], 5 * 17);
  EXPECT_EQ(KeyIds(*back).dump(), R"(["4","5*"])");

  // A newer set replaces it whole.
  google::protobuf::RepeatedPtrField<v1::OverlayKey> one = Keys();
  one.DeleteSubrange(0, 1);
  ASSERT_TRUE(SaveKeys(dir_ + "/state", one).ok());
  back = LoadKeys(dir_ + "/state");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].id, 5u);
}

TEST_F(SavedKeysTest, ABadFileIsRefusedNamingItAndTheProblem) {
  ASSERT_TRUE(SaveKeys(dir_ + "/state", Keys()).ok());
  const auto refused = [&](const std::string& text, const std::string& why) {
    Write(text);
    const absl::Status s = LoadKeys(dir_ + "/state").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(s.message()), HasSubstr(File())) << text;
    EXPECT_THAT(std::string(s.message()), HasSubstr(why)) << text;
  };
  refused("", "not a key file");
  refused("{\"format\": \"dar-key-ring/1\", \"keys\": []}", "not a key file");
  refused("{\"format\": 1}", "not a key file");
  refused("{\"format\": null}", "not a key file");
  refused("[1, 2]", "not a key file");
  refused("{\"format\": \"dar-agent-keys/1\"}", "one or two keys");
  refused(R"({"format": "dar-agent-keys/1", "keys": [{"id": 1, "key": "00", "active": true}]})",
          "keys[0].key: must hold 64 hexadecimal digits");
  refused(fmt::format(R"({{"format": "dar-agent-keys/1", "keys": [{{"id": 1, "key": "{}",
          "active": false}}]}})",
                      std::string(64, 'a')),
          "exactly one key must be active");
  // Truncated in the middle.
  refused(R"({"format": "dar-agent-keys/1", "keys": [{"id": 1, "key": ")", "not a key file");
}

// What the controller sends: a row of pair keys, saved and read back as the row.
TEST_F(SavedKeysTest, ARowOfPairKeysComesBackAsTheRow) {
  google::protobuf::RepeatedPtrField<v1::OverlayKey> keys;
  v1::OverlayKey* row = keys.Add();
  row->set_key_id(9);
  row->set_active(true);
  row->set_row(true);
  for (uint32_t node : {2u, 3u}) {
    v1::PeerKey* p = row->add_peers();
    p->set_node_id(node);
    p->set_key(std::string(32, static_cast<char>(node)));
  }
  ASSERT_TRUE(SaveKeys(dir_ + "/state", keys).ok());
  absl::StatusOr<std::vector<KeyUpdate>> back = LoadKeys(dir_ + "/state");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].id, 9u);
  ASSERT_EQ((*back)[0].peers.size(), 2u);
  EXPECT_EQ((*back)[0].peers[1].node_id, 3u);
  EXPECT_EQ((*back)[0].peers[1].key[31], 3);
  std::ifstream in(File());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json saved = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(saved.is_object());
  EXPECT_EQ(saved["keys"][0]["peers"].size(), 2u);
  EXPECT_FALSE(saved["keys"][0].contains("key"));  // a row: no secret

  // A pair key of the wrong size is refused by its key and node.
  row->mutable_peers(0)->set_key("short");
  EXPECT_EQ(ToKeyUpdates(keys).status().message(), "key 9: the key for node 2 has 5 bytes, not 32");
}

TEST(ToKeyUpdatesTest, AKeyOfTheWrongSizeIsRefusedByItsId) {
  google::protobuf::RepeatedPtrField<v1::OverlayKey> keys;
  keys.Add()->set_key(std::string(32, 'x'));
  v1::OverlayKey* bad = keys.Add();
  bad->set_key_id(7);
  bad->set_key("short");
  const absl::Status s = ToKeyUpdates(keys).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "key 7 has 5 bytes, not 32");
}

}  // namespace
}  // namespace dar::agent
