package reconciler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestChosenTags: choices made in parallel come out in the spec's order
// (sources[2] before sources[10]), one a field even when two fields follow
// one repository; a choice made again keeps its chosenAt, a new one (of
// another field, tag or digest) takes now.
func TestChosenTags(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/app:1.0.0")
	f.Push("team/app:1.1.0")
	repo := f.Addr + "/team/app"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := registry.New(ctx, registry.Options{LoopbackRegistries: true}).As(nil)
	policy := &v1alpha1.TagPolicy{Semver: v1alpha1.SemverPolicy{Range: "1.x"}}
	digest, err := f.Resolve(repo + ":1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	long := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	previous := []v1alpha1.ChosenTag{
		{Field: "spec.sources[2]", Image: repo, Tag: "1.1.0", Version: "1.1.0", LatestImage: digest, ChosenAt: long},
		{Field: "spec.sources[10]", Image: repo, Tag: "1.0.0", Version: "1.0.0", LatestImage: digest, ChosenAt: long},
	}
	chosen := NewChosenTags(previous)
	chosen.now = func() time.Time { return now }

	var wg sync.WaitGroup
	for _, i := range []int{10, 2, 3} {
		wg.Go(func() {
			src, err := chosen.Choose(ctx, reg, fmt.Sprintf("spec.sources[%d]", i), repo, policy)
			if err != nil || src.Ref.String() != digest || src.Named != repo+":1.1.0" || src.Tag != "1.1.0" {
				t.Errorf("Choose = %+v, %v; want 1.1.0 at %s", src, err, digest)
			}
		})
	}
	wg.Wait()
	at := func(field string, when metav1.Time) v1alpha1.ChosenTag {
		return v1alpha1.ChosenTag{Field: field, Image: repo, Tag: "1.1.0", Version: "1.1.0", LatestImage: digest, ChosenAt: when}
	}
	want := []v1alpha1.ChosenTag{at("spec.sources[2]", long), at("spec.sources[3]", metav1.NewTime(now)), at("spec.sources[10]", metav1.NewTime(now))}
	if diff := cmp.Diff(want, chosen.Status()); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
	if fixed, err := chosen.Choose(ctx, reg, "spec.sources[0]", repo+":1.0.0", nil); err != nil || fixed.Named != repo+":1.0.0" || fixed.Tag != "" {
		t.Errorf("Choose without a policy = %+v, %v; want the reference as it is", fixed, err)
	}
	if n := len(chosen.Status()); n != 3 {
		t.Errorf("%d choices after a reference without a policy, want 3", n)
	}
}
