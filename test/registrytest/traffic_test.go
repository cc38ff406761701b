package registrytest

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestTrafficCountsAPush: a push of a two-layer image is counted by kind,
// with the uploaded bytes; pulling it back counts the bytes down.
func TestTrafficCountsAPush(t *testing.T) {
	f := New(t)
	img := f.Push("a/b:1")
	s := f.Traffic().Summary()
	if s.ByKind["PUT manifest"] != 1 || s.ByKind["PUT upload"] != 3 {
		t.Errorf("push: %+v", s.ByKind)
	}
	size := int64(0)
	layers, _ := img.Layers()
	for _, l := range layers {
		n, _ := l.Size()
		size += n
	}
	if s.BytesIn < size {
		t.Errorf("bytes in = %d, want at least the layers' %d", s.BytesIn, size)
	}
	f.Traffic().Reset()
	if _, err := remote.Head(f.Ref("a/b:1")); err != nil {
		t.Fatal(err)
	}
	reqs := f.Traffic().Requests()
	last := reqs[len(reqs)-1]
	if last.Method != "HEAD" || last.Kind != "manifest" || last.Repo != "a/b" || last.Ref != "1" || last.Status() != 200 {
		t.Errorf("HEAD: %s", last)
	}
}
