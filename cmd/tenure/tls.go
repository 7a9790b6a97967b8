package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// tlsConfig builds the client TLS configuration from --cacert, --cert and
// --key; nil when none is given (plaintext, http:// endpoints).
func (g *globalFlags) tlsConfig() (*tls.Config, error) {
	if g.caFile == "" && g.certFile == "" && g.keyFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if (g.certFile == "") != (g.keyFile == "") {
		return nil, errors.New("--cert and --key must be given together")
	}
	if g.certFile != "" {
		c, err := tls.LoadX509KeyPair(g.certFile, g.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	if g.caFile != "" {
		pem, err := os.ReadFile(g.caFile)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert: no PEM certificate in %s", g.caFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}
