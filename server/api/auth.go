package api

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errAuthUnsupported answers every Auth call that would create or read
// users and roles: Tenure has no password authentication (clients are
// authenticated by TLS certificates), and saying so beats gRPC's "unknown
// service" or an empty user list that could never be filled.
var errAuthUnsupported = status.Error(codes.Unimplemented,
	"tenure: users, roles and password authentication are not supported; authenticate clients with TLS certificates (--client-cert-auth, --trusted-ca-file)")

// authService is etcd's Auth service for a cluster whose authentication is
// off for good: AuthStatus reports it disabled, Authenticate and AuthDisable
// answer as etcd does with auth disabled, and the rest say it is unsupported.
type authService struct {
	pb.UnimplementedAuthServer
	s *Server
}

func (a authService) AuthStatus(context.Context, *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	resp := &pb.AuthStatusResponse{Enabled: false}
	a.s.fill(&resp.Header)
	return resp, nil
}

// Authenticate is what clientv3 calls when given a user name: etcd with
// authentication disabled refuses it with "authentication is not enabled".
func (authService) Authenticate(context.Context, *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	return nil, rpctypes.ErrGRPCAuthNotEnabled
}

// AuthDisable succeeds: authentication is disabled, as asked.
func (a authService) AuthDisable(context.Context, *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	resp := &pb.AuthDisableResponse{}
	a.s.fill(&resp.Header)
	return resp, nil
}

func (authService) AuthEnable(context.Context, *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) UserAdd(context.Context, *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) UserGet(context.Context, *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) UserList(context.Context, *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) UserDelete(context.Context, *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) UserChangePassword(context.Context, *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) UserGrantRole(context.Context, *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) UserRevokeRole(context.Context, *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) RoleAdd(context.Context, *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) RoleGet(context.Context, *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) RoleList(context.Context, *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) RoleDelete(context.Context, *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) RoleGrantPermission(context.Context, *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	return nil, errAuthUnsupported
}

func (authService) RoleRevokePermission(context.Context, *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	return nil, errAuthUnsupported
}
