#include "control/admin_service.h"

#include "control/controller_service.h"
#include "fmt/format.h"
#include "security/identity.h"
#include "security/revocation.h"

namespace dar::control {
namespace {

// Runs `body` (returning absl::Status) if the caller is an admin and finishes the call.
template <typename Body>
grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* context, absl::Status authorized,
                                Body body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(authorized.ok() ? body() : authorized));
  return reactor;
}

}  // namespace

absl::Status AdminServiceImpl::Authorize(grpc::CallbackServerContext& context, const char* method) {
  absl::StatusOr<security::SpiffeId> peer = security::PeerSpiffeId(context);
  absl::Status status =
      peer.ok()
          ? core_.CheckAdmin(*peer)
          : absl::PermissionDeniedError(fmt::format("admin API: no usable client identity: {}",
                                                    std::string(peer.status().message())));
  if (status.ok()) {
    absl::StatusOr<std::string> serial = security::PeerCertificateSerial(context);
    status = serial.ok() ? core_.CheckNotRevoked(*serial, "admin API: " + peer->ToString())
                         : absl::PermissionDeniedError(fmt::format(
                               "admin API: {}", std::string(serial.status().message())));
  }
  // A replica that does not lead holds nothing an operator wants (no agent, no tables), and a
  // change made there would be lost: the leader is named instead.
  if (status.ok()) {
    if (std::string not_leading = core_.NotLeading(); !not_leading.empty()) {
      return absl::FailedPreconditionError(not_leading);
    }
  }
  if (!status.ok()) {
    log_.Warn(
        "admin call refused",
        {{"method", method}, {"peer", context.peer()}, {"reason", std::string(status.message())}});
    core_.OnAdminRefused(peer.ok() ? peer->ToString() : context.peer(), status);
  }
  return status;
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetTopology(grpc::CallbackServerContext* context,
                                                        const v1::GetTopologyRequest*,
                                                        v1::TopologyView* response) {
  return Serve(context, Authorize(*context, "GetTopology"), [&] {
    *response = core_.GetTopology();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListNodes(grpc::CallbackServerContext* context,
                                                      const v1::ListNodesRequest*,
                                                      v1::ListNodesResponse* response) {
  return Serve(context, Authorize(*context, "ListNodes"), [&] {
    for (v1::NodeView& n : core_.ListNodes()) *response->add_nodes() = std::move(n);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListLinks(grpc::CallbackServerContext* context,
                                                      const v1::ListLinksRequest*,
                                                      v1::ListLinksResponse* response) {
  return Serve(context, Authorize(*context, "ListLinks"), [&] {
    for (v1::LinkView& l : core_.ListLinks()) *response->add_links() = std::move(l);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetRoutes(grpc::CallbackServerContext* context,
                                                      const v1::GetRoutesRequest* request,
                                                      v1::GetRoutesResponse* response) {
  return Serve(context, Authorize(*context, "GetRoutes"), [&] {
    absl::StatusOr<v1::GetRoutesResponse> routes = core_.GetRoutes(*request);
    if (!routes.ok()) return routes.status();
    *response = std::move(*routes);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ExplainRoute(grpc::CallbackServerContext* context,
                                                         const v1::ExplainRouteRequest* request,
                                                         v1::RouteExplanation* response) {
  return Serve(context, Authorize(*context, "ExplainRoute"), [&] {
    absl::StatusOr<v1::RouteExplanation> why = core_.ExplainRoute(*request);
    if (!why.ok()) return why.status();
    *response = std::move(*why);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListEvents(grpc::CallbackServerContext* context,
                                                       const v1::ListEventsRequest* request,
                                                       v1::ListEventsResponse* response) {
  return Serve(context, Authorize(*context, "ListEvents"), [&] {
    for (v1::Event& e : core_.ListEvents(request->limit())) *response->add_events() = std::move(e);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetPolicy(grpc::CallbackServerContext* context,
                                                      const v1::GetPolicyRequest*,
                                                      v1::PolicySettings* response) {
  return Serve(context, Authorize(*context, "GetPolicy"), [&] {
    *response = core_.GetPolicy();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::SetPolicy(grpc::CallbackServerContext* context,
                                                      const v1::PolicySettings* request,
                                                      v1::PolicySettings* response) {
  return Serve(context, Authorize(*context, "SetPolicy"), [&] {
    absl::StatusOr<v1::PolicySettings> policy = core_.SetPolicy(*request);
    if (!policy.ok()) return policy.status();
    *response = std::move(*policy);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::DrainLink(grpc::CallbackServerContext* context,
                                                      const v1::DrainLinkRequest* request,
                                                      v1::DrainLinkResponse* response) {
  return Serve(context, Authorize(*context, "DrainLink"), [&] {
    absl::StatusOr<bool> changed = core_.Drain(request->a(), request->b(), request->drain());
    if (!changed.ok()) return changed.status();
    response->set_changed(*changed);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetKeys(grpc::CallbackServerContext* context,
                                                    const v1::GetKeysRequest*,
                                                    v1::KeyRingView* response) {
  return Serve(context, Authorize(*context, "GetKeys"), [&] {
    *response = core_.GetKeys();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::RotateKeys(grpc::CallbackServerContext* context,
                                                       const v1::RotateKeysRequest*,
                                                       v1::KeyRingView* response) {
  return Serve(context, Authorize(*context, "RotateKeys"), [&] {
    absl::StatusOr<v1::KeyRingView> view = core_.RotateKeys();
    if (!view.ok()) return view.status();
    *response = std::move(*view);
    return absl::OkStatus();
  });
}

}  // namespace dar::control
