// Mutual TLS 1.3 over real gRPC on 127.0.0.1 with certificates made per test: who is let in,
// who is refused and why. One file: every test shares the certificate fixture.
#include "security/tls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/files.h"
#include "base/test_support.h"
#include "dar/test/echo.grpc.pb.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "grpc/support/log.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "security/certs.h"
#include "security/identity.h"

namespace dar::security {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kDomain = "example.org";
constexpr int kIoTimeoutSeconds = 10;

using test::TempDir;

// The certificates every test uses: a CA with the controller, nodes "n1" and "expired",
// admin "alice"; and a second CA of the same trust domain with its own node "n1".
class Pki {
 public:
  // ok() is false if building failed; the failure is reported to the running test.
  Pki() : now_(absl::Now()) { ok_ = Build().ok(); }

  bool ok() const { return ok_; }
  absl::Time now() const { return now_; }
  std::string dir() const { return dir_.File("main"); }
  std::string other_dir() const { return dir_.File("other"); }

  TlsFiles Files(const SpiffeId& id) const { return FilesIn(dir(), id); }
  TlsFiles OtherCaFiles(const SpiffeId& id) const { return FilesIn(other_dir(), id); }
  static TlsFiles FilesIn(const std::string& dir, const SpiffeId& id) {
    return TlsFiles{fmt::format("{}/{}", dir, CertFileName(id)),
                    fmt::format("{}/{}", dir, KeyFileName(id)),
                    fmt::format("{}/{}", dir, kCaCertFile)};
  }

 private:
  absl::Status Build() {
    for (const std::string& dir : {dir(), other_dir()}) {
      InitCertDirOptions init;
      init.dir = dir;
      init.trust_domain = std::string(kDomain);
      init.not_before = now_ - absl::Hours(72);
      init.not_after = now_ + absl::Hours(24);
      if (absl::Status status = InitCertDir(init); !status.ok()) return Fail(status);
      IssueOptions node;
      node.dir = dir;
      node.name = "n1";
      node.not_before = init.not_before;
      node.not_after = init.not_after;
      if (auto issued = IssueFromCertDir(node); !issued.ok()) return Fail(issued.status());
    }
    IssueOptions admin;
    admin.dir = dir();
    admin.kind = PeerKind::kAdmin;
    admin.name = "alice";
    admin.not_before = now_ - absl::Hours(1);
    admin.not_after = now_ + absl::Hours(1);
    if (auto issued = IssueFromCertDir(admin); !issued.ok()) return Fail(issued.status());
    IssueOptions expired = admin;
    expired.kind = PeerKind::kNode;
    expired.name = "expired";
    expired.not_before = now_ - absl::Hours(48);
    expired.not_after = now_ - absl::Hours(24);
    if (auto issued = IssueFromCertDir(expired); !issued.ok()) return Fail(issued.status());
    return absl::OkStatus();
  }
  static absl::Status Fail(const absl::Status& status) {
    ADD_FAILURE() << "building the test PKI: " << status;
    return status;
  }

  absl::Time now_;
  TempDir dir_;
  bool ok_ = false;
};

// Echoes the text and tells the caller who it is.
class EchoService final : public dar::test::Echo::Service {
 public:
  grpc::Status Echo(grpc::ServerContext* context, const dar::test::EchoRequest* request,
                    dar::test::EchoReply* reply) override {
    calls_.fetch_add(1);
    reply->set_text(request->text());
    absl::StatusOr<SpiffeId> peer = PeerSpiffeId(*context);
    reply->set_peer_identity(peer.ok() ? peer->ToString()
                                       : fmt::format("error: {}", peer.status().ToString()));
    return grpc::Status::OK;
  }
  int calls() const { return calls_.load(); }

 private:
  std::atomic<int> calls_{0};
};

// A gRPC server on 127.0.0.1 with a port picked by the kernel; shut down when destroyed.
class TestServer {
 public:
  explicit TestServer(std::shared_ptr<grpc::ServerCredentials> credentials) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", std::move(credentials), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~TestServer() {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    }
  }

  bool ok() const { return server_ != nullptr && port_ > 0; }
  int port() const { return port_; }
  std::string target() const { return fmt::format("127.0.0.1:{}", port_); }
  const EchoService& service() const { return service_; }

 private:
  EchoService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

struct EchoResult {
  grpc::Status status;
  dar::test::EchoReply reply;
  // The server's identity as the client saw it, if the call went through.
  absl::StatusOr<SpiffeId> server_identity = absl::UnknownError("no call");
};

EchoResult CallEcho(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = dar::test::Echo::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  dar::test::EchoRequest request;
  request.set_text("hello");
  EchoResult result;
  result.status = stub->Echo(&context, request, &result.reply);
  if (result.status.ok()) result.server_identity = PeerSpiffeId(context);
  return result;
}

// A channel with raw gRPC credentials built from the files without any of our checks, to
// present certificates our builders refuse to load (expired, other CA) or none at all.
std::shared_ptr<grpc::Channel> RawChannel(const std::string& target, const std::string& ca_file,
                                          const std::string& cert_file,
                                          const std::string& key_file) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = *ReadFile(ca_file);
  if (!cert_file.empty()) {
    options.pem_cert_chain = *ReadFile(cert_file);
    options.pem_private_key = *ReadFile(key_file);
  }
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(options), args);
}

// Collects gRPC's log lines while alive: gRPC tells why a server-side handshake failed only
// there. One at a time (the log function is process-wide).
class GrpcLogCapture {
 public:
  GrpcLogCapture() {
    std::lock_guard<std::mutex> lock(state().mu);
    state().lines.clear();
    gpr_set_log_function(&GrpcLogCapture::Log);
  }
  ~GrpcLogCapture() { gpr_set_log_function(nullptr); }  // nullptr restores the default
  GrpcLogCapture(const GrpcLogCapture&) = delete;
  GrpcLogCapture& operator=(const GrpcLogCapture&) = delete;

  // True once a line containing `text` has been logged; false after `timeout` without one.
  bool WaitFor(std::string_view text, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(state().mu);
    return state().logged.wait_for(lock, timeout, [&] {
      for (const std::string& line : state().lines) {
        if (line.find(text) != std::string::npos) return true;
      }
      return false;
    });
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable logged;
    std::vector<std::string> lines;
  };
  static State& state() {
    static State* const state = new State();
    return *state;
  }
  static void Log(gpr_log_func_args* args) {
    {
      std::lock_guard<std::mutex> lock(state().mu);
      state().lines.emplace_back(args->message);
    }
    state().logged.notify_all();
  }
};

// ---- Raw OpenSSL peers, to pin the TLS version from outside gRPC. ----

struct SslCtxDeleter {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
struct SslDeleter {
  void operator()(SSL* ssl) const { SSL_free(ssl); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxDeleter>;
using SslPtr = std::unique_ptr<SSL, SslDeleter>;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void SetIoTimeouts(int fd) {
  timeval tv{kIoTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// An SSL_CTX that speaks TLS 1.2 up to `max_version`. EnforceTls13 disabled TLS 1.2 for every
// new SSL_CTX of this process, so the test peers clear that option again: they play the part
// of a foreign TLS 1.2 implementation.
SslCtxPtr MakeRawCtx(const SSL_METHOD* method, int max_version, const TlsFiles& files) {
  SslCtxPtr ctx(SSL_CTX_new(method));
  if (ctx == nullptr) return nullptr;
  SSL_CTX_clear_options(ctx.get(), SSL_OP_NO_TLSv1_2 | SSL_OP_NO_TLSv1_3);
  if (SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(ctx.get(), max_version) != 1 ||
      SSL_CTX_use_certificate_chain_file(ctx.get(), files.cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx.get(), files.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_load_verify_locations(ctx.get(), files.ca_file.c_str(), nullptr) != 1) {
    return nullptr;
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  return ctx;
}

struct RawClientResult {
  bool handshake_ok = false;
  int version = 0;
  unsigned long error = 0;  // the last OpenSSL error of a failed handshake
  std::string error_text;
  // After the handshake: the server answered the HTTP/2 preface with a SETTINGS frame, i.e. it
  // accepted the connection (a TLS 1.3 server checks the client certificate after the client
  // has finished its side of the handshake).
  bool got_http2_settings = false;
};

// Connects to 127.0.0.1:`port` with a raw OpenSSL client presenting `files` and offering TLS
// 1.2 up to `max_version`; with `speak_http2`, sends the HTTP/2 preface and reads the server's
// first frame.
RawClientResult RawTlsClient(int port, const TlsFiles& files, int max_version, bool speak_http2) {
  RawClientResult result;
  ERR_clear_error();
  SslCtxPtr ctx = MakeRawCtx(TLS_client_method(), max_version, files);
  if (ctx == nullptr) {
    result.error_text = "client setup: " + DrainOpenSslErrors();
    return result;
  }
  static constexpr unsigned char kAlpnH2[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpnH2, sizeof(kAlpnH2));
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  SetIoTimeouts(fd.get());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    result.error_text = fmt::format("connect: {}", strerror(errno));
    return result;
  }
  SslPtr ssl(SSL_new(ctx.get()));
  SSL_set_fd(ssl.get(), fd.get());
  SSL_set_tlsext_host_name(ssl.get(), "localhost");
  if (SSL_connect(ssl.get()) != 1) {
    result.error = ERR_peek_last_error();
    result.error_text = DrainOpenSslErrors();
    return result;
  }
  result.handshake_ok = true;
  result.version = SSL_version(ssl.get());
  if (speak_http2) {
    // The client connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5).
    static constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    std::string out(kPreface, sizeof(kPreface) - 1);
    out += std::string("\0\0\0\x04\0\0\0\0\0", 9);
    if (SSL_write(ssl.get(), out.data(), static_cast<int>(out.size())) ==
        static_cast<int>(out.size())) {
      unsigned char header[9];
      size_t have = 0;
      while (have < sizeof(header)) {
        const int n = SSL_read(ssl.get(), header + have, static_cast<int>(sizeof(header) - have));
        if (n <= 0) break;
        have += static_cast<size_t>(n);
      }
      result.got_http2_settings = have == sizeof(header) && header[3] == 0x04;
    }
    if (!result.got_http2_settings) result.error_text = DrainOpenSslErrors();
  }
  SSL_shutdown(ssl.get());
  return result;
}

// A raw OpenSSL server that allows at most `max_version` and serves one handshake on a
// thread; the thread gives up after a timeout, so a test cannot hang on it.
class RawTlsServer {
 public:
  RawTlsServer(const TlsFiles& files, int max_version)
      : ctx_(MakeRawCtx(TLS_server_method(), max_version, files)),
        listen_fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (ctx_ == nullptr || bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listen_fd_.get(), 8) != 0 ||
        getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~RawTlsServer() {
    if (thread_.joinable()) thread_.join();
  }

  int port() const { return port_; }
  // Waits for the one handshake (or the timeout) and tells how it went.
  struct Result {
    bool handshake_ok = false;
    int version = 0;
    unsigned long error = 0;
    std::string error_text = "no connection";
  };
  Result Wait() {
    if (thread_.joinable()) thread_.join();
    return result_;
  }

 private:
  void Serve() {
    pollfd pfd{listen_fd_.get(), POLLIN, 0};
    if (poll(&pfd, 1, 2 * kIoTimeoutSeconds * 1000) != 1) return;
    Fd conn(accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) return;
    SetIoTimeouts(conn.get());
    SslPtr ssl(SSL_new(ctx_.get()));
    SSL_set_fd(ssl.get(), conn.get());
    ERR_clear_error();
    if (SSL_accept(ssl.get()) == 1) {
      result_.handshake_ok = true;
      result_.version = SSL_version(ssl.get());
      result_.error_text.clear();
      SSL_shutdown(ssl.get());
    } else {
      result_.error = ERR_peek_last_error();
      result_.error_text = DrainOpenSslErrors();
    }
  }

  SslCtxPtr ctx_;
  Fd listen_fd_;
  int port_ = 0;
  Result result_;
  std::thread thread_;
};

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(EnforceTls13().ok());
    pki_ = new Pki();
  }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(pki_->ok()); }

  static const Pki& pki() { return *pki_; }
  static SpiffeId Controller() { return SpiffeId::Controller(std::string(kDomain)); }
  static SpiffeId Node(std::string name) { return SpiffeId::Node(std::string(kDomain), name); }

  // A server presenting the controller's certificate.
  static std::unique_ptr<TestServer> StartController() {
    auto credentials = MakeServerCredentials(pki().Files(Controller()), pki().now());
    if (!credentials.ok()) {
      ADD_FAILURE() << credentials.status();
      return nullptr;
    }
    return std::make_unique<TestServer>(*credentials);
  }

  // A channel presenting `id`'s certificate, checking the server's for "localhost".
  static std::shared_ptr<grpc::Channel> ChannelAs(const SpiffeId& id, const std::string& target) {
    ChannelTlsOptions options;
    options.files = pki().Files(id);
    options.server_name = "localhost";
    auto channel = CreateSecureChannel(target, options, pki().now());
    if (!channel.ok()) {
      ADD_FAILURE() << channel.status();
      return nullptr;
    }
    return *channel;
  }

 private:
  static Pki* pki_;
};

Pki* TlsTest::pki_ = nullptr;

TEST_F(TlsTest, EnforceTls13IsIdempotentAndDisablesOlderVersions) {
  EXPECT_TRUE(EnforceTls13().ok());
  EXPECT_TRUE(EnforceTls13().ok());
  SslCtxPtr ctx(SSL_CTX_new(TLS_method()));
  ASSERT_NE(ctx, nullptr);
  // What gRPC does to every SSL_CTX it creates: the bounds do not re-enable TLS 1.2.
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx.get(), TLS1_3_VERSION);
  const uint64_t options = SSL_CTX_get_options(ctx.get());
  EXPECT_NE(options & SSL_OP_NO_TLSv1_2, 0u);
  EXPECT_NE(options & SSL_OP_NO_TLSv1_1, 0u);
  EXPECT_NE(options & SSL_OP_NO_TLSv1, 0u);
  EXPECT_EQ(options & SSL_OP_NO_TLSv1_3, 0u);
}

TEST_F(TlsTest, NodeCallsControllerAndBothSeeEachOthersIdentity) {
  std::unique_ptr<TestServer> server = StartController();
  ASSERT_TRUE(server != nullptr && server->ok());
  EchoResult result = CallEcho(ChannelAs(Node("n1"), server->target()));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.reply.text(), "hello");
  EXPECT_EQ(result.reply.peer_identity(), "spiffe://example.org/node/n1");
  ASSERT_TRUE(result.server_identity.ok()) << result.server_identity.status();
  EXPECT_EQ(*result.server_identity, Controller());
}

TEST_F(TlsTest, AdminIdentityReachesTheServer) {
  std::unique_ptr<TestServer> server = StartController();
  ASSERT_TRUE(server != nullptr && server->ok());
  EchoResult result =
      CallEcho(ChannelAs(SpiffeId::Admin(std::string(kDomain), "alice"), server->target()));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.reply.peer_identity(), "spiffe://example.org/admin/alice");
}

TEST_F(TlsTest, AuthContextCarriesTheUriSan) {
  // PeerSpiffeId relies on gRPC 1.51 putting each URI SAN in "peer_uri" and marking the peer
  // authenticated; pin that down.
  std::unique_ptr<TestServer> server = StartController();
  ASSERT_TRUE(server != nullptr && server->ok());
  auto stub = dar::test::Echo::NewStub(ChannelAs(Node("n1"), server->target()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  dar::test::EchoRequest request;
  dar::test::EchoReply reply;
  ASSERT_TRUE(stub->Echo(&context, request, &reply).ok());
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  ASSERT_NE(auth, nullptr);
  EXPECT_TRUE(auth->IsPeerAuthenticated());
  std::vector<grpc::string_ref> uris = auth->FindPropertyValues("peer_uri");
  ASSERT_EQ(uris.size(), 1u);
  EXPECT_EQ(std::string(uris[0].data(), uris[0].size()), "spiffe://example.org/controller");
  EXPECT_EQ(auth->FindPropertyValues("transport_security_type").size(), 1u);
}

TEST_F(TlsTest, ClientWithoutCertificateIsRefused) {
  std::unique_ptr<TestServer> server = StartController();
  ASSERT_TRUE(server != nullptr && server->ok());
  const TlsFiles files = pki().Files(Node("n1"));
  EchoResult result = CallEcho(RawChannel(server->target(), files.ca_file, "", ""));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << result.status.error_message();
  EXPECT_EQ(server->service().calls(), 0);
}

TEST_F(TlsTest, ClientWithCertificateFromAnotherCaIsRefused) {
  std::unique_ptr<TestServer> server = StartController();
  ASSERT_TRUE(server != nullptr && server->ok());
  // Same trust domain and name, different CA; the client trusts the real CA.
  const TlsFiles other = pki().OtherCaFiles(Node("n1"));
  EchoResult result = CallEcho(RawChannel(server->target(), pki().Files(Node("n1")).ca_file,
                                          other.cert_file, other.key_file));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << result.status.error_message();
  EXPECT_EQ(server->service().calls(), 0);
}

TEST_F(TlsTest, ClientWithExpiredCertificateIsRefused) {
  std::unique_ptr<TestServer> server = StartController();
  ASSERT_TRUE(server != nullptr && server->ok());
  const TlsFiles expired = pki().Files(Node("expired"));
  EchoResult result =
      CallEcho(RawChannel(server->target(), expired.ca_file, expired.cert_file, expired.key_file));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << result.status.error_message();
  EXPECT_EQ(server->service().calls(), 0);
  // The same raw channel with a valid certificate gets through, so the refusal is the
  // certificate's.
  const TlsFiles valid = pki().Files(Node("n1"));
  EchoResult control =
      CallEcho(RawChannel(server->target(), valid.ca_file, valid.cert_file, valid.key_file));
  EXPECT_TRUE(control.status.ok()) << control.status.error_message();
  EXPECT_EQ(server->service().calls(), 1);
}

TEST_F(TlsTest, ServerRefusesTls12ClientWithValidCertificate) {
  std::unique_ptr<TestServer> server = StartController();
  ASSERT_TRUE(server != nullptr && server->ok());
  const TlsFiles node = pki().Files(Node("n1"));

  // TLS 1.2 at most: the server refuses the ClientHello. gRPC closes the connection without
  // flushing its alert (the client sees EOF), but logs OpenSSL's reason.
  {
    GrpcLogCapture log;
    RawClientResult tls12 = RawTlsClient(server->port(), node, TLS1_2_VERSION, false);
    EXPECT_FALSE(tls12.handshake_ok);
    EXPECT_TRUE(log.WaitFor("unsupported protocol", std::chrono::seconds(kIoTimeoutSeconds)))
        << "the server did not report refusing the TLS version; client saw: " << tls12.error_text;
  }

  // The same client and certificate allowed TLS 1.3: handshake, and the server accepts the
  // connection (it answers the HTTP/2 preface).
  RawClientResult tls13 = RawTlsClient(server->port(), node, TLS1_3_VERSION, true);
  EXPECT_TRUE(tls13.handshake_ok) << tls13.error_text;
  EXPECT_EQ(tls13.version, TLS1_3_VERSION);
  EXPECT_TRUE(tls13.got_http2_settings) << tls13.error_text;
  EXPECT_EQ(server->service().calls(), 0);
}

TEST_F(TlsTest, Tls12ClientWorksAgainstATls12Server) {
  // The control for the test above: the raw TLS 1.2 client is a working TLS 1.2 client, so
  // its refusal by our server is the server's doing.
  RawTlsServer raw_server(pki().Files(Controller()), TLS1_2_VERSION);
  ASSERT_GT(raw_server.port(), 0);
  RawClientResult client =
      RawTlsClient(raw_server.port(), pki().Files(Node("n1")), TLS1_2_VERSION, false);
  EXPECT_TRUE(client.handshake_ok) << client.error_text;
  EXPECT_EQ(client.version, TLS1_2_VERSION);
  RawTlsServer::Result server = raw_server.Wait();
  EXPECT_TRUE(server.handshake_ok) << server.error_text;
  EXPECT_EQ(server.version, TLS1_2_VERSION);
}

TEST_F(TlsTest, OurClientRefusesATls12Server) {
  RawTlsServer raw_server(pki().Files(Controller()), TLS1_2_VERSION);
  ASSERT_GT(raw_server.port(), 0);
  EchoResult result =
      CallEcho(ChannelAs(Node("n1"), fmt::format("127.0.0.1:{}", raw_server.port())));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << result.status.error_message();
  // Our client offered TLS 1.3 only, which this server does not speak.
  RawTlsServer::Result server = raw_server.Wait();
  EXPECT_FALSE(server.handshake_ok);
  EXPECT_EQ(ERR_GET_REASON(server.error), SSL_R_UNSUPPORTED_PROTOCOL) << server.error_text;
}

TEST_F(TlsTest, LoadsMaterialAndItsIdentity) {
  absl::StatusOr<TlsMaterial> material = LoadTlsMaterial(pki().Files(Node("n1")), pki().now());
  ASSERT_TRUE(material.ok()) << material.status();
  EXPECT_EQ(material->identity, Node("n1"));
  EXPECT_THAT(material->cert_chain_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_THAT(material->key_pem, HasSubstr("BEGIN PRIVATE KEY"));
  EXPECT_GT(material->not_after, pki().now());
}

TEST_F(TlsTest, LoadErrorsSayWhatAndWhere) {
  const TlsFiles good = pki().Files(Node("n1"));
  const absl::Time now = pki().now();
  TempDir scratch;
  const std::string garbage = scratch.File("garbage.pem");
  {
    FILE* f = fopen(garbage.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n", f);
    fclose(f);
  }
  struct Case {
    std::string label;
    TlsFiles files;
    absl::Time now;
    absl::StatusCode code;
    std::string message;
  };
  TlsFiles missing_key = good;
  missing_key.key_file = scratch.File("nope.key");
  TlsFiles bad_cert = good;
  bad_cert.cert_file = garbage;
  TlsFiles bad_ca = good;
  bad_ca.ca_file = garbage;
  TlsFiles wrong_key = good;
  wrong_key.key_file = pki().Files(SpiffeId::Admin(std::string(kDomain), "alice")).key_file;
  TlsFiles other_ca = pki().OtherCaFiles(Node("n1"));
  other_ca.ca_file = good.ca_file;
  TlsFiles key_as_cert = good;
  key_as_cert.cert_file = good.key_file;
  const Case cases[] = {
      {"missing key", missing_key, now, absl::StatusCode::kNotFound, missing_key.key_file},
      {"bad cert PEM", bad_cert, now, absl::StatusCode::kInvalidArgument,
       garbage + ": bad PEM certificate #1"},
      {"bad CA PEM", bad_ca, now, absl::StatusCode::kInvalidArgument,
       garbage + ": bad PEM certificate #1"},
      {"key as cert", key_as_cert, now, absl::StatusCode::kInvalidArgument,
       good.key_file + ": no PEM certificate found"},
      {"wrong key", wrong_key, now, absl::StatusCode::kInvalidArgument,
       fmt::format("the key in {} does not belong to the certificate in {}", wrong_key.key_file,
                   good.cert_file)},
      {"expired", pki().Files(Node("expired")), now, absl::StatusCode::kFailedPrecondition,
       "node-expired.crt expired at"},
      {"not yet valid", good, now - absl::Hours(100), absl::StatusCode::kFailedPrecondition,
       "node-n1.crt is not valid before"},
      {"other CA", other_ca, now, absl::StatusCode::kInvalidArgument,
       "does not chain to the CA bundle " + good.ca_file},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TlsMaterial> material = LoadTlsMaterial(c.files, c.now);
    ASSERT_FALSE(material.ok()) << c.label;
    EXPECT_EQ(material.status().code(), c.code) << c.label << ": " << material.status();
    EXPECT_THAT(std::string(material.status().message()), HasSubstr(c.message)) << c.label;
  }
  // The builders report the same errors.
  EXPECT_EQ(MakeServerCredentials(pki().Files(Node("expired")), now).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ChannelTlsOptions options;
  options.files = missing_key;
  EXPECT_EQ(MakeChannelSecurity(options, now).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TlsTest, ServerNameMustMatchTheServerCertificate) {
  std::unique_ptr<TestServer> server = StartController();
  ASSERT_TRUE(server != nullptr && server->ok());
  ChannelTlsOptions options;
  options.files = pki().Files(Node("n1"));
  options.server_name = "not-the-controller.example.org";
  auto channel = CreateSecureChannel(server->target(), options, pki().now());
  ASSERT_TRUE(channel.ok()) << channel.status();
  EchoResult result = CallEcho(*channel);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  // Without an override the target's host, 127.0.0.1, is an IP SAN of the controller.
  options.server_name.clear();
  channel = CreateSecureChannel(server->target(), options, pki().now());
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_TRUE(CallEcho(*channel).status.ok());
}

TEST_F(TlsTest, APinnedServerIdentityRefusesANodeCertificateServingAsTheController) {
  // A node's certificate that lists the host names the controller's does, as any certificate
  // of the cluster's CA may: the host name check passes it, the identity check does not.
  const std::string dir = pki().dir();
  IssueOptions impostor;
  impostor.dir = dir;
  impostor.name = "impostor";
  impostor.hosts = {"localhost", "127.0.0.1"};
  impostor.not_before = pki().now() - absl::Hours(1);
  impostor.not_after = pki().now() + absl::Hours(1);
  ASSERT_TRUE(IssueFromCertDir(impostor).ok());
  auto credentials = MakeServerCredentials(pki().Files(Node("impostor")), pki().now());
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  TestServer fake(*credentials);
  ASSERT_TRUE(fake.ok());
  std::unique_ptr<TestServer> real = StartController();
  ASSERT_TRUE(real != nullptr && real->ok());

  ChannelTlsOptions options;
  options.files = pki().Files(Node("n1"));
  options.server_name = "localhost";
  // Without a pinned identity the impostor is taken for the controller.
  EXPECT_TRUE(CallEcho(*CreateSecureChannel(fake.target(), options, pki().now())).status.ok());

  options.server_identity = Controller();
  EchoResult to_fake = CallEcho(*CreateSecureChannel(fake.target(), options, pki().now()));
  EXPECT_EQ(to_fake.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(fake.service().calls(), 1);  // only the unpinned call above reached it
  EchoResult to_real = CallEcho(*CreateSecureChannel(real->target(), options, pki().now()));
  ASSERT_TRUE(to_real.status.ok()) << to_real.status.error_message();
  EXPECT_EQ(to_real.reply.peer_identity(), "spiffe://example.org/node/n1");
  ASSERT_TRUE(to_real.server_identity.ok());
  EXPECT_EQ(*to_real.server_identity, Controller());
}

TEST_F(TlsTest, APinnedClientStillRefusesAnotherCaAndTls12) {
  ChannelTlsOptions options;
  options.files = pki().Files(Node("n1"));
  options.server_name = "localhost";
  options.server_identity = Controller();
  // The controller's identity, from a CA the client does not trust.
  auto other = MakeServerCredentials(pki().OtherCaFiles(Controller()), pki().now());
  ASSERT_TRUE(other.ok()) << other.status();
  TestServer foreign(*other);
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ(
      CallEcho(*CreateSecureChannel(foreign.target(), options, pki().now())).status.error_code(),
      grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(foreign.service().calls(), 0);
  // A TLS 1.2 server with the right certificate.
  RawTlsServer tls12(pki().Files(Controller()), TLS1_2_VERSION);
  ASSERT_GT(tls12.port(), 0);
  EXPECT_EQ(CallEcho(*CreateSecureChannel(fmt::format("127.0.0.1:{}", tls12.port()), options,
                                          pki().now()))
                .status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  RawTlsServer::Result server = tls12.Wait();
  EXPECT_FALSE(server.handshake_ok);
  EXPECT_EQ(ERR_GET_REASON(server.error), SSL_R_UNSUPPORTED_PROTOCOL) << server.error_text;
}

}  // namespace
}  // namespace dar::security
