package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/distribution"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// faultWorld is the distribution registry with htpasswd auth, reached
// through a proxy that injects faults, holding a stack, a buildpackage and
// the lifecycle; and the objects over them, in a namespace of their own
// whose default ServiceAccount has the registry's pull Secret.
type faultWorld struct {
	d       *distribution.Registry
	f       *registrytest.Registry // the proxy the controller talks to
	ns      string
	name    string
	objects storeStack // named name, over f, with the namespace's default ServiceAccount
}

func newFaultWorld(t *testing.T, name string) *faultWorld {
	t.Helper()
	ctx := context.Background()
	d := startDistribution(t)
	w := &faultWorld{d: d, f: registrytest.InFrontOf(t, d.Addr, &authn.Basic{Username: registryUser, Password: registryPassword}),
		ns: "faults-" + name, name: name}
	w.objects = storeStack{Addr: w.f.Addr, Name: name, Buildpackages: []string{"buildpacks/hello:1.0.0"}, StackID: "io.buildpacks.stacks.faults",
		Account: &v1alpha1.ServiceAccountRef{Name: "default", Namespace: w.ns}}
	w.objects.pushSamples(t, func(repo string, img v1.Image, err error) { push(t, w.f, repo, img, err) })
	w.f.ForgetRequests()

	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry"},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(w.f.Addr, registryUser, registryPassword)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(w.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	useLifecycleImage(t, w.f.Addr+"/buildsmith/lifecycle:0.21.0")
	return w
}

// apply creates the store, the stack and a builder.
func (w *faultWorld) apply(t *testing.T) {
	t.Helper()
	w.objects.create(t)
	w.createBuilder(t, w.name)
}

// waitReady waits with kubectl for the three objects.
func (w *faultWorld) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	wait := env.Kubectl("wait", "--for=condition=Ready", fmt.Sprintf("--timeout=%s", timeout),
		"clusterstore/"+w.name, "clusterstack/"+w.name, "-n", w.ns, "builder/"+w.name)
	if out, err := wait.CombinedOutput(); err != nil {
		b, _ := client.BuildsmithV1alpha1().Builders(w.ns).Get(context.Background(), w.name, metav1.GetOptions{})
		t.Fatalf("kubectl wait: %v\n%s\nbuilder: %+v", err, out, b.Status.Conditions)
	}
}

// worldStatus is what the controller has found out about the three
// objects: their status without the conditions.
type worldStatus struct {
	Store   v1alpha1.ClusterStoreStatus
	Stack   v1alpha1.ClusterStackStatus
	Builder v1alpha1.BuilderStatus
}

// status reads the three statuses, without conditions, and how each is
// doing: the reasons of its Ready condition ("" when Ready) and of its
// UpToDate condition ("" when up to date).
func (w *faultWorld) status(t *testing.T) (worldStatus, [3]string, [3]string) {
	t.Helper()
	store, stack, builder := w.read(t)
	var ready, upToDate [3]string
	for i, s := range []*v1alpha1.ConditionedStatus{&store.Status.ConditionedStatus, &stack.Status.ConditionedStatus, &builder.Status.ConditionedStatus} {
		if c := s.GetCondition(v1alpha1.ConditionReady); c == nil || !c.IsTrue() {
			ready[i] = "NotReady"
			if c != nil {
				ready[i] = c.Reason
			}
		}
		if c := s.GetCondition(v1alpha1.ConditionUpToDate); c != nil && !c.IsTrue() {
			upToDate[i] = c.Reason
		}
		s.Conditions, s.LastHandledReconcileAt = nil, "" // how it is doing, not what it found
	}
	return worldStatus{store.Status, stack.Status, builder.Status}, ready, upToDate
}

// read reads the store, the stack and the builder.
func (w *faultWorld) read(t *testing.T) (*v1alpha1.ClusterStore, *v1alpha1.ClusterStack, *v1alpha1.Builder) {
	t.Helper()
	ctx := context.Background()
	bs := client.BuildsmithV1alpha1()
	store, err1 := bs.ClusterStores().Get(ctx, w.name, metav1.GetOptions{})
	stack, err2 := bs.ClusterStacks().Get(ctx, w.name, metav1.GetOptions{})
	builder, err3 := bs.Builders(w.ns).Get(ctx, w.name, metav1.GetOptions{})
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	return store, stack, builder
}

// readySince returns when the store, stack and builder last turned Ready (or
// not): a Ready that flipped and came back between two polls shows here.
func (w *faultWorld) readySince(t *testing.T) [3]time.Time {
	t.Helper()
	store, stack, builder := w.read(t)
	var since [3]time.Time
	for i, s := range []*v1alpha1.ConditionedStatus{&store.Status.ConditionedStatus, &stack.Status.ConditionedStatus, &builder.Status.ConditionedStatus} {
		if c := s.GetCondition(v1alpha1.ConditionReady); c != nil {
			since[i] = c.LastTransitionTime.Inner.Time
		}
	}
	return since
}

// survives runs the world to Ready, then starts a fault and waits until all
// three objects say reason in UpToDate=False (they meet it at their 2 s
// resyncs), while they stay Ready and nothing they found out before
// changes: a fault that changed nothing takes nothing usable away. Then it
// ends the fault and waits until all three are up to date again (within
// 5 s), with the same status: the same buildpacks, stack, and builder
// image, never pushed again.
func (w *faultWorld) survives(t *testing.T, reason string, fault, end func()) {
	t.Helper()
	w.apply(t)
	w.waitReady(t, 60*time.Second)
	good, _, _ := w.status(t)
	if good.Builder.LatestImage == "" || len(good.Store.Buildpacks) == 0 || good.Stack.RunImage.Image == "" {
		t.Fatalf("Ready but with an incomplete status: %+v", good)
	}
	goodSince := w.readySince(t)
	pushes := w.f.Count("PUT", "/builders/"+w.name+"/manifests/latest")

	fault()
	took := eventually(t, 15*time.Second, "all three to report "+reason+" in UpToDate, Ready all along", func() (bool, string) {
		now, ready, upToDate := w.status(t)
		if ready != [3]string{} {
			t.Fatalf("left Ready during the fault: Ready reasons of store, stack, builder %q", ready)
		}
		if !reflect.DeepEqual(now, good) {
			t.Fatalf("status changed during the fault:\nbefore %+v\nnow    %+v", good, now)
		}
		return upToDate == [3]string{reason, reason, reason}, fmt.Sprint("UpToDate reasons of store, stack, builder: ", upToDate)
	})
	t.Logf("all three reported the fault %v after it began", took.Round(10*time.Millisecond))
	end()
	ended := time.Now()
	w.waitUpToDate(t, 5*time.Second)
	t.Logf("all up to date %v after the fault ended", time.Since(ended).Round(10*time.Millisecond))
	if now, _, _ := w.status(t); !reflect.DeepEqual(now, good) {
		t.Errorf("status after recovery differs:\nbefore %+v\nafter  %+v", good, now)
	}
	if n := w.f.Count("PUT", "/builders/"+w.name+"/manifests/latest"); n != pushes {
		t.Errorf("the builder was pushed %d more times", n-pushes)
	}
	if since := w.readySince(t); since != goodSince {
		t.Errorf("Ready changed during the fault and back (last transitions %v, before %v)", since, goodSince)
	}
}

// waitUpToDate waits with kubectl for the three objects' UpToDate
// condition, as a kpack user's tooling does.
func (w *faultWorld) waitUpToDate(t *testing.T, timeout time.Duration) {
	t.Helper()
	wait := env.Kubectl("wait", "--for=condition=UpToDate", fmt.Sprintf("--timeout=%s", timeout),
		"clusterstore/"+w.name, "clusterstack/"+w.name, "-n", w.ns, "builder/"+w.name)
	if out, err := wait.CombinedOutput(); err != nil {
		_, ready, upToDate := w.status(t)
		t.Fatalf("kubectl wait: %v\n%s\nReady reasons %q, UpToDate reasons %q", err, out, ready, upToDate)
	}
}

// TestRegistryStoppedAndRestarted: the distribution registry process stops
// (connections refused) for 10 s and starts again on its storage; the
// objects stay Ready, say RegistryUnavailable in UpToDate meanwhile, keep
// what they found, and are up to date within seconds of the restart, woken
// by the circuit's probe rather than by a backoff of up to 5 minutes.
func TestRegistryStoppedAndRestarted(t *testing.T) {
	w := newFaultWorld(t, "stopped")
	startController(t, "--resync-interval", "2s", "--retry-base-delay", "30s", "--retry-max-delay", "5m")
	w.survives(t, "RegistryUnavailable", func() {
		w.f.Down()
		w.d.Stop()
	}, func() {
		time.Sleep(10 * time.Second)
		if err := w.d.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.f.Up()
	})
}

// TestRateLimitedWithRetryAfter: the registry answers 429 with
// Retry-After: 3 to the first manifest requests; no request on a limited
// repository comes before its Retry-After, and everything ends Ready.
func TestRateLimitedWithRetryAfter(t *testing.T) {
	w := newFaultWorld(t, "limited")
	var mu sync.Mutex
	var limitedAt []time.Time
	limited := 0
	w.f.Inject("", "/stack/run/manifests/", -1, func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		limitedAt = append(limitedAt, time.Now())
		limited++
		n := limited
		mu.Unlock()
		if n <= 2 {
			registrytest.Answer(429, map[string]string{"Retry-After": "3"}, registrytest.OCIError("TOOMANYREQUESTS", "slow down"))(rw, r)
			return
		}
		w.f.Handler.ServeHTTP(rw, r)
	})
	startController(t)
	w.apply(t)
	w.waitReady(t, 40*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(limitedAt) && i <= 2; i++ {
		if gap := limitedAt[i].Sub(limitedAt[i-1]); gap < 3*time.Second {
			t.Errorf("request %d came %v after a 429 with Retry-After: 3", i+1, gap.Round(time.Millisecond))
		}
	}
}

// TestStatusWithinSecondsInA429Storm: builders created while the registry
// answers every request 429 with Retry-After: 3 each show Ready=False,
// Reconciling=True and the reason within 15 s (issue 26: their first
// reconcile does not wait out the holds inside its calls), while the
// builder that was Ready stays Ready; all are Ready within seconds of the
// storm's end.
func TestStatusWithinSecondsInA429Storm(t *testing.T) {
	w := newFaultWorld(t, "storm")
	startController(t)
	w.apply(t)
	w.waitReady(t, 60*time.Second)
	w.f.Inject("", "/v2/", -1, registrytest.Answer(429, map[string]string{"Retry-After": "3"},
		registrytest.OCIError("TOOMANYREQUESTS", "slow down")))
	const n = 20
	builders := client.BuildsmithV1alpha1().Builders(w.ns)
	w.requestReconcile(t, "builder/"+w.name) // the Ready builder is re-checked in the storm
	for i := range n {
		w.createBuilder(t, fmt.Sprintf("storm-%d", i))
	}
	took := eventually(t, 15*time.Second, "every builder created in the storm to say why it waits", func() (bool, string) {
		list, err := builders.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		silent := 0
		for _, b := range list.Items {
			ready := b.Status.GetCondition(v1alpha1.ConditionReady)
			if b.Name == w.name {
				if ready == nil || !ready.IsTrue() {
					t.Fatalf("the Ready builder left Ready in the storm: %+v", b.Status.Conditions)
				}
				if c := b.Status.GetCondition(v1alpha1.ConditionUpToDate); c == nil || !c.IsFalse() || c.Reason != "RateLimited" {
					silent++ // its re-check has not said so yet
				}
				continue
			}
			reconciling := b.Status.GetCondition(v1alpha1.ConditionReconciling)
			if ready == nil || !ready.IsFalse() || ready.Reason != "RateLimited" || reconciling == nil || !reconciling.IsTrue() {
				silent++
			}
		}
		return silent == 0, fmt.Sprintf("%d of %d builders not yet saying RateLimited (the new ones Ready=False, Reconciling=True; the Ready one UpToDate=False)", silent, n+1)
	})
	t.Logf("all %d builders said RateLimited %v after they were created", n, took.Round(100*time.Millisecond))
	w.f.ClearFaults()
	ended := time.Now()
	names := []string{"-n", w.ns}
	for i := range n {
		names = append(names, fmt.Sprintf("builder/storm-%d", i))
	}
	wait := env.Kubectl(append([]string{"wait", "--for=condition=Ready", "--timeout=30s"}, names...)...)
	if out, err := wait.CombinedOutput(); err != nil {
		t.Fatalf("not Ready 30s after the storm: %v\n%s", err, out)
	}
	t.Logf("all Ready %v after the storm ended", time.Since(ended).Round(100*time.Millisecond))
}

// TestStackImagePushedLater: a ClusterStack applied before its run image
// exists waits (ImageNotFound), and becomes Ready once the image is pushed,
// by its poll.
func TestStackImagePushedLater(t *testing.T) {
	w := newFaultWorld(t, "late")
	ctx := context.Background()
	startController(t, "--poll-interval", "2s")
	bs := client.BuildsmithV1alpha1()
	if _, err := bs.ClusterStacks().Create(ctx, &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "late"},
		Spec: w.objects.stackSpec("stack/run-later:1")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the stack waiting for its run image", func() (bool, string) {
		s, err := bs.ClusterStacks().Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := s.Status.GetCondition(v1alpha1.ConditionReady)
		return c != nil && c.Reason == "ImageNotFound" && strings.Contains(c.Message, "run-later"), fmt.Sprintf("%+v", s.Status.Conditions)
	})
	run, err := sampleimages.StackImage("io.buildpacks.stacks.faults", 0)
	push(t, w.f, "stack/run-later:1", run, err)
	if out, err := env.Kubectl("wait", "--for=condition=Ready", "--timeout=20s", "clusterstack/late").CombinedOutput(); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
}

// TestControllerKilledDuringPush: the controller is killed while it pushes
// a builder (the manifest PUT hangs); nothing is tagged; a new controller
// finishes the job.
func TestControllerKilledDuringPush(t *testing.T) {
	w := newFaultWorld(t, "killed")
	hung := make(chan struct{}, 1)
	w.f.Inject("PUT", "/builders/killed/manifests/", -1, func(rw http.ResponseWriter, r *http.Request) {
		select {
		case hung <- struct{}{}:
		default:
		}
		w.f.Hang(rw, r)
	})
	stop := startStoppableController(t)
	w.apply(t)
	select {
	case <-hung:
	case <-time.After(30 * time.Second):
		t.Fatal("the builder push never reached the manifest")
	}
	stop()
	if _, err := w.f.Resolve(w.f.Addr + "/builders/killed:latest"); err == nil {
		t.Fatal("the tag exists although the push was killed before its manifest")
	}
	w.f.ClearFaults()
	startController(t)
	w.waitReady(t, 30*time.Second)
	b, _ := client.BuildsmithV1alpha1().Builders(w.ns).Get(context.Background(), w.name, metav1.GetOptions{})
	if tagged, _ := w.f.Resolve(w.f.Addr + "/builders/killed:latest"); tagged != b.Status.LatestImage {
		t.Errorf("tag at %q, latestImage %q", tagged, b.Status.LatestImage)
	}
}

// TestTwoReplicas: two controllers with leader election share the work by
// buckets; when one is killed, the other takes its buckets over (after the
// 4 s lease) and finishes what comes next.
func TestTwoReplicas(t *testing.T) {
	w := newFaultWorld(t, "ha")
	ctx := context.Background()
	cms := kube.CoreV1().ConfigMaps(systemNamespace)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "config-leader-election"},
		Data: map[string]string{"buckets": "4", "lease-duration": "4s", "renew-deadline": "3s", "retry-period": "1s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(ctx, "config-leader-election", metav1.DeleteOptions{}) })
	first := startControllerWith(t, env.Kubeconfig, systemNamespace, false)
	startControllerWith(t, env.Kubeconfig, systemNamespace, false)

	stacks := client.BuildsmithV1alpha1().ClusterStacks()
	create := func(names ...string) {
		for _, name := range names {
			if _, err := stacks.Create(ctx, &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: w.objects.stackSpec("stack/run:1")}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ready := func(names ...string) {
		t.Helper()
		args := []string{"wait", "--for=condition=Ready", "--timeout=60s"}
		for _, name := range names {
			args = append(args, "clusterstack/"+name)
		}
		if out, err := env.Kubectl(args...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl wait: %v\n%s", err, out)
		}
	}
	before := []string{"ha-1", "ha-2", "ha-3", "ha-4", "ha-5", "ha-6"}
	create(before...)
	ready(before...)

	// Every ClusterStack bucket has a leader. (Which replica holds which
	// depends on who asked first; when one starts well before the other
	// it may hold all four, and the other waits to take them over.)
	eventually(t, 20*time.Second, "every bucket led", func() (bool, string) {
		leases, err := kube.CoordinationV1().Leases(systemNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		held := 0
		for _, l := range leases.Items {
			if strings.Contains(l.Name, "clusterstack") && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				held++
			}
		}
		return held == 4, fmt.Sprint(held, " of 4 buckets held")
	})

	// Kill the first replica: whatever it led, the second takes over.
	first()
	after := []string{"ha-7", "ha-8", "ha-9", "ha-10", "ha-11", "ha-12"}
	create(after...)
	ready(after...)
}

// TestReconcileRequestSkipsTheBackoff: a Builder whose push failed waits 5
// minutes before its next try; the reconcile-request annotation, set with
// kubectl, makes it try at once, and status echoes the request. (The push
// fails with an answer ggcr does not expect, 204: a transient error that is
// no outage, so it is left to the backoff rather than to a circuit.)
func TestReconcileRequestSkipsTheBackoff(t *testing.T) {
	w := newFaultWorld(t, "requested")
	w.f.Inject("PUT", "/builders/requested/manifests/", -1, registrytest.Answer(204, nil, ""))
	startController(t, "--retry-base-delay", "5m", "--retry-max-delay", "5m")
	w.apply(t)
	ctx := context.Background()
	builders := client.BuildsmithV1alpha1().Builders(w.ns)
	eventually(t, 60*time.Second, "the builder to wait 5 minutes after its failed push", func() (bool, string) {
		b, err := builders.Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		// 5 minutes, jittered by up to -20 %.
		c := b.Status.GetCondition(v1alpha1.ConditionReconciling)
		if c == nil {
			return false, fmt.Sprintf("%+v", b.Status.Conditions)
		}
		wait, err := time.ParseDuration(strings.TrimPrefix(c.Message, "retrying in "))
		return err == nil && wait >= 4*time.Minute, fmt.Sprintf("%+v", b.Status.Conditions)
	})
	w.f.ClearFaults()

	const requested = "2026-12-03T08:30:00Z"
	if out, err := env.Kubectl("annotate", "-n", w.ns, "builder/"+w.name, v1alpha1.ReconcileRequestedAtAnnotation+"="+requested).CombinedOutput(); err != nil {
		t.Fatalf("kubectl annotate: %v\n%s", err, out)
	}
	took := eventually(t, 20*time.Second, "the builder Ready after the request", func() (bool, string) {
		b, err := builders.Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return b.Status.IsReady() && b.Status.LastHandledReconcileAt == requested,
			fmt.Sprintf("lastHandledReconcileAt %q, %+v", b.Status.LastHandledReconcileAt, b.Status.Conditions)
	})
	t.Logf("Ready %v after the annotation (backoff: 5m)", took.Round(10*time.Millisecond))
}
