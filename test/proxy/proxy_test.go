package proxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string, timeout time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, err
}

func TestProxyFaults(t *testing.T) {
	p, err := New("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(c, "hello", time.Second); err != nil || got != "hello\n" {
		t.Fatalf("round trip: %q %v", got, err)
	}

	p.Blackhole()
	if _, err := roundTrip(c, "lost", 200*time.Millisecond); err == nil {
		t.Fatal("blackholed link answered")
	}
	p.Heal() // closes the tainted connection
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(c2, "again", time.Second); err != nil || got != "again\n" {
		t.Fatalf("after heal: %q %v", got, err)
	}

	p.Delay(150*time.Millisecond, 0)
	start := time.Now()
	if got, err := roundTrip(c2, "slow", 2*time.Second); err != nil || got != "slow\n" {
		t.Fatalf("delayed: %q %v", got, err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("delay not applied both ways: %v", el)
	}
	p.Heal()

	p.OneWay(Forward) // request reaches the server, the answer is dropped
	if _, err := roundTrip(c2, "oneway", 200*time.Millisecond); err == nil {
		t.Fatal("one-way link delivered the reply")
	}
	p.Heal()

	c3, _ := net.Dial("tcp", p.Addr())
	roundTrip(c3, "x", time.Second)
	p.DropConnections()
	c3.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c3.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection survived DropConnections")
	}
}

func TestMuxPerSource(t *testing.T) {
	m, err := NewMux("127.0.0.1:0", echoServer(t), func(c net.Conn) string { return "a" })
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Link("a").Blackhole()
	c, _ := net.Dial("tcp", m.Addr())
	if _, err := roundTrip(c, "x", 200*time.Millisecond); err == nil {
		t.Fatal("blackholed source answered")
	}
	m.Link("a").Heal()
	c, _ = net.Dial("tcp", m.Addr())
	if got, err := roundTrip(c, "y", time.Second); err != nil || got != "y\n" {
		t.Fatalf("healed: %q %v", got, err)
	}
}

// TestTaintedConnectionForwardsNothingAfterHeal: a connection that lost a
// chunk while faulted never forwards again once the fault is lifted (Heal
// closes it just after): bytes after a gap would reach a peer whose framing
// silently skipped whole messages.
func TestTaintedConnectionForwardsNothingAfterHeal(t *testing.T) {
	p := newProxy("127.0.0.1:1")
	lost, clean := &pconn{}, &pconn{}
	p.Blackhole()
	if ok, _ := p.pass(lost, Backward); ok || !lost.tainted {
		t.Fatalf("blackholed chunk: forwarded %v, tainted %v", ok, lost.tainted)
	}
	// the fault is lifted; Heal has not closed the connection yet
	p.SetDirection(Both)
	if ok, _ := p.pass(lost, Backward); ok {
		t.Fatal("a tainted connection forwarded data after the fault was lifted")
	}
	if ok, _ := p.pass(clean, Backward); !ok {
		t.Fatal("a clean connection did not forward after the fault was lifted")
	}
	// a one-way fault keeps forwarding its open direction on a tainted connection
	p.OneWay(Forward)
	if ok, _ := p.pass(lost, Forward); !ok {
		t.Fatal("one-way: the open direction of a tainted connection did not forward")
	}
	if ok, _ := p.pass(lost, Backward); ok {
		t.Fatal("one-way: the closed direction forwarded")
	}
}
