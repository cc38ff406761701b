package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// tcpProxy forwards connections to target until cut; then it refuses new
// ones and resets open ones, as an API server that went away would.
type tcpProxy struct {
	target string
	addr   string

	mu       sync.Mutex
	listener net.Listener
	conns    map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{target: target, conns: map[net.Conn]bool{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = l.Addr().String()
	p.serve(l)
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) serve(l net.Listener) {
	p.mu.Lock()
	p.listener = l
	p.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns[in], p.conns[out] = true, true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
}

// cut closes the listener and every open connection.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener != nil {
		_ = p.listener.Close()
		p.listener = nil
	}
	for c := range p.conns {
		if tcp, ok := c.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// restore listens again on the same address.
func (p *tcpProxy) restore(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.serve(l)
}

// TestAPIServerOutageMidReconcile: the controller loses the API server while
// it reconciles (a registry answer is slow, and meanwhile the API server
// goes away, so the status write fails); when the API server is back, the
// controller reconnects by itself and every object ends Ready.
func TestAPIServerOutageMidReconcile(t *testing.T) {
	w := newFaultWorld(t, "apiserver")
	// The controller reaches the API server through a proxy we can cut.
	config, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var proxy *tcpProxy
	for _, cluster := range config.Clusters {
		u, err := url.Parse(cluster.Server)
		if err != nil {
			t.Fatal(err)
		}
		proxy = startProxy(t, u.Host)
		u.Host = proxy.addr
		cluster.Server = u.String()
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, kubeconfig); err != nil {
		t.Fatal(err)
	}

	slow := make(chan struct{}, 1)
	var once sync.Once
	w.f.Inject("GET", "/stack/run/manifests/", 1, func(rw http.ResponseWriter, r *http.Request) {
		once.Do(func() { slow <- struct{}{} })
		time.Sleep(3 * time.Second)
		w.f.Handler.ServeHTTP(rw, r)
	})
	startControllerWith(t, kubeconfig, systemNamespace, true)
	w.apply(t)
	select {
	case <-slow:
	case <-time.After(30 * time.Second):
		t.Fatal("the stack's reconcile never reached the registry")
	}
	proxy.cut() // mid-reconcile: the status write after the slow answer fails
	time.Sleep(6 * time.Second)
	// The controller could not have written the stack's status meanwhile.
	stack, err := client.BuildsmithV1alpha1().ClusterStacks().Get(context.Background(), w.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stack.Status.IsReady() {
		t.Fatal("the stack became Ready while the controller could not reach the API server: the outage did not happen")
	}
	proxy.restore(t)
	w.waitReady(t, 60*time.Second)
}
