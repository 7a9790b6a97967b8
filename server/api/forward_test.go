package api

import (
	"crypto/tls"
	"testing"

	"google.golang.org/grpc/credentials"

	"github.com/tenure-io/tenure/server/raftnode"
)

// Forwarded requests (a member removing itself, promoting a learner) reach
// other members over whichever client URL they can use: http:// always,
// https:// only with TLS credentials (a TLS-only cluster forwards too).
func TestDialMemberPicksAUsableClientURL(t *testing.T) {
	tlsCreds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	cases := []struct {
		name   string
		urls   []string
		creds  credentials.TransportCredentials
		target string // "" = no connection
	}{
		{"plaintext", []string{"http://127.0.0.1:2379"}, nil, "127.0.0.1:2379"},
		{"https without credentials", []string{"https://127.0.0.1:2379"}, nil, ""},
		{"https with credentials", []string{"https://127.0.0.1:2379"}, tlsCreds, "127.0.0.1:2379"},
		{"first usable of several", []string{"unix:///tmp/x", "https://10.0.0.1:2379", "http://10.0.0.2:2379"}, nil, "10.0.0.2:2379"},
		{"https preferred in order", []string{"https://10.0.0.1:2379", "http://10.0.0.2:2379"}, tlsCreds, "10.0.0.1:2379"},
		{"none", nil, tlsCreds, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn := DialMember(raftnode.Member{ClientURLs: tc.urls}, tc.creds)
			if tc.target == "" {
				if conn != nil {
					conn.Close()
					t.Fatalf("connected to %s, want no usable URL", conn.Target())
				}
				return
			}
			if conn == nil {
				t.Fatalf("no connection, want one to %s", tc.target)
			}
			defer conn.Close()
			if conn.Target() != tc.target {
				t.Fatalf("dialed %s, want %s", conn.Target(), tc.target)
			}
		})
	}
}
