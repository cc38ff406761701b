package registrytest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Network is an in-memory network of registries (NewOn) and their clients
// (Transport): connections are net.Pipes, and everything that waits on one
// waits on a channel. So a test in a testing/synctest bubble on it runs on
// the bubble's fake time, hangs and timeouts included, and synctest.Wait
// returns once every request and probe in flight is waiting for something
// the test must do (advance time, lift a fault). On loopback sockets it
// cannot: a goroutine reading a socket is not durably blocked.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*pipeListener
	nextPort  int
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{listeners: map[string]*pipeListener{}, nextPort: 40000}
}

// Transport returns a client transport that dials registries of n, as the
// default Transport dials real ones.
func (n *Network) Transport() *http.Transport {
	return &http.Transport{DialContext: n.dial, MaxIdleConnsPerHost: 16, ForceAttemptHTTP2: false,
		TLSHandshakeTimeout: 10 * time.Second}
}

// listen listens on addr ("" for a new loopback address).
func (n *Network) listen(addr string) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" {
		n.nextPort++
		addr = fmt.Sprintf("127.0.0.1:%d", n.nextPort)
	}
	if n.listeners[addr] != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, syscall.EADDRINUSE)
	}
	l := &pipeListener{network: n, addr: pipeAddr(addr), conns: make(chan net.Conn), closed: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// dial connects to the listener on addr; refused when there is none.
func (n *Network) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: pipeAddr(addr), Err: syscall.ECONNREFUSED}
	if l == nil {
		return nil, refused
	}
	client, server := pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, refused
	case <-ctx.Done():
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: pipeAddr(addr), Err: ctx.Err()}
	}
}

// pipeListener accepts the connections dialed to its address.
type pipeListener struct {
	network *Network
	addr    pipeAddr
	conns   chan net.Conn
	once    sync.Once
	closed  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.network.mu.Lock()
		if l.network.listeners[string(l.addr)] == l { // not a listener since
			delete(l.network.listeners, string(l.addr))
		}
		l.network.mu.Unlock()
	})
	return nil
}

func (l *pipeListener) Addr() net.Addr { return l.addr }

// pipe is a connection's two ends.
func pipe() (*pipeConn, *pipeConn) {
	a, b := net.Pipe()
	client, server := &pipeConn{Conn: a}, &pipeConn{Conn: b}
	client.peer, server.peer = server, client
	return client, server
}

// pipeConn is one end of a connection. Reset by the other end (Reset), it
// fails reads and writes with ECONNRESET, as a TCP connection does after
// a RST; closed, with EOF.
type pipeConn struct {
	net.Conn
	peer  *pipeConn
	reset atomic.Bool
}

func (c *pipeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	return n, c.wasReset("read", err)
}

func (c *pipeConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	return n, c.wasReset("write", err)
}

func (c *pipeConn) wasReset(op string, err error) error {
	if err != nil && c.reset.Load() {
		return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, syscall.ECONNRESET)}
	}
	return err
}

// Reset closes the connection as a TCP RST does.
func (c *pipeConn) Reset() error {
	c.peer.reset.Store(true)
	return c.Close()
}

type pipeAddr string

func (a pipeAddr) Network() string { return "tcp" }
func (a pipeAddr) String() string  { return string(a) }

// Serve serves handler on a new address of n until the test ends, and
// returns its URL.
func (n *Network) Serve(t testing.TB, handler http.Handler) string {
	t.Helper()
	l, err := n.listen("")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}
