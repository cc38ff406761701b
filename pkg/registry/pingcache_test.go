package registry

import (
	"context"
	"net/http"
	"testing"

	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

func pings(f *registrytest.Registry) int {
	n := 0
	for _, r := range f.Requests() {
		if r == "GET /v2/" {
			n++
		}
	}
	return n
}

// TestRegistryIsPingedOnce: reads of several repositories and several
// pushes (each with a fresh pusher, each of which used to ping) ask the
// registry's /v2/ once.
func TestRegistryIsPingedOnce(t *testing.T) {
	f := registrytest.New(t)
	for _, repo := range []string{"a", "b", "c"} {
		f.Push("team/" + repo + ":1")
	}
	f.ForgetRequests() // the pushes' own pings
	c := newTestClient(t, Options{})
	ctx := context.Background()
	for _, repo := range []string{"a", "b", "c"} {
		if _, err := c.ReadImage(ctx, f.Ref("team/"+repo+":1"), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, repo := range []string{"x", "y"} {
		img, _ := random.Image(64, 1)
		if _, err := c.Write(ctx, f.Ref("out/"+repo+":1").(name.Tag), img, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := pings(f); n != 1 {
		t.Errorf("%d pings for 3 reads and 2 writes, want 1:\n%v", n, f.Requests())
	}
}

// TestPingAskedAgainAfterUnauthorized: a 401 to a request drops the
// remembered answer (the registry may have started asking for
// credentials), so the next new transport pings again.
func TestPingAskedAgainAfterUnauthorized(t *testing.T) {
	f := registrytest.New(t)
	for _, repo := range []string{"a", "b", "c"} {
		f.Push("team/" + repo + ":1")
	}
	f.ForgetRequests()
	c := newTestClient(t, Options{})
	ctx := context.Background()
	if _, err := c.Resolve(ctx, f.Ref("team/a:1"), nil); err != nil {
		t.Fatal(err)
	}
	f.Inject("", "/v2/team/b/", -1, registrytest.Answer(http.StatusUnauthorized,
		map[string]string{"WWW-Authenticate": `Basic realm="test"`}, registrytest.OCIError("UNAUTHORIZED", "who are you")))
	if _, err := c.Resolve(ctx, f.Ref("team/b:1"), nil); Reason(err) != ReasonUnauthorized {
		t.Fatalf("Resolve of a refused repository: %v (%s), want %s", err, Reason(err), ReasonUnauthorized)
	}
	if n := pings(f); n != 1 {
		t.Fatalf("%d pings before the 401, want 1", n)
	}
	if _, err := c.Resolve(ctx, f.Ref("team/c:1"), nil); err != nil {
		t.Fatal(err)
	}
	if n := pings(f); n != 2 {
		t.Errorf("%d pings, want a second one after the 401: %v", n, f.Requests())
	}
}
