package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// Peer certificate SAN check (etcd's default; --peer-skip-client-san-verification
// turns it off).
//
// A member dialing a peer presents its certificate, and the peer checks it
// against --peer-trusted-ca-file. As etcd does, the peer also checks that the
// certificate names the address the connection comes from: one of its IP
// SANs is that address, or one of its DNS SANs resolves to it. A certificate
// with no SAN at all passes (etcd's rule). So a certificate copied off one
// member cannot be used from another host to join the raft traffic.

// sanCheckListener wraps a TLS peer listener; each connection is checked
// at its handshake, before a byte of it reaches the peer server.
type sanCheckListener struct {
	net.Listener
}

func (l sanCheckListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return c, nil
	}
	return &sanCheckedConn{Conn: tc}, nil
}

// sanCheckedConn runs the handshake and the check on its first read or
// write (as tls.Conn runs its handshake), so a slow client never holds up
// Accept.
type sanCheckedConn struct {
	*tls.Conn
	once sync.Once
	err  error
}

// sanHandshakeTimeout bounds the handshake and the DNS lookups of the check.
const sanHandshakeTimeout = 10 * time.Second

func (c *sanCheckedConn) check() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), sanHandshakeTimeout)
		defer cancel()
		if c.err = c.Conn.HandshakeContext(ctx); c.err != nil {
			return
		}
		if st := c.Conn.ConnectionState(); len(st.PeerCertificates) > 0 {
			c.err = checkCertSAN(ctx, st.PeerCertificates[0], c.Conn.RemoteAddr().String(), net.DefaultResolver)
		}
		if c.err != nil {
			_ = c.Conn.Close()
		}
	})
	return c.err
}

func (c *sanCheckedConn) Read(b []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *sanCheckedConn) Write(b []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// hostResolver is the part of net.Resolver the check uses.
type hostResolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// checkCertSAN reports whether cert names remoteAddr (host:port): an IP SAN
// equal to its host, or a DNS SAN resolving to it. No SAN at all passes.
func checkCertSAN(ctx context.Context, cert *x509.Certificate, remoteAddr string, r hostResolver) error {
	if len(cert.IPAddresses) == 0 && len(cert.DNSNames) == 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip != nil && slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
		return nil
	}
	for _, name := range cert.DNSNames {
		addrs, err := r.LookupIPAddr(ctx, name)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ip != nil && a.IP.Equal(ip) {
				return nil
			}
		}
	}
	return fmt.Errorf("peer certificate %q names neither %s among its IP SANs %v nor a DNS SAN %v resolving to it (--peer-skip-client-san-verification turns this check off)",
		cert.Subject.CommonName, host, cert.IPAddresses, cert.DNSNames)
}
