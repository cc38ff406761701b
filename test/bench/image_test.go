package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestControllerImage is scenario 9: `make image` into the reference
// registry, cold (an empty Go build cache: every package compiled for both
// platforms; ko itself already in bin/) and then cached; the size of each
// platform's image as a pull downloads it.
func TestControllerImage(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	addr := startDistribution(t)
	repo := addr + "/buildsmith/controller"
	makeImage := func(goCache string) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		cmd := exec.Command("make", "--no-print-directory", "image", "IMAGE_REPO="+repo, "INSECURE=1")
		cmd.Dir = env.Root
		cmd.Env = os.Environ()
		if goCache != "" {
			cmd.Env = append(cmd.Env, "GOCACHE="+goCache)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("make image: %v\n%s", err, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		return lines[len(lines)-1], time.Since(start)
	}
	cold, coldTook := makeImage(t.TempDir())
	cached, cachedTook := makeImage("")
	ref, err := name.NewDigest(cold, name.Insecure)
	if err != nil {
		t.Fatalf("make image printed %q: %v", cold, err)
	}
	index, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	s := &section{title: "9. The controller image (`make image`)",
		what: "`make image` into the reference registry over loopback: cold with an empty Go build cache (every package " +
			"compiled for linux/amd64 and linux/arm64, the base assembled; ko already built into bin/), then again with " +
			"the cache. Sizes: each platform's layers, compressed, as a pull downloads them.",
		header: []string{"figure", "value"}}
	s.rows = append(s.rows, []string{"cold", coldTook.Round(time.Second).String()},
		[]string{"cached", cachedTook.Round(time.Second).String()},
		[]string{"same digest both times", fmt.Sprint(cold == cached)})
	for _, desc := range manifest.Manifests {
		img, err := index.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		var size int64
		for _, l := range layers {
			n, err := l.Size()
			if err != nil {
				t.Fatal(err)
			}
			size += n
		}
		s.rows = append(s.rows, []string{desc.Platform.String() + " size", fmt.Sprintf("%.1f MiB (%d layers)", float64(size)/(1<<20), len(layers))})
	}
	s.targets = []target{{"the same commit builds the same digest", "yes", fmt.Sprint(cold == cached), cold == cached}}
	addSection(s)
}
