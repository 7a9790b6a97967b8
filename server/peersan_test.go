package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

type fakeResolver map[string][]string

func (f fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	ips, ok := f[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []net.IPAddr
	for _, s := range ips {
		out = append(out, net.IPAddr{IP: net.ParseIP(s)})
	}
	return out, nil
}

func TestCheckCertSAN(t *testing.T) {
	r := fakeResolver{"peer-a.example": {"10.0.0.1"}, "peer-b.example": {"10.0.0.2", "10.0.0.3"}}
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		ips    []string
		dns    []string
		remote string
		ok     bool
	}{
		{"no SAN at all passes, as in etcd", nil, nil, "10.9.9.9:4000", true},
		{"IP SAN equal to the address", []string{"10.0.0.1"}, nil, "10.0.0.1:4000", true},
		{"IP SAN of another host", []string{"10.0.0.1"}, nil, "10.0.0.7:4000", false},
		{"DNS SAN resolving to the address", nil, []string{"peer-b.example"}, "10.0.0.3:4000", true},
		{"DNS SAN resolving elsewhere", nil, []string{"peer-a.example"}, "10.0.0.3:4000", false},
		{"unresolvable DNS SAN", nil, []string{"gone.example"}, "10.0.0.1:4000", false},
		{"IP SAN misses, DNS SAN matches", []string{"10.0.0.9"}, []string{"peer-a.example"}, "10.0.0.1:4000", true},
		{"IPv6 loopback", []string{"::1"}, nil, "[::1]:4000", true},
	} {
		cert := &x509.Certificate{Subject: pkix.Name{CommonName: "m1"}, DNSNames: c.dns}
		for _, s := range c.ips {
			cert.IPAddresses = append(cert.IPAddresses, net.ParseIP(s))
		}
		err := checkCertSAN(ctx, cert, c.remote, r)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--peer-skip-client-san-verification") {
			t.Errorf("%s: %v does not say how to turn the check off", c.name, err)
		}
	}
}

// certFor issues a certificate from a fresh CA (returned as a pool) for
// server and client use, naming the given IPs.
func certFor(t *testing.T, ips ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "member"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, s := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(s))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// Through the listener: a peer whose certificate names the address it
// dials from is served; one whose certificate names another host is cut
// off at the handshake, before the peer server reads a byte.
func TestPeerListenerChecksTheDialersSAN(t *testing.T) {
	for _, c := range []struct {
		certIP string
		served bool
	}{{"127.0.0.1", true}, {"10.1.2.3", false}} {
		cert, pool := certFor(t, c.certIP)
		srvCert, _ := certFor(t, "127.0.0.1")
		raw, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l := sanCheckListener{tls.NewListener(raw, &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})}
		got := make(chan error, 1)
		go func() {
			conn, err := l.Accept()
			if err != nil {
				got <- err
				return
			}
			defer conn.Close()
			b := make([]byte, 5)
			_, err = io.ReadFull(conn, b)
			if err == nil && string(b) != "hello" {
				err = errors.New("read " + string(b))
			}
			got <- err
		}()
		conn, err := tls.Dial("tcp", raw.Addr().String(), &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true})
		if err == nil {
			_, _ = conn.Write([]byte("hello"))
		}
		err = <-got
		if c.served && err != nil {
			t.Errorf("certificate naming %s: refused: %v", c.certIP, err)
		}
		if !c.served && (err == nil || !strings.Contains(err.Error(), "names neither 127.0.0.1")) {
			t.Errorf("certificate naming %s: %v, want the SAN refusal", c.certIP, err)
		}
		if conn != nil {
			conn.Close()
		}
		l.Close()
	}
}
