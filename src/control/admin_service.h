// The admin gRPC service (proto/dar/v1/admin.proto) in front of the ControllerCore: topology,
// links with their state and forecast, routes, events, policy, drain and undrain. Every call
// needs a client certificate naming an admin of the controller's trust domain
// (spiffe://<domain>/admin/<name>); anyone else gets PERMISSION_DENIED.
#ifndef DAR_CONTROL_ADMIN_SERVICE_H_
#define DAR_CONTROL_ADMIN_SERVICE_H_

#include "absl/status/status.h"
#include "base/json_log.h"
#include "control/controller_core.h"
#include "dar/v1/admin.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dar::control {

class AdminServiceImpl final : public v1::AdminService::CallbackService {
 public:
  // `core` and `log` must outlive the service.
  AdminServiceImpl(ControllerCore& core, JsonLog& log) : core_(core), log_(log) {}

  grpc::ServerUnaryReactor* GetTopology(grpc::CallbackServerContext* context,
                                        const v1::GetTopologyRequest* request,
                                        v1::TopologyView* response) override;
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* context,
                                      const v1::ListNodesRequest* request,
                                      v1::ListNodesResponse* response) override;
  grpc::ServerUnaryReactor* ListLinks(grpc::CallbackServerContext* context,
                                      const v1::ListLinksRequest* request,
                                      v1::ListLinksResponse* response) override;
  grpc::ServerUnaryReactor* GetRoutes(grpc::CallbackServerContext* context,
                                      const v1::GetRoutesRequest* request,
                                      v1::GetRoutesResponse* response) override;
  grpc::ServerUnaryReactor* ExplainRoute(grpc::CallbackServerContext* context,
                                         const v1::ExplainRouteRequest* request,
                                         v1::RouteExplanation* response) override;
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext* context,
                                       const v1::ListEventsRequest* request,
                                       v1::ListEventsResponse* response) override;
  grpc::ServerUnaryReactor* GetPolicy(grpc::CallbackServerContext* context,
                                      const v1::GetPolicyRequest* request,
                                      v1::PolicySettings* response) override;
  grpc::ServerUnaryReactor* SetPolicy(grpc::CallbackServerContext* context,
                                      const v1::PolicySettings* request,
                                      v1::PolicySettings* response) override;
  grpc::ServerUnaryReactor* DrainLink(grpc::CallbackServerContext* context,
                                      const v1::DrainLinkRequest* request,
                                      v1::DrainLinkResponse* response) override;
  grpc::ServerUnaryReactor* GetKeys(grpc::CallbackServerContext* context,
                                    const v1::GetKeysRequest* request,
                                    v1::KeyRingView* response) override;
  grpc::ServerUnaryReactor* RotateKeys(grpc::CallbackServerContext* context,
                                       const v1::RotateKeysRequest* request,
                                       v1::KeyRingView* response) override;

 private:
  // OK if the caller is an admin; otherwise the refusal is counted and logged.
  absl::Status Authorize(grpc::CallbackServerContext& context, const char* method);

  ControllerCore& core_;
  JsonLog& log_;
};

}  // namespace dar::control

#endif  // DAR_CONTROL_ADMIN_SERVICE_H_
