// Package distribution runs the reference registry (bin/registry, built by
// hack/tools.sh from distribution/distribution) as a process on a free
// loopback port, storing on the filesystem. Unlike ggcr's in-memory registry
// it keeps blobs per repository, mounts them across repositories, can ask for
// basic auth, and keeps its images when stopped and started again. The e2e
// tests, the benchmarks and the demo run it.
package distribution

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/localhost"
)

// Options say how to run the registry.
type Options struct {
	// Htpasswd is the content of an htpasswd file: when set, the registry
	// asks for basic auth.
	Htpasswd string
	// LogLevel is distribution's: error, warn, info (the default) or debug.
	LogLevel string
	// AccessLog adds a line per request to the log, in the combined log
	// format.
	AccessLog bool
	// Delete allows deleting manifests and blobs (DELETE requests).
	Delete bool
	// Notify are where the registry posts its notifications of pushes
	// and pulls (distribution's notifications.endpoints).
	Notify []Endpoint
}

// Endpoint is a notification endpoint: its URL, and the headers every
// notification carries.
type Endpoint struct {
	Name, URL string
	Headers   map[string]string
}

// Registry is the registry process.
type Registry struct {
	Addr string // host:port
	// Log is the path of what it prints, across restarts.
	Log string

	binary, config string
	// answer is the status of GET /v2/ once it serves.
	answer int
	cmd    *exec.Cmd
}

// New starts binary in a temporary directory of the test, until the test
// ends.
func New(t testing.TB, binary string, o Options) *Registry {
	t.Helper()
	r, err := Start(t.Context(), binary, t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// Start writes the registry's config into dir, where it keeps its storage and
// its log, and runs binary until Stop.
func Start(ctx context.Context, binary, dir string, o Options) (*Registry, error) {
	port, err := localhost.FreePort()
	if err != nil {
		return nil, err
	}
	r := &Registry{Addr: fmt.Sprintf("127.0.0.1:%d", port), Log: filepath.Join(dir, "registry.log"),
		binary: binary, config: filepath.Join(dir, "config.yml"), answer: http.StatusOK}
	config := fmt.Sprintf("version: 0.1\nlog:\n  level: %s\n  accesslog:\n    disabled: %t\n"+
		"storage:\n  delete:\n    enabled: %t\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n",
		cmp.Or(o.LogLevel, "info"), !o.AccessLog, o.Delete, filepath.Join(dir, "storage"), r.Addr)
	if o.Htpasswd != "" {
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(o.Htpasswd), 0o600); err != nil {
			return nil, err
		}
		config += fmt.Sprintf("auth:\n  htpasswd:\n    realm: buildsmith\n    path: %s\n", htpasswd)
		r.answer = http.StatusUnauthorized
	}
	config += notifications(o.Notify)
	if err := os.WriteFile(r.config, []byte(config), 0o600); err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Start runs the registry, again after Stop (on the same port and storage),
// and waits until it answers.
func (r *Registry) Start(ctx context.Context) error {
	log, err := os.OpenFile(r.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(r.binary, "serve", r.config)
	cmd.Stdout, cmd.Stderr = log, log
	err = cmd.Start()
	_ = log.Close() // the registry has its own descriptor
	if err != nil {
		return fmt.Errorf("starting the registry (%s): %w", r.binary, err)
	}
	r.cmd = cmd
	_, err = localhost.Poll(ctx, 30*time.Second, 100*time.Millisecond, "the registry to answer", func() (bool, string) {
		resp, err := http.Get("http://" + r.Addr + "/v2/")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == r.answer, resp.Status
	})
	if err != nil {
		r.Stop()
	}
	return err
}

// CollectGarbage stops the registry, deletes the blobs no manifest
// references (distribution's garbage-collect, which wants the registry
// stopped or read-only), and starts it again.
func (r *Registry) CollectGarbage(ctx context.Context) (string, error) {
	r.Stop()
	out, err := exec.CommandContext(ctx, r.binary, "garbage-collect", r.config).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("garbage-collect: %w\n%s", err, out)
	}
	return string(out), r.Start(ctx)
}

// Stop kills the registry and waits for it to end: from then on its port
// refuses connections.
func (r *Registry) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// notifications is the config of endpoints: each notified at once (the
// registry batches nothing: threshold 1), retried every second.
func notifications(endpoints []Endpoint) string {
	if len(endpoints) == 0 {
		return ""
	}
	config := "notifications:\n  endpoints:\n"
	for _, e := range endpoints {
		config += fmt.Sprintf("  - name: %s\n    url: %s\n    timeout: 5s\n    threshold: 1\n    backoff: 1s\n", e.Name, e.URL)
		if len(e.Headers) > 0 {
			config += "    headers:\n"
			for k, v := range e.Headers {
				config += fmt.Sprintf("      %s: [%q]\n", k, v)
			}
		}
	}
	return config
}
