package bench

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/distribution"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// startDistribution runs the reference registry (bin/registry), which,
// unlike ggcr's in-memory one, keeps blobs per repository and mounts them
// across repositories. No auth: the benchmark counts bytes, not logins.
func startDistribution(t testing.TB) string {
	t.Helper()
	return distribution.New(t, filepath.Join(env.Root, "bin", "registry"), distribution.Options{LogLevel: "error", AccessLog: true}).Addr
}

// TestBigLayers is scenario 5: buildpacks of 50 MiB already in the
// registry; a builder in another repository of it uploads only what is new.
func TestBigLayers(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	const count, size = 5, 50 << 20
	runs := envInt("BENCH_RUNS", 3)
	upstream := startDistribution(t)
	seed(t, upstream)
	var sources, ids []string
	var bigBytes int64
	for i := range count {
		id := fmt.Sprintf("bench/big-%d", i)
		img, err := registrytest.Buildpackage(registrytest.Buildpack{ID: id, Version: "1.0.0", API: "0.10", Size: size})
		push(t, upstream, fmt.Sprintf("buildpacks/big-%d:1", i), img, err)
		m, _ := img.Manifest()
		bigBytes += m.Layers[0].Size
		ids = append(ids, id)
	}
	// Everything the controller does goes through the counting proxy.
	proxy := registrytest.NewProxy(t, upstream)
	for i := range count {
		sources = append(sources, fmt.Sprintf("%s/buildpacks/big-%d:1", proxy.Addr, i))
	}
	p, _ := startController(t)
	w := newWorld(t, proxy.Addr, sources...)
	w.waitStoreStackReady(t, 60*time.Second)

	s := &section{title: fmt.Sprintf("5. Builder with big layers: %d buildpacks of %s already in the registry", count, mib(size)),
		what: fmt.Sprintf("The distribution registry (bin/registry: blobs per repository, cross-repository mount) behind a counting "+
			"proxy; the store's %d buildpackages (%s of layers), the stack and the lifecycle are in it. Each run creates one "+
			"builder pushed to a new repository of the same registry; bytes up are request bodies through the proxy from "+
			"the builder's creation until it is Ready.", count, mib(bigBytes)),
		header: []string{"run", "Ready after", "requests", "mounts", "blob uploads", "bytes up", "bytes down", "by kind"}}
	var took []time.Duration
	worstUp := int64(0)
	allMounted := true
	for i := range runs {
		proxy.Traffic.Reset()
		w.createBuilders(t, i, i+1, w.order(ids...))
		d, ok := w.waitBuildersReady(t, i+1, 60*time.Second)
		if !ok {
			t.Errorf("run %d: builder not Ready", i+1)
		}
		took = append(took, d)
		time.Sleep(300 * time.Millisecond)
		c := w.cost(proxy.Traffic.Requests())
		worstUp = max(worstUp, c.bytesIn)
		allMounted = allMounted && c.mounts >= count
		s.rows = append(s.rows, []string{fmt.Sprint(i + 1), seconds([]time.Duration{d}), fmt.Sprint(c.requests), fmt.Sprint(c.mounts),
			fmt.Sprint(c.blobUploads), mib(c.bytesIn), mib(c.bytesOut), kinds(c.byKind)})
	}
	s.notes = append(s.notes, fmt.Sprintf("time Ready: %s; controller peak RSS %s", seconds(took), mib(p.PeakRSS())))
	s.targets = []target{
		{"bytes uploaded per builder", fmt.Sprintf("only new small layers + config + manifest (≪ %s)", mib(bigBytes)), mib(worstUp), worstUp < 1<<20},
		{"big layers mounted, not uploaded", fmt.Sprintf("≥ %d mounts per builder", count), rowsCol(s.rows, 3), allMounted},
	}
	addSection(s)
}
