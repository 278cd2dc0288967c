// darctl: the operator's tool. main() only builds the command tree: each group of subcommands
// is added by one Add<Group>Commands(CLI::App&) call ("certs" here; "show", "policy" and
// "link", which talk to the controller, in darctl_admin.cc).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/version.h"
#include "cli/darctl_admin.h"
#include "fmt/format.h"
#include "security/certs.h"
#include "security/revocation.h"
#include "security/tls.h"

namespace dar::cli {
namespace {

// New certificates are valid from a few minutes ago, so that a peer whose clock is slightly
// behind accepts them at once.
constexpr absl::Duration kClockSkewAllowance = absl::Minutes(5);

void Fail(std::string_view command, const absl::Status& status) {
  std::cerr << "darctl " << command << ": " << status.message() << "\n";
  throw CLI::RuntimeError(1);
}

struct CertsInitFlags {
  std::string dir;
  std::string domain;
  int days = 365;
  std::vector<std::string> controller_hosts = {"localhost", "127.0.0.1"};
  bool force = false;
};

struct CertsIssueFlags {
  std::string dir;
  std::string node;
  std::string admin;
  bool controller = false;
  std::vector<std::string> hosts;
  int days = 365;
  bool force = false;
};

struct CertsRevokeFlags {
  std::string dir;
  std::string node;
  std::string admin;
  std::string cert;
};

void RunCertsInit(const CertsInitFlags& flags) {
  const absl::Time now = absl::Now();
  security::InitCertDirOptions options;
  options.dir = flags.dir;
  options.trust_domain = flags.domain;
  options.not_before = now - kClockSkewAllowance;
  options.not_after = now + absl::Hours(24) * flags.days;
  options.controller_hosts = flags.controller_hosts;
  options.overwrite = flags.force;
  if (absl::Status status = security::InitCertDir(options); !status.ok()) {
    Fail("certs init", status);
  }
  const security::SpiffeId controller = security::SpiffeId::Controller(flags.domain);
  std::cout << fmt::format(
      "CA for spiffe://{0}: {1}/{2} (key {1}/{3})\n"
      "controller {4}: {1}/{5} (key {1}/{6})\nvalid until {7}\n",
      flags.domain, flags.dir, security::kCaCertFile, security::kCaKeyFile, controller.ToString(),
      security::CertFileName(controller), security::KeyFileName(controller),
      security::FormatCertTime(options.not_after));
}

void RunCertsIssue(const CertsIssueFlags& flags) {
  const int kinds =
      (flags.node.empty() ? 0 : 1) + (flags.admin.empty() ? 0 : 1) + (flags.controller ? 1 : 0);
  if (kinds != 1) {
    Fail("certs issue",
         absl::InvalidArgumentError("give exactly one of --node ID, --admin NAME, --controller"));
  }
  const absl::Time now = absl::Now();
  security::IssueOptions options;
  options.dir = flags.dir;
  if (!flags.node.empty()) {
    options.kind = security::PeerKind::kNode;
    options.name = flags.node;
  } else if (!flags.admin.empty()) {
    options.kind = security::PeerKind::kAdmin;
    options.name = flags.admin;
  } else {
    options.kind = security::PeerKind::kController;
  }
  options.hosts = flags.hosts;
  if (flags.controller && options.hosts.empty()) options.hosts = {"localhost", "127.0.0.1"};
  options.not_before = now - kClockSkewAllowance;
  options.not_after = now + absl::Hours(24) * flags.days;
  options.overwrite = flags.force;
  absl::StatusOr<security::IssuedCertificate> issued = security::IssueFromCertDir(options);
  if (!issued.ok()) Fail("certs issue", issued.status());
  std::cout << fmt::format("{}: {} (key {})\nvalid until {}{}\n", issued->id.ToString(),
                           issued->cert_path, issued->key_path,
                           security::FormatCertTime(issued->not_after),
                           issued->capped_at_ca ? " (the CA's end)" : "");
}

void RunCertsRevoke(const CertsRevokeFlags& flags) {
  const int kinds =
      (flags.node.empty() ? 0 : 1) + (flags.admin.empty() ? 0 : 1) + (flags.cert.empty() ? 0 : 1);
  if (kinds != 1) {
    Fail("certs revoke",
         absl::InvalidArgumentError("give exactly one of --node ID, --admin NAME, --cert FILE"));
  }
  std::string cert = flags.cert;
  if (cert.empty()) {
    const security::SpiffeId id = flags.node.empty()
                                      ? security::SpiffeId::Admin("unused", flags.admin)
                                      : security::SpiffeId::Node("unused", flags.node);
    if (absl::Status s = security::ValidateIdentityName(id.name); !s.ok()) Fail("certs revoke", s);
    cert = flags.dir + "/" + security::CertFileName(id);
  }
  absl::StatusOr<std::string> serial = security::RevokeInCertDir(flags.dir, cert, absl::Now());
  if (!serial.ok()) Fail("certs revoke", serial.status());
  std::cout << fmt::format(
      "revoked {} (serial {}) in {}/{}\nthe controller refuses it after its next start or "
      "SIGHUP (its tls.crl must name this file)\n",
      cert, *serial, flags.dir, security::kCrlFile);
}

void AddCertsCommands(CLI::App& app) {
  CLI::App* certs = app.add_subcommand("certs", "Certificates for mutual TLS");
  certs->require_subcommand(1);

  auto init = std::make_shared<CertsInitFlags>();
  CLI::App* init_cmd = certs->add_subcommand(
      "init", "Create a CA (EC P-256) and the controller's certificate in a directory");
  init_cmd->add_option("--dir", init->dir, "Directory for the files (created, mode 0700)")
      ->required();
  init_cmd->add_option("--domain", init->domain, "Trust domain, e.g. example.org")->required();
  init_cmd->add_option("--days", init->days, "Validity of the CA and controller certificate")
      ->check(CLI::Range(1, 36500))
      ->capture_default_str();
  init_cmd
      ->add_option("--controller-host", init->controller_hosts,
                   "DNS name or IP address of the controller, repeatable (replaces the default)")
      ->capture_default_str();
  init_cmd->add_flag("--force", init->force, "Replace existing files");
  init_cmd->callback([init] { RunCertsInit(*init); });

  auto issue = std::make_shared<CertsIssueFlags>();
  CLI::App* issue_cmd = certs->add_subcommand(
      "issue", "Issue a node, admin or controller certificate with the directory's CA");
  issue_cmd->add_option("--dir", issue->dir, "Directory holding ca.crt and ca.key")->required();
  issue_cmd->add_option("--node", issue->node, "Node id: spiffe://<domain>/node/<ID>");
  issue_cmd->add_option("--admin", issue->admin, "Operator: spiffe://<domain>/admin/<NAME>");
  issue_cmd->add_flag("--controller", issue->controller,
                      "Renew the controller's certificate (spiffe://<domain>/controller)");
  issue_cmd->add_option("--host", issue->hosts,
                        "DNS name or IP address to add as a SAN, repeatable (--controller: "
                        "default localhost and 127.0.0.1)");
  issue_cmd->add_option("--days", issue->days, "Validity (capped at the CA's)")
      ->check(CLI::Range(1, 36500))
      ->capture_default_str();
  issue_cmd->add_flag("--force", issue->force, "Replace existing files");
  issue_cmd->callback([issue] { RunCertsIssue(*issue); });

  auto revoke = std::make_shared<CertsRevokeFlags>();
  CLI::App* revoke_cmd = certs->add_subcommand(
      "revoke",
      "Add a certificate to the CA's revocation list (ca.crl), which the controller "
      "checks every client against");
  revoke_cmd->add_option("--dir", revoke->dir, "Directory holding ca.crt and ca.key")->required();
  revoke_cmd->add_option("--node", revoke->node, "Revoke node-<ID>.crt of the directory");
  revoke_cmd->add_option("--admin", revoke->admin, "Revoke admin-<NAME>.crt of the directory");
  revoke_cmd->add_option("--cert", revoke->cert, "Revoke this certificate file");
  revoke_cmd->callback([revoke] { RunCertsRevoke(*revoke); });
}

}  // namespace
}  // namespace dar::cli

int main(int argc, char** argv) {
  // Before anything can create a TLS context (security/tls.h).
  if (absl::Status status = dar::security::EnforceTls13(); !status.ok()) {
    std::cerr << "darctl: " << status.message() << "\n";
    return 1;
  }
  CLI::App app{"darctl: operate a DAR deployment"};
  app.set_version_flag("--version", dar::VersionLine("darctl"));
  app.require_subcommand(1);
  dar::cli::AddCertsCommands(app);
  dar::cli::AddAdminCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a command ran and failed; it said why
  } catch (const CLI::ParseError& e) {
    // --help and --version print and exit 0; a bad command line is a usage error, exit 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}
