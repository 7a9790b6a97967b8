package server

import (
	"context"
	"net"
	"net/http"
	"strings"

	gw "github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	etcdgw "go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	electiongw "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb/gw"
	lockgw "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb/gw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
)

// gatewayBufferBytes is the in-process pipe's buffer between the gateway
// and the gRPC server (per direction of each connection).
const gatewayBufferBytes = 1 << 20

// gateway is etcd's gRPC gateway: the v3 API as JSON over HTTP at /v3/ on
// the client URLs (`curl -X POST http://host:2379/v3/kv/range -d
// '{"key":"Zm9v"}'`, etcd3gw and other HTTP clients). It is etcd's own
// generated handlers (etcdserverpb/gw, v3lockpb/gw, v3electionpb/gw) with
// etcd's JSON options, in front of this member's client gRPC server.
//
// The handlers call the gRPC server over an in-process connection rather
// than over the client port as etcd does: no TLS to the member's own
// address to configure, and the HTTP request itself already passed the
// client listener's TLS and client-certificate checks.
type gateway struct {
	lis  *bufconn.Listener
	conn *grpc.ClientConn
	mux  *gw.ServeMux
}

// newGateway registers the gateway's handlers; the caller serves srv on
// g.lis and closes g when the member stops.
func newGateway(ctx context.Context) (*gateway, error) {
	lis := bufconn.Listen(gatewayBufferBytes)
	conn, err := grpc.NewClient("passthrough:///tenure-gateway",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31-1)),
	)
	if err != nil {
		_ = lis.Close()
		return nil, err
	}
	// etcd's marshaller: proto field names, no zero values, unknown
	// fields in requests ignored.
	mux := gw.NewServeMux(gw.WithMarshalerOption(gw.MIMEWildcard, &gw.HTTPBodyMarshaler{
		Marshaler: &gw.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		},
	}))
	for _, register := range []func(context.Context, *gw.ServeMux, *grpc.ClientConn) error{
		etcdgw.RegisterKVHandler,
		etcdgw.RegisterWatchHandler,
		etcdgw.RegisterLeaseHandler,
		etcdgw.RegisterClusterHandler,
		etcdgw.RegisterMaintenanceHandler,
		etcdgw.RegisterAuthHandler,
		lockgw.RegisterLockHandler,
		electiongw.RegisterElectionHandler,
	} {
		if err := register(ctx, mux, conn); err != nil {
			_ = conn.Close()
			_ = lis.Close()
			return nil, err
		}
	}
	return &gateway{lis: lis, conn: conn, mux: mux}, nil
}

// ServeHTTP serves /v3/ and, as etcd still does, /v3beta/ as /v3/.
func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v3beta/"); ok {
		r.URL.Path = "/v3/" + rest
	}
	g.mux.ServeHTTP(w, r)
}

func (g *gateway) close() {
	_ = g.conn.Close()
	_ = g.lis.Close()
}
