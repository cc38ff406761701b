package distribution

import (
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

var registry = filepath.Join("..", "..", "bin", "registry")

// TestStopAndStartAgain: a stopped registry refuses connections; started
// again, it serves what was pushed before.
func TestStopAndStartAgain(t *testing.T) {
	r := New(t, registry, Options{LogLevel: "error"})
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(r.Addr + "/kept:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}

	r.Stop()
	if conn, err := net.Dial("tcp", r.Addr); err == nil {
		_ = conn.Close()
		t.Fatal("the stopped registry accepts connections")
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Image(ref); err != nil {
		t.Errorf("the image pushed before the restart: %v", err)
	}
}

// TestHtpasswd: with an htpasswd file the registry asks for basic auth.
func TestHtpasswd(t *testing.T) {
	r := New(t, registry, Options{Htpasswd: "pusher:$2a$10$WacmzzjvXXpSgwiq8B9uxeP5pEK0IAaSiHg7H3H3/ggJ7kCldltWi\n"})
	resp, err := http.Get("http://" + r.Addr + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || got != `Basic realm="buildsmith"` {
		t.Errorf("GET /v2/: %s, WWW-Authenticate %q; want 401 asking for basic auth", resp.Status, got)
	}
}
