// Test code, linked into the test programs that run gRPC clients and servers: the program holds
// one reference to the gRPC library from before the first test to after the last, and then
// shuts it down blocking. Without it, the last channel or server to go away starts gRPC's
// shutdown on a thread of its own, and what gRPC frees there (TLS contexts, handshakers) may
// still be in flight when the program exits, where LeakSanitizer checks: an occasional report
// of a few KB "leaked" from libcrypto under a loaded machine, no leak of the code under test.
#include "grpc/grpc.h"
#include "gtest/gtest.h"

namespace {

class GrpcEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { grpc_init(); }
  void TearDown() override { grpc_shutdown_blocking(); }
};

// gtest owns it.
[[maybe_unused]] ::testing::Environment* const kGrpcEnvironment =
    ::testing::AddGlobalTestEnvironment(new GrpcEnvironment);

}  // namespace
