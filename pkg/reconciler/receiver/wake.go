package receiver

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/receiver"
)

// repositoryIndex indexes each kind's cache by the repositories its objects
// read: a notification for a repository nothing reads costs a map lookup.
const repositoryIndex = "buildsmith.dev/repository"

// wakeable is a kind a Receiver may wake, and its cache.
type wakeable struct {
	kind       string
	namespaced bool
	indexer    cache.Indexer
}

// clusterKinds are the kinds only Receivers of the controller's namespace
// may wake.
var clusterKinds = []string{"ClusterStore", "ClusterStack", "ClusterLifecycle"}

// repositoriesOf are the repositories an object reads, as notifications
// name them (receiver.Repository); references that do not parse are left
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
		if repo, ok := receiver.Repository(image); ok && !slices.Contains(repos, repo) {
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

// maxWakes bounds the objects one notification wakes.
const maxWakes = 256

// targets are the objects rc may wake for pushes of repositories: those
// that read one, of rc's namespace (Buildpacks) and, when rc is in the
// controller's namespace, the cluster kinds; within spec.resources when
// set. At most maxWakes. matched are the repositories some target reads.
func targets(kinds []wakeable, rc *v1alpha1.Receiver, systemNamespace string, repositories []string) (found []target, matched []string) {
	for _, k := range kinds {
		if !k.namespaced && rc.Namespace != systemNamespace {
			continue
		}
		for _, repo := range repositories {
			objects, _ := k.indexer.ByIndex(repositoryIndex, repo) // the index is there: added before the informers started
			for _, obj := range objects {
				o, ok := obj.(metav1.Object)
				if !ok || k.namespaced && o.GetNamespace() != rc.Namespace || !allowed(rc, k.kind, o.GetName()) {
					continue
				}
				if !slices.Contains(matched, repo) {
					matched = append(matched, repo)
				}
				t := target{kind: k.kind, key: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}
				if !slices.Contains(found, t) {
					found = append(found, t)
				}
				if len(found) == maxWakes {
					return found, matched
				}
			}
		}
	}
	return found, matched
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

// dispatcher wakes, on every replica, what a Receiver's last notification
// names: the replica that took it recorded it in the Receiver's status,
// which every replica's informer sees; each puts the targets on its own
// queues, and the replica leading each target reconciles it. Why not a
// write to each target: one status write a notification instead of one a
// target, and no write access to the objects themselves.
type dispatcher struct {
	kinds           []wakeable
	systemNamespace string
	enqueue         func(kind string, key types.NamespacedName) bool

	mu         sync.Mutex
	dispatched map[types.UID]metav1.MicroTime // the last notification woken, by Receiver
}

// seen records rc's last notification as woken without waking anything:
// one taken before this replica started (its informer's initial list).
func (d *dispatcher) seen(rc *v1alpha1.Receiver) {
	if n := rc.Status.LastNotification; n != nil {
		d.mu.Lock()
		d.dispatched[rc.UID] = n.ReceivedAt
		d.mu.Unlock()
	}
}

// dispatch wakes the targets of rc's last notification, once: a status
// that goes back to an older notification (a write of a stale copy) wakes
// nothing. It returns how many objects it woke.
func (d *dispatcher) dispatch(rc *v1alpha1.Receiver) int {
	n := rc.Status.LastNotification
	if n == nil {
		return 0
	}
	d.mu.Lock()
	last, ok := d.dispatched[rc.UID]
	if ok && !last.Before(&n.ReceivedAt) {
		d.mu.Unlock()
		return 0
	}
	d.dispatched[rc.UID] = n.ReceivedAt
	d.mu.Unlock()
	found, _ := targets(d.kinds, rc, d.systemNamespace, n.Repositories[:min(len(n.Repositories), receiver.MaxPushes)])
	woken := 0
	for _, t := range found {
		if d.enqueue(t.kind, t.key) {
			woken++
		}
	}
	return woken
}

// forget drops a deleted Receiver's record.
func (d *dispatcher) forget(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.dispatched, uid)
}
