package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/test/cluster"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // PEM
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue signs a certificate for 127.0.0.1/localhost usable as server and
// client, and returns the cert and key file paths.
func (ca *testCA) issue(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	return ca.issueFor(t, dir, name, []string{"127.0.0.1"}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// issueFor signs a certificate for the given IPs (and the DNS name
// localhost with 127.0.0.1) with only the given extended key usages.
func (ca *testCA) issueFor(t *testing.T, dir, name string, ips []string, usages ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: usages,
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
		if ip == "127.0.0.1" {
			tmpl.DNSNames = []string{"localhost"}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func clientTLS(t *testing.T, caFile, certFile, keyFile string) *tls.Config {
	t.Helper()
	cfg := &tls.Config{}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(b)
	}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

// TestTLS: a 3-member cluster with https:// client and peer URLs and
// client-certificate authentication on both; clients with a certificate
// from the trusted CA are served, others are refused.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "tenure")
	rogue := newTestCA(t, dir, "rogue")
	srvCert, srvKey := ca.issue(t, dir, "server")
	peerCert, peerKey := ca.issue(t, dir, "peer")
	cliCert, cliKey := ca.issue(t, dir, "client")
	badCert, badKey := rogue.issue(t, dir, "intruder")

	c := newProcCluster(t, procOptions{Size: 3, Scheme: "https"})
	c.startAll(
		"--cert-file", srvCert, "--key-file", srvKey, "--trusted-ca-file", ca.file, "--client-cert-auth",
		"--peer-cert-file", peerCert, "--peer-key-file", peerKey, "--peer-trusted-ca-file", ca.file, "--peer-client-cert-auth",
	)
	ctx := testCtx(t, 60*time.Second)
	good := clientTLS(t, ca.file, cliCert, cliKey)
	if err := c.waitReady(ctx, good); err != nil {
		t.Fatalf("cluster over TLS not ready: %v", err)
	}

	t.Run("accepted: clientv3 with a trusted client certificate", func(t *testing.T) {
		cli := c.client(good, c.endpoints()...)
		if _, err := cli.Put(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
		ml, err := cli.MemberList(ctx)
		if err != nil || len(ml.Members) != 3 {
			t.Fatalf("member list: %v %v", ml, err)
		}
		for _, m := range ml.Members {
			if len(m.PeerURLs) != 1 || !strings.HasPrefix(m.PeerURLs[0], "https://") {
				t.Fatalf("peer URLs %v", m.PeerURLs)
			}
		}
	})

	refused := func(t *testing.T, cfg *tls.Config, eps ...string) {
		t.Helper()
		cli := c.client(cfg, eps...)
		rctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		if _, err := cli.Get(rctx, "k"); err == nil {
			t.Fatal("request succeeded; want it refused")
		}
	}
	t.Run("refused: no client certificate", func(t *testing.T) {
		refused(t, clientTLS(t, ca.file, "", ""), c.endpoint(0))
	})
	t.Run("refused: certificate from another CA", func(t *testing.T) {
		refused(t, clientTLS(t, ca.file, badCert, badKey), c.endpoint(0))
	})
	t.Run("refused: plaintext", func(t *testing.T) {
		refused(t, nil, "http://"+c.clients[0])
	})

	etcdctl := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, cluster.EtcdctlBinary(t), append([]string{"--endpoints", c.endpoint(0), "--command-timeout", "2s"}, args...)...)
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "ETCDCTL_API=") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Run("accepted: etcdctl --cacert --cert --key", func(t *testing.T) {
		if out, err := etcdctl("--cacert", ca.file, "--cert", cliCert, "--key", cliKey, "put", "e", "1"); err != nil || !strings.Contains(out, "OK") {
			t.Fatalf("%v %s", err, out)
		}
		if out, err := etcdctl("--cacert", ca.file, "--cert", cliCert, "--key", cliKey, "get", "e", "--print-value-only"); err != nil || strings.TrimSpace(out) != "1" {
			t.Fatalf("%v %s", err, out)
		}
	})
	t.Run("refused: etcdctl without a client certificate", func(t *testing.T) {
		if out, err := etcdctl("--cacert", ca.file, "get", "e"); err == nil {
			t.Fatalf("succeeded: %s", out)
		}
	})
	t.Run("refused: etcdctl with an untrusted server CA", func(t *testing.T) {
		if out, err := etcdctl("--cacert", rogue.file, "--cert", cliCert, "--key", cliKey, "get", "e"); err == nil {
			t.Fatalf("succeeded: %s", out)
		}
	})
	t.Run("tenure CLI with --cacert --cert --key", func(t *testing.T) {
		out, err := c.tenure(ctx, "get", "e", "--endpoints", c.endpoint(1), "--cacert", ca.file, "--cert", cliCert, "--key", cliKey)
		if err != nil || !strings.Contains(out, "1") {
			t.Fatalf("%v %s", err, out)
		}
	})
	t.Run("metrics over https need the client certificate", func(t *testing.T) {
		hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: good}}
		resp, err := hc.Get(c.endpoint(0) + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "tenure_raft_term") {
			t.Fatalf("status %d body %.200s", resp.StatusCode, body)
		}
		hc = &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(t, ca.file, "", "")}}
		if resp, err := hc.Get(c.endpoint(0) + "/metrics"); err == nil {
			resp.Body.Close()
			t.Fatalf("without a client certificate: status %d, want a refused handshake", resp.StatusCode)
		}
	})

	t.Run("JSON gateway over https with the client certificate", func(t *testing.T) {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: good}}
		resp, err := hc.Post(c.endpoint(0)+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"AA==","range_end":"AA=="}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"header"`) {
			t.Fatalf("status %d body %.200s", resp.StatusCode, body)
		}
		hc = &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(t, ca.file, "", "")}}
		if resp, err := hc.Post(c.endpoint(0)+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"AA=="}`)); err == nil {
			resp.Body.Close()
			t.Fatalf("without a client certificate: status %d, want a refused handshake", resp.StatusCode)
		}
	})

	// Last: it shrinks the cluster. A member asked to remove itself forwards
	// the request to another member's https:// client URL, presenting its
	// own certificate to a --client-cert-auth cluster.
	t.Run("MemberRemove of a follower through its own https endpoint", func(t *testing.T) {
		cli := c.client(good, c.endpoints()...)
		follower := -1
		var followerID uint64
		for i := range c.clients {
			st, err := cli.Status(ctx, c.endpoint(i))
			if err != nil {
				t.Fatal(err)
			}
			if st.Leader != st.Header.MemberId {
				follower, followerID = i, st.Header.MemberId
			}
		}
		if follower < 0 {
			t.Fatal("no member reports itself a follower")
		}
		self := c.client(good, c.endpoint(follower))
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := self.MemberRemove(rctx, followerID); err != nil {
			t.Fatalf("removing a follower through its own endpoint: %v", err)
		}
		// The removal went through another member: one of the two that stay
		// counted a forwarded request (without forwarding, a follower may
		// still manage to apply its own removal, so the outcome alone does
		// not prove it).
		hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: good}}
		forwarded := 0.0
		for i := range c.clients {
			if i == follower {
				continue
			}
			resp, err := hc.Get(c.endpoint(i) + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(body), "\n") {
				if v, ok := strings.CutPrefix(line, "tenure_server_forwarded_membership_requests_total "); ok {
					f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
					if err != nil {
						t.Fatalf("metric line %q: %v", line, err)
					}
					forwarded += f
				}
			}
		}
		if forwarded != 1 {
			t.Fatalf("the members that stay counted %v forwarded membership requests, want 1", forwarded)
		}
		other := c.endpoint((follower + 1) % len(c.clients))
		ml, err := c.client(good, other).MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ml.Members) != 2 {
			t.Fatalf("%d members after the removal, want 2", len(ml.Members))
		}
		for _, m := range ml.Members {
			if m.ID == followerID {
				t.Fatalf("removed member %x still listed", followerID)
			}
		}
	})
}

// etcd's --client-cert-file and --peer-client-cert-file: members whose
// certificates are issued for server use only (no clientAuth usage, so Go's
// TLS refuses them from a dialer) present a client certificate when they
// dial: the peers form a cluster under --peer-client-cert-auth, and a
// member's removal of itself, which it forwards to another member's client
// URL under --client-cert-auth, goes through.
func TestTLSSeparateClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "tenure")
	srvCert, srvKey := ca.issueFor(t, dir, "server", []string{"127.0.0.1"}, x509.ExtKeyUsageServerAuth)
	peerCert, peerKey := ca.issueFor(t, dir, "peer", []string{"127.0.0.1"}, x509.ExtKeyUsageServerAuth)
	dialCert, dialKey := ca.issueFor(t, dir, "member-client", []string{"127.0.0.1"}, x509.ExtKeyUsageClientAuth)
	cliCert, cliKey := ca.issueFor(t, dir, "client", []string{"127.0.0.1"}, x509.ExtKeyUsageClientAuth)

	c := newProcCluster(t, procOptions{Size: 3, Scheme: "https"})
	c.startAll(
		"--cert-file", srvCert, "--key-file", srvKey, "--trusted-ca-file", ca.file, "--client-cert-auth",
		"--client-cert-file", dialCert, "--client-key-file", dialKey,
		"--peer-cert-file", peerCert, "--peer-key-file", peerKey, "--peer-trusted-ca-file", ca.file, "--peer-client-cert-auth",
		"--peer-client-cert-file", dialCert, "--peer-client-key-file", dialKey,
	)
	ctx := testCtx(t, 60*time.Second)
	good := clientTLS(t, ca.file, cliCert, cliKey)
	if err := c.waitReady(ctx, good); err != nil {
		t.Fatalf("cluster with server-only member certificates not ready: %v", err)
	}
	cli := c.client(good, c.endpoint(0))
	st, err := cli.Status(ctx, c.endpoint(0))
	if err != nil {
		t.Fatal(err)
	}
	// A member removing itself forwards the removal to another member's
	// client URL (api.Server.forwardRemove), dialing with --client-cert-file.
	// etcd's strict reconfiguration check refuses it as "unhealthy cluster"
	// until the raft streams have been up for 5 s.
	self := st.Header.MemberId
	for {
		_, err := cli.MemberRemove(ctx, self)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") || ctx.Err() != nil {
			t.Fatalf("member %x removing itself (forwarded over TLS): %v", self, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond): // the check's 5 s window, polled
		}
	}
	rest := c.client(good, c.endpoint(1), c.endpoint(2))
	ml, err := rest.MemberList(ctx)
	if err != nil || len(ml.Members) != 2 {
		t.Fatalf("after the removal: %v %v", ml, err)
	}
}

// As in etcd, a member refuses a dialing peer whose certificate does not
// name the address it connects from (here: a client certificate for
// dialing that names 10.1.2.3, used from 127.0.0.1): such a cluster never
// forms. --peer-skip-client-san-verification lets the same certificates
// form one.
func TestTLSPeerCertificateMustNameItsAddress(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "tenure")
	srvCert, srvKey := ca.issue(t, dir, "server")
	cliCert, cliKey := ca.issue(t, dir, "client")
	elsewhere, elsewhereKey := ca.issueFor(t, dir, "elsewhere", []string{"10.1.2.3"}, x509.ExtKeyUsageClientAuth)
	args := []string{
		"--cert-file", srvCert, "--key-file", srvKey, "--trusted-ca-file", ca.file,
		"--peer-cert-file", srvCert, "--peer-key-file", srvKey, "--peer-trusted-ca-file", ca.file, "--peer-client-cert-auth",
		"--peer-client-cert-file", elsewhere, "--peer-client-key-file", elsewhereKey,
	}
	good := clientTLS(t, ca.file, cliCert, cliKey)

	refused := newProcCluster(t, procOptions{Size: 3, Scheme: "https"})
	refused.startAll(args...)
	rctx, cancel := context.WithTimeout(testCtx(t, 60*time.Second), 6*time.Second)
	defer cancel()
	if err := refused.waitReady(rctx, good); err == nil {
		t.Fatal("a cluster whose peers dial with certificates naming another address became ready")
	}

	skipped := newProcCluster(t, procOptions{Size: 3, Scheme: "https"})
	skipped.startAll(append(args, "--peer-skip-client-san-verification")...)
	if err := skipped.waitReady(testCtx(t, 60*time.Second), good); err != nil {
		t.Fatalf("the same certificates with --peer-skip-client-san-verification: %v", err)
	}
}
