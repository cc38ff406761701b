package bench

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/reconciler/builder"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/hostileregistry"
)

// registryFloods is how many hosts answering 8 MiB of headers the hostile
// registry tenant tags builders on (as e2e TestHostileRegistry).
const registryFloods = 24

// registryTenant is the part of scenario 15's hostile tenant that runs a
// registry of its own (issue 37), in a namespace of its own so that its
// signing key's Secret gets a watch of its own.
type registryTenant struct {
	h       *hostileregistry.Registry
	floods  []*hostileregistry.Flood
	ns      string
	objects hostileregistry.Objects
	created time.Time
	// watched is closed once every object said which bound it met (met
	// says when), or the test ended.
	watched   chan struct{}
	met       time.Time
	stopWatch context.CancelFunc
}

// registryOutcome is what the hostile registry's objects came to say, and
// what the registry served.
type registryOutcome struct {
	said, of int           // objects that said which bound they met, of all
	took     time.Duration // from their creation until all had (-1: not all did)
	wrong    string        // those that did not, as last read
	floods   string        // the flood builders by reason
	traffic  string
	missed   error // a fault never met
}

// createRegistryTenant starts the hostile registry and its flood hosts,
// and creates its tenant's namespace, a cosign key for the signing
// builder, and the objects (over w's store and stack).
func createRegistryTenant(t *testing.T, w *world, id string) *registryTenant {
	t.Helper()
	ctx := context.Background()
	rt := &registryTenant{h: hostileregistry.New(t), floods: hostileregistry.StartFloods(t, registryFloods), ns: "registry-" + id}
	tw := w.inNamespace(t, rt.ns, rt.h.Addr)
	private, _ := cosigntest.KeyPair(t, "pw")
	secret := cosigntest.Secret(rt.ns, "signing", private, "pw")
	secret.ResourceVersion = ""
	if _, err := kube.CoreV1().Secrets(rt.ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(rt.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "signer"},
		Secrets: []corev1.ObjectReference{{Name: "signing"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bs := client.BuildsmithV1alpha1()
		_ = bs.Buildpacks(rt.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = kube.CoreV1().Secrets(rt.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	objects, err := rt.h.Create(ctx, client, hostileregistry.Tenant{Namespace: rt.ns, Store: w.name, Stack: w.name,
		Order: tw.order(), Signer: "signer"}, rt.floods)
	if err != nil {
		t.Fatal(err)
	}
	rt.objects, rt.created, rt.watched = objects, time.Now(), make(chan struct{})
	watching, stop := context.WithCancel(t.Context())
	rt.stopWatch = stop
	go rt.watch(watching)
	return rt
}

// watch reads the objects' statuses every 2 s until all say which bound
// they met.
func (rt *registryTenant) watch(ctx context.Context) {
	defer close(rt.watched)
	for ctx.Err() == nil {
		if ok, _ := rt.objects.Check(ctx, client, rt.ns); ok {
			rt.met = time.Now()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// outcome waits up to wait for every object to say which bound it met,
// and reads what the registry served.
func (rt *registryTenant) outcome(wait time.Duration) registryOutcome {
	o := registryOutcome{of: len(rt.objects)}
	select {
	case <-rt.watched:
	case <-time.After(wait):
		rt.stopWatch()
		<-rt.watched
	}
	if rt.met.IsZero() {
		o.took = -1
		_, o.wrong = rt.objects.Check(context.Background(), client, rt.ns)
	} else {
		o.took = rt.met.Sub(rt.created)
	}
	o.said = rt.objects.Met()
	o.floods = rt.objects.FloodReasons()
	o.traffic, o.missed = rt.h.Traffic()
	if asked, err := hostileregistry.FloodTraffic(rt.floods); err != nil {
		o.missed = cmpOr(o.missed, err)
	} else {
		o.traffic += fmt.Sprintf("; requests to each flood host: %v", asked)
	}
	return o
}

// scratchBudget is the most the controller's scratch directory may hold
// with its default flags (the chart's sizeLimit): 2 × the flattens at
// once × the bytes a flatten may write.
const scratchBudget = 2 * builder.DefaultConcurrentFlattens * builder.DefaultMaxFlattenedBytes

// registryTargets are the targets of issue 37 that § 15 checks beyond
// issue 27's: the scratch directory within its budget and the controller
// never restarted, in every run, and every object of the hostile
// registry saying which bound it met.
func registryTargets(alone, beside []hostileResult) []target {
	var peak int64
	var peaks []string
	var ended error
	for _, r := range append(append([]hostileResult(nil), alone...), beside...) {
		peak = max(peak, r.scratchPeak)
		ended = cmpOr(ended, r.ended)
	}
	for _, r := range beside {
		peaks = append(peaks, mib(r.scratchPeak))
	}
	said, of := 0, 0
	var took []string
	for _, r := range beside {
		said, of = said+r.registry.said, of+r.registry.of
		if r.registry.took >= 0 {
			took = append(took, r.registry.took.Round(time.Second).String())
		}
	}
	ran := "ran throughout"
	if ended != nil {
		ran = ended.Error()
	}
	return []target{
		{"scratch directory peak, every run", fmt.Sprintf("≤ %d GiB (2 × `--max-concurrent-flattens` × `--max-flattened-bytes`, the chart's `sizeLimit`)", scratchBudget>>30),
			fmt.Sprintf("%s beside (%s alone)", strings.Join(peaks, ", "), mib(alone[0].scratchPeak)), peak > 0 && peak <= scratchBudget},
		{"the controller ran from start to end, every run", "no exit, no restart", ran, ended == nil},
		{"the hostile registry's objects each say which bound they met (as e2e `TestHostileRegistry`)", fmt.Sprintf("%d of %d", of, of),
			fmt.Sprintf("%d of %d; all had, read every 2 s, %s after they were created", said, of, cmp.Or(strings.Join(took, ", "), "never")),
			of > 0 && said == of},
	}
}

// registryNotes say what the hostile registry served and how its objects
// ended.
func registryNotes(b hostileResult) []string {
	o := b.registry
	notes := []string{fmt.Sprintf("The hostile registry served: %s. Builders tagged on the flood hosts, by `Ready` reason: %s.", o.traffic, o.floods)}
	if o.missed != nil {
		notes = append(notes, fmt.Sprintf("A fault of the hostile registry was never met (%v): its targets prove less than they say.", o.missed))
	}
	if o.wrong != "" {
		notes = append(notes, "Hostile registry objects that did not say which bound they met: "+strings.ReplaceAll(o.wrong, "\n", "; ")+".")
	}
	return notes
}
