// Package controllertest builds the controller binary once and runs it as
// users run it outside a cluster (--kubeconfig), for the black-box tests
// (test/e2e) and the benchmarks (test/bench): set a control plane up for it,
// start with arguments, kill, print its log when the test fails, and read its
// peak memory.
package controllertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/buildsmith/buildsmith/pkg/client/clientset/versioned"
	"github.com/buildsmith/buildsmith/test/envtest"
	"github.com/buildsmith/buildsmith/test/localhost"
)

// Build builds ./cmd/controller of the module at root into dir and returns
// the binary's path.
func Build(root, dir string) (string, error) {
	binary := filepath.Join(dir, "controller")
	build := exec.Command("go", "build", "-o", binary, "./cmd/controller")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the controller: %v\n%s", err, out)
	}
	return binary, nil
}

// Cluster is a control plane made ready for the controller, as the
// black-box suites start from: the clientsets the tests use, the
// controller's namespace, and the controller binary.
type Cluster struct {
	Client versioned.Interface
	Kube   kubernetes.Interface
	// Binary is the path of the built controller.
	Binary string
}

// Setup makes the clientsets of cfg (env.Config, or a copy of it with
// other client settings), creates namespace (the controller's
// SYSTEM_NAMESPACE) and builds the controller into env.Dir.
func Setup(env *envtest.Env, cfg *rest.Config, namespace string) (Cluster, error) {
	var c Cluster
	var err error
	if c.Client, err = versioned.NewForConfig(cfg); err != nil {
		return c, err
	}
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return c, err
	}
	if _, err := c.Kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return c, err
	}
	c.Binary, err = Build(env.Root, env.Dir)
	return c, err
}

// Options say how to run the controller.
type Options struct {
	Kubeconfig string
	// Namespace is SYSTEM_NAMESPACE.
	Namespace string
	// DisableHA adds --disable-ha (no leader election).
	DisableHA bool
	// MetricsPort is --metrics-port; a free port when 0.
	MetricsPort int
	// ReceiverPort is --receiver-port; a free port when 0. It comes after
	// Args (the chart's name 9292), so that replicas can share the machine.
	ReceiverPort int
	// Args come after the standard ones, so they override them.
	Args []string
	// Env is added to the test's environment (NAME=value).
	Env []string
}

// Process is a running controller.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  syncBuffer

	// MetricsPort is the port of its Prometheus endpoint (served when
	// config-observability asks for Prometheus).
	MetricsPort int
	// ReceiverPort is the port of its Receivers' webhooks.
	ReceiverPort int

	mu   sync.Mutex
	peak int64 // VmHWM in bytes, last read
}

// Start runs the controller binary until the test ends, with
// --health-probes=false, --profiling-port 0 and a free --metrics-port and
// --receiver-port, so that several can share the machine. Its log is printed when the test
// fails.
func Start(t testing.TB, binary string, o Options) *Process {
	t.Helper()
	p := &Process{done: make(chan struct{}), MetricsPort: o.MetricsPort, ReceiverPort: o.ReceiverPort}
	if p.MetricsPort == 0 {
		p.MetricsPort = FreePort(t)
	}
	if p.ReceiverPort == 0 {
		p.ReceiverPort = FreePort(t)
	}
	args := append(slices.Clone(o.Args), "--receiver-port", strconv.Itoa(p.ReceiverPort))
	if o.DisableHA {
		args = append(args, "--disable-ha")
	}
	args = append([]string{
		"--kubeconfig", o.Kubeconfig,
		"--health-probes=false",
		"--profiling-port", "0",
		"--metrics-port", strconv.Itoa(p.MetricsPort),
		"--allow-loopback-registries", // the test registries listen on 127.0.0.1
	}, args...)
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(append(os.Environ(), o.Env...), "SYSTEM_NAMESPACE="+o.Namespace)
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.readPeak()
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("controller log:\n%s", p.log.String())
		}
	})
	return p
}

// Kill kills the controller (SIGKILL: no graceful shutdown, as when a node
// dies) and waits for it to end.
func (p *Process) Kill() {
	p.readPeak()
	_ = p.cmd.Process.Kill()
	<-p.done
}

// PID is the controller's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Running is nil while the controller runs, else how it ended: started
// once, a controller still running never crashed nor restarted.
func (p *Process) Running() error {
	select {
	case <-p.done:
		return fmt.Errorf("the controller (pid %d) ended: %v", p.PID(), p.cmd.ProcessState)
	default:
		return nil
	}
}

// Log is what the controller printed so far.
func (p *Process) Log() string { return p.log.String() }

// PeakRSS is the controller's peak resident set size in bytes (VmHWM of
// /proc/PID/status), read now if it still runs, else the last reading
// (taken when it was stopped). 0 when unknown.
func (p *Process) PeakRSS() int64 {
	p.readPeak()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}

func (p *Process) readPeak() {
	select {
	case <-p.done:
		return
	default:
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				p.mu.Lock()
				p.peak = max(p.peak, kb*1024)
				p.mu.Unlock()
			}
		}
	}
}

// FreePort is localhost.FreePort for the controller's ports in tests
// (--metrics-port, --profiling-port).
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := localhost.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
