package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a self-signed CA-capable certificate and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestServeTLSFlags(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	base := []string{"--name", "a", "--data-dir", dir + "/d",
		"--listen-client-urls", "https://127.0.0.1:12379", "--advertise-client-urls", "https://127.0.0.1:12379",
		"--listen-peer-urls", "https://127.0.0.1:12380", "--initial-advertise-peer-urls", "https://127.0.0.1:12380"}

	t.Run("all set", func(t *testing.T) {
		args := append(append([]string{}, base...),
			"--cert-file", cert, "--key-file", key, "--trusted-ca-file", cert, "--client-cert-auth",
			"--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", cert, "--peer-client-cert-auth")
		c, _, err := parseServeConfig(args, mapEnv(nil))
		if err != nil {
			t.Fatal(err)
		}
		if c.ClientTLS.CertFile != cert || c.ClientTLS.KeyFile != key || c.ClientTLS.TrustedCAFile != cert || !c.ClientTLS.ClientCertAuth ||
			c.PeerTLS.CertFile != cert || c.PeerTLS.KeyFile != key || c.PeerTLS.TrustedCAFile != cert || !c.PeerTLS.ClientCertAuth {
			t.Errorf("got client %+v peer %+v", c.ClientTLS, c.PeerTLS)
		}
	})
	t.Run("from environment", func(t *testing.T) {
		args := append(append([]string{}, base...), "--peer-cert-file", cert, "--peer-key-file", key)
		c, _, err := parseServeConfig(args, mapEnv(map[string]string{"TENURE_CERT_FILE": cert, "TENURE_KEY_FILE": key}))
		if err != nil {
			t.Fatal(err)
		}
		if c.ClientTLS.CertFile != cert || c.ClientTLS.KeyFile != key {
			t.Errorf("got %+v", c.ClientTLS)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"https without certificates", nil, []string{
			"--listen-client-urls: https://127.0.0.1:12379 is https but --cert-file and --key-file are not set",
			"--listen-peer-urls: https://127.0.0.1:12380 is https but --peer-cert-file and --peer-key-file are not set"}},
		{"cert without key", []string{"--cert-file", cert, "--peer-cert-file", cert, "--peer-key-file", key},
			[]string{"--cert-file: --cert-file and --key-file must be given together"}},
		{"client-cert-auth without CA", []string{"--cert-file", cert, "--key-file", key, "--client-cert-auth",
			"--peer-cert-file", cert, "--peer-key-file", key, "--peer-client-cert-auth"},
			[]string{"--client-cert-auth: needs --trusted-ca-file", "--peer-client-cert-auth: needs --peer-trusted-ca-file"}},
		{"unreadable files", []string{"--cert-file", dir + "/nope.pem", "--key-file", key,
			"--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", key},
			[]string{"--cert-file: open " + dir + "/nope.pem", "--peer-cert-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseServeConfig(append(append([]string{}, base...), tc.args...), mapEnv(nil))
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
