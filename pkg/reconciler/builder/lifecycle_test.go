package builder

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"

	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestLifecycleImageIsOneDigest: every platform of a builder takes its
// lifecycle from the digest the tag named when the builder asked, even if
// the tag moves meanwhile; the source trusts a resolved tag for Refresh,
// then reads it again.
func TestLifecycleImageIsOneDigest(t *testing.T) {
	f := registrytest.New(t)
	push := func(version string) string {
		t.Helper()
		dir := t.TempDir()
		binaries := map[string]string{}
		for _, p := range []string{"linux/amd64", "linux/arm64"} {
			path := filepath.Join(dir, strings.ReplaceAll(p, "/", "-"))
			if err := os.WriteFile(path, []byte("lifecycle "+version+" for "+p), 0o755); err != nil {
				t.Fatal(err)
			}
			binaries[p] = path
		}
		index, err := sampleimages.LifecycleIndex(binaries, version)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.WriteIndex(f.Ref("lifecycle:latest"), index); err != nil {
			t.Fatal(err)
		}
		digest, _ := index.Digest()
		return digest.String()
	}
	old := push("0.20.0")
	ctx := context.Background()
	client := registry.New(ctx, registry.Options{LoopbackRegistries: true})
	for _, tc := range []struct {
		refresh     time.Duration
		wantVersion string // of the second builder's lifecycles
	}{
		{time.Hour, "0.20.0"}, // the resolved tag is trusted
		{0, "0.21.0"},         // read again
	} {
		push("0.20.0")
		source := &LifecycleSource{Refresh: tc.refresh}
		source.Update(&corev1.ConfigMap{Data: map[string]string{LifecycleImageKey: f.Addr + "/lifecycle:latest"}})
		image, err := source.Image(ctx, client.As(nil))
		if err != nil {
			t.Fatal(err)
		}
		if image.Ref.DigestStr() != old || len(image.Platforms) != 2 {
			t.Fatalf("lifecycle image %s with %v, want %s with two platforms", image.Ref, image.Platforms, old)
		}
		push("0.21.0") // the tag moves while the builder is being made
		for _, arch := range []string{"amd64", "arm64"} {
			lifecycle, err := image.For(ctx, client.As(nil), v1.Platform{OS: "linux", Architecture: arch})
			if err != nil {
				t.Fatal(err)
			}
			if lifecycle.Version != "0.20.0" {
				t.Errorf("refresh %s: the first builder's %s lifecycle is %s, want the one it started with (0.20.0)", tc.refresh, arch, lifecycle.Version)
			}
		}
		next, err := source.Image(ctx, client.As(nil))
		if err != nil {
			t.Fatal(err)
		}
		lifecycle, err := next.For(ctx, client.As(nil), v1.Platform{OS: "linux", Architecture: "arm64"})
		if err != nil {
			t.Fatal(err)
		}
		if lifecycle.Version != tc.wantVersion {
			t.Errorf("refresh %s: the next builder's lifecycle is %s, want %s", tc.refresh, lifecycle.Version, tc.wantVersion)
		}
	}
}
