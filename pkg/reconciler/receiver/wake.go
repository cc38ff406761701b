package receiver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/receiver"
)

// repositoryIndex indexes each kind's cache by the repositories its objects
// read: an event for a repository nothing reads costs a map lookup.
const repositoryIndex = "buildsmith.dev/repository"

// wakeable is a kind a Receiver may wake.
type wakeable struct {
	kind       string
	namespaced bool
	indexer    cache.Indexer
	// patch applies a merge patch to an object of the kind.
	patch func(ctx context.Context, namespace, name string, patch []byte) error
}

// repositoriesOf are the repositories an object reads, as pushes name
// them (receiver.Push.Repository); references that do not parse are left
// out (their object is invalid anyway).
func repositoriesOf(obj any) ([]string, error) {
	var images []string
	switch o := obj.(type) {
	case *v1alpha1.ClusterStack:
		images = append(images, o.Spec.BuildImage.Image, o.Spec.RunImage.Image)
		images = append(images, o.Spec.RunImage.Mirrors...)
		for _, r := range o.Spec.AdditionalRunImages {
			images = append(images, r.Image)
			images = append(images, r.Mirrors...)
		}
	case *v1alpha1.ClusterStore:
		for _, s := range o.Spec.Sources {
			images = append(images, s.Image)
		}
	case *v1alpha1.ClusterLifecycle:
		images = append(images, o.Spec.Image)
	case *v1alpha1.Buildpack:
		images = append(images, o.Spec.Image)
	}
	var repos []string
	for _, image := range images {
		ref, err := name.ParseReference(image)
		if err != nil {
			continue
		}
		if repo := ref.Context().Name(); !slices.Contains(repos, repo) {
			repos = append(repos, repo)
		}
	}
	return repos, nil
}

// target is an object a notification wakes.
type target struct {
	kind string
	key  types.NamespacedName
}

// maxWakes bounds the objects one notification wakes (each a PATCH).
const maxWakes = 256

// targets are the objects rc may wake for pushes: those that read a
// pushed repository, of rc's namespace (Buildpacks) and, when rc is in the
// controller's namespace, the cluster kinds; within spec.resources when
// set. At most maxWakes.
func targets(kinds []wakeable, rc *v1alpha1.Receiver, systemNamespace string, pushes []receiver.Push) ([]target, error) {
	var out []target
	for _, k := range kinds {
		if !k.namespaced && rc.Namespace != systemNamespace {
			continue
		}
		for _, p := range pushes {
			objects, err := k.indexer.ByIndex(repositoryIndex, p.Repository)
			if err != nil {
				return nil, err
			}
			for _, obj := range objects {
				o, ok := obj.(metav1.Object)
				if !ok || k.namespaced && o.GetNamespace() != rc.Namespace || !allowed(rc, k.kind, o.GetName()) {
					continue
				}
				t := target{kind: k.kind, key: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
				if len(out) == maxWakes {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// allowed reports whether rc's resources let it wake the named object of
// kind: any, when it lists none.
func allowed(rc *v1alpha1.Receiver, kind, name string) bool {
	if len(rc.Spec.Resources) == 0 {
		return true
	}
	return slices.ContainsFunc(rc.Spec.Resources, func(r v1alpha1.ReceiverResource) bool {
		return r.Kind == kind && (r.Name == "" || r.Name == name)
	})
}

// coalesceWindow is how long an object woken is not woken again: a
// registry sends an event per tag and per platform of one push.
const coalesceWindow = time.Second

// waker wakes objects by asking for a reconcile now (the
// reconcile-requested-at annotation, as kubectl buildsmith reconcile does):
// whichever replica leads the object reconciles it, whichever replica took
// the notification.
type waker struct {
	kinds map[string]wakeable
	now   func() time.Time
	mu    sync.Mutex
	woken map[target]time.Time // when each was last woken, within the window
}

// wake asks for a reconcile of each target not woken in the last window,
// and returns how many it asked for.
func (w *waker) wake(ctx context.Context, targets []target) (int, error) {
	now := w.now()
	at := now.UTC().Format(time.RFC3339Nano)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.ReconcileRequestedAtAnnotation, at)
	woken := 0
	for _, t := range targets {
		if !w.claim(t, now) {
			continue
		}
		if err := w.kinds[t.kind].patch(ctx, t.key.Namespace, t.key.Name, patch); err != nil {
			return woken, fmt.Errorf("asking for a reconcile of %s %s: %w", t.kind, t.key, err)
		}
		woken++
	}
	return woken, nil
}

// claim reports whether t may be woken now, and records it.
func (w *waker) claim(t target, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if last, ok := w.woken[t]; ok && now.Sub(last) < coalesceWindow {
		return false
	}
	if len(w.woken) >= 4*maxWakes {
		for k, last := range w.woken {
			if now.Sub(last) >= coalesceWindow {
				delete(w.woken, k)
			}
		}
	}
	w.woken[t] = now
	return true
}
