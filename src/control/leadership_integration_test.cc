// Leadership against a real etcd (etcd_test_util.h): one leader among three replicas, terms that
// only grow, a quick handover when the leader stops, a leader cut off from etcd stepping down
// before its lease can end, and writes to the shared state that hold only for the leader.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/test_support.h"
#include "control/etcd_test_util.h"
#include "control/leadership.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dar::control {
namespace {

using testing::EtcdProcess;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

class LeadershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdProcess::Available()) GTEST_SKIP() << "needs etcd (Debian's etcd-server)";
    absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
  }

  struct Replica {
    std::string name;
    std::unique_ptr<Leadership> leadership;
    std::atomic<uint64_t> elected_term{0};
    std::atomic<int> lost{0};
  };

  std::unique_ptr<EtcdClient> Client() {
    EtcdClientOptions o;
    o.endpoint = etcd_->endpoint();
    o.timeout = Milliseconds(250);
    return *EtcdClient::Create(o);
  }

  // Starts replicas r0.. rN-1 with a lease of a second.
  void StartReplicas(int n) {
    for (int i = 0; i < n; ++i) {
      auto r = std::make_unique<Replica>();
      r->name = fmt::format("r{}:5005{}", i, i);
      LeadershipOptions o;
      o.prefix = "/dar/test.dar/";
      o.advertise = r->name;
      o.lease_ttl = Seconds(1);
      Leadership::Callbacks callbacks;
      Replica* raw = r.get();
      callbacks.elected = [raw](uint64_t term) {
        raw->elected_term = term;
        return absl::OkStatus();
      };
      callbacks.lost = [raw](const std::string&) { ++raw->lost; };
      r->leadership = std::make_unique<Leadership>(o, Client(), log_, callbacks);
      r->leadership->Start();
      replicas_.push_back(std::move(r));
    }
  }

  // The one replica that leads, once exactly one does (else null after 10 s).
  Replica* WaitForOneLeader(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    Replica* leader = nullptr;
    test::WaitFor(
        [&] {
          leader = nullptr;
          int leading = 0;
          for (const auto& r : replicas_) {
            if (r->leadership != nullptr && r->leadership->Leading()) {
              leader = r.get();
              ++leading;
            }
          }
          return leading == 1;
        },
        timeout, std::chrono::milliseconds(5));
    return leader;
  }

  int CountLeading() {
    int n = 0;
    for (const auto& r : replicas_) n += r->leadership != nullptr && r->leadership->Leading();
    return n;
  }

  void TearDown() override {
    for (auto& r : replicas_) r->leadership.reset();
    if (etcd_ != nullptr) etcd_->Resume();
  }

  JsonLog log_{[](std::string_view) {}, LogLevel::kError};
  std::unique_ptr<EtcdProcess> etcd_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

TEST_F(LeadershipTest, OneOfThreeLeadsAndAStoppedLeaderHandsOverAtOnce) {
  StartReplicas(3);
  Replica* first = WaitForOneLeader();
  ASSERT_NE(first, nullptr);
  const uint64_t term = first->leadership->term();
  EXPECT_GE(term, 1u);
  EXPECT_EQ(first->elected_term.load(), term);
  // The others wait, and name the leader.
  for (const auto& r : replicas_) {
    if (r.get() == first) continue;
    EXPECT_FALSE(r->leadership->Leading());
    EXPECT_EQ(r->leadership->LeaderAddress(), first->name);
  }
  // Over a few seconds there is never a second leader.
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < until) {
    ASSERT_LE(CountLeading(), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(first->leadership->Leading());

  // A leader that stops resigns: another leads well within a lease, in a later term.
  const auto stopped = Clock::now();
  first->leadership->Stop();
  EXPECT_EQ(first->lost.load(), 1);
  Replica* second = WaitForOneLeader(std::chrono::seconds(5));
  ASSERT_NE(second, nullptr);
  ASSERT_NE(second, first);
  EXPECT_LT(Clock::now() - stopped, std::chrono::milliseconds(900));
  EXPECT_GT(second->leadership->term(), term);
}

// A replica that cannot get ready (its shared state unreadable) gives the lead back and tries
// again later; it leads once it is ready, in a later term, and never counted as leading before.
TEST_F(LeadershipTest, AReplicaNotReadyGivesTheLeadBack) {
  std::atomic<int> refusals{0};
  std::atomic<bool> led_while_refusing{false};
  LeadershipOptions o;
  o.prefix = "/dar/test.dar/";
  o.advertise = "r:1";
  o.lease_ttl = Seconds(1);
  Leadership::Callbacks callbacks;
  std::unique_ptr<Leadership>* self = nullptr;
  callbacks.elected = [&](uint64_t) -> absl::Status {
    if (self != nullptr && *self != nullptr && (*self)->Leading()) led_while_refusing = true;
    if (refusals.load() < 2) {
      ++refusals;
      return absl::UnavailableError("the key ring cannot be read");
    }
    return absl::OkStatus();
  };
  auto leadership = std::make_unique<Leadership>(o, Client(), log_, callbacks);
  self = &leadership;
  leadership->Start();
  ASSERT_TRUE(test::WaitFor([&] { return leadership->Leading(); }, std::chrono::seconds(10)));
  EXPECT_EQ(refusals.load(), 2);
  EXPECT_FALSE(led_while_refusing.load());
  EXPECT_EQ(leadership->term(), 3u);  // each election took a term
  leadership.reset();
}

TEST_F(LeadershipTest, ALeaderCutOffFromEtcdStepsDownBeforeItsLeaseCanEnd) {
  StartReplicas(2);
  Replica* leader = WaitForOneLeader();
  ASSERT_NE(leader, nullptr);
  const uint64_t term = leader->leadership->term();
  // etcd frozen: no keep-alive is answered, and (for etcd) the lease would end one TTL after
  // the last one. The leader must have stopped leading by then, on its own clock.
  const auto paused = Clock::now();
  etcd_->Pause();
  ASSERT_TRUE(test::WaitFor([&] { return !leader->leadership->Leading(); }, std::chrono::seconds(3),
                            std::chrono::milliseconds(2)));
  EXPECT_LT(Clock::now() - paused, std::chrono::milliseconds(1000));
  EXPECT_TRUE(test::WaitFor([&] { return leader->lost.load() == 1; }, std::chrono::seconds(3)));
  EXPECT_EQ(CountLeading(), 0);
  // etcd back: a replica leads again, in a later term.
  etcd_->Resume();
  Replica* next = WaitForOneLeader(std::chrono::seconds(10));
  ASSERT_NE(next, nullptr);
  EXPECT_GT(next->leadership->term(), term);
}

TEST_F(LeadershipTest, OnlyTheLeaderWritesTheSharedState) {
  StartReplicas(2);
  Replica* leader = WaitForOneLeader();
  ASSERT_NE(leader, nullptr);
  Replica* follower = replicas_[0].get() == leader ? replicas_[1].get() : replicas_[0].get();
  ASSERT_TRUE(leader->leadership->store()->Write("operator.json", "{\"a\": 1}").ok());
  absl::StatusOr<std::optional<std::string>> read =
      follower->leadership->store()->Read("operator.json");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ(**read, "{\"a\": 1}");
  const absl::Status refused = follower->leadership->store()->Write("operator.json", "{}");
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("/dar/test.dar/state/operator.json"));
  absl::StatusOr<std::optional<std::string>> none = follower->leadership->store()->Read("nothing");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST_F(LeadershipTest, EtcdRefusesAWriteOfAResignedLeader) {
  std::unique_ptr<EtcdClient> etcd = Client();
  absl::StatusOr<std::pair<int64_t, Duration>> lease = etcd->GrantLease(Seconds(5));
  ASSERT_TRUE(lease.ok()) << lease.status();
  absl::StatusOr<EtcdLeaderKey> key =
      etcd->Campaign("/dar/x/leader", lease->first, "me", Seconds(5));
  ASSERT_TRUE(key.ok()) << key.status();
  absl::StatusOr<bool> put = etcd->PutIf(*key, "/dar/x/state/doc", "1");
  ASSERT_TRUE(put.ok());
  EXPECT_TRUE(*put);
  // The write guarded by the mod revision holds only for the revision read.
  absl::StatusOr<std::optional<EtcdClient::Value>> v = etcd->Get("/dar/x/state/doc");
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_FALSE(*etcd->PutIf(*key, "/dar/x/state/doc", "2", (*v)->mod_revision - 1));
  EXPECT_TRUE(*etcd->PutIf(*key, "/dar/x/state/doc", "2", (*v)->mod_revision));
  ASSERT_TRUE(etcd->Resign(*key).ok());
  absl::StatusOr<bool> late = etcd->PutIf(*key, "/dar/x/state/doc", "3");
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(*late);
  EXPECT_EQ((*etcd->Get("/dar/x/state/doc"))->value, "2");
  EXPECT_FALSE(etcd->Leader("/dar/x/leader")->has_value());
  // An expired lease is NotFound to a keep-alive.
  ASSERT_TRUE(etcd->RevokeLease(lease->first).ok());
  EXPECT_TRUE(absl::IsNotFound(etcd->KeepAlive(lease->first).status()));
}

}  // namespace
}  // namespace dar::control
