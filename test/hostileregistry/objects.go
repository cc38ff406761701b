package hostileregistry

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/client/clientset/versioned"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler/builder"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Tenant is where the hostile tenant's objects go and what they share with
// the calm tenant (a platform team's store and stack).
type Tenant struct {
	Namespace    string // made by the caller, with a default ServiceAccount that reads the shared images
	Store, Stack string // a ClusterStore and a ClusterStack
	Order        []v1alpha1.OrderEntry
	// Signer is a ServiceAccount of Namespace listing a cosign key's Secret.
	Signer string
}

// Object is an object of the hostile tenant and what its status must come
// to say.
type Object struct {
	Kind, Name string // Builder or Buildpack, in the tenant's namespace
	Want       string
	OK         func(*v1alpha1.ConditionedStatus) bool
	Last       string // its Ready condition when last read
	Met        bool   // whether it said what it must when last read
}

// Objects are the hostile tenant's objects.
type Objects []*Object

// Create creates the tenant's Buildpacks (zstd, endless, limited) and
// Builders: zstd and endless flatten the Buildpack of their name; signed
// signs with tn.Signer's key; flood-NN are tagged on the flood hosts.
func (h *Registry) Create(ctx context.Context, c versioned.Interface, tn Tenant, floods []*Flood) (Objects, error) {
	for _, name := range []string{"zstd", "endless", "limited"} {
		if _, err := c.BuildsmithV1alpha1().Buildpacks(tn.Namespace).Create(ctx, &v1alpha1.Buildpack{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tn.Namespace},
			Spec:       v1alpha1.BuildpackSpec{Image: h.Addr + "/hostile/" + name + ":1"}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	spec := func(tag string, order []v1alpha1.OrderEntry) v1alpha1.NamespacedBuilderSpec {
		return v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Tag: tag,
			Stack: v1alpha1.StackRef{Name: tn.Stack}, Store: v1alpha1.StoreRef{Name: tn.Store}, Order: order}}
	}
	flattened := func(name string) v1alpha1.NamespacedBuilderSpec {
		s := spec(h.Addr+"/builders/"+name+":latest", []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{
			{ID: "hostile/" + name + "-a"}, {ID: "hostile/" + name + "-b"}}}})
		s.Sources = []v1alpha1.SourceRef{{Kind: "Buildpack", Name: name}}
		s.Flatten = &v1alpha1.Flatten{All: true}
		return s
	}
	signed := spec(h.Addr+"/builders/signed:latest", tn.Order)
	signed.ServiceAccountName = tn.Signer
	builders := map[string]v1alpha1.NamespacedBuilderSpec{"zstd": flattened("zstd"), "endless": flattened("endless"), "signed": signed}
	for i, f := range floods {
		builders[floodBuilder(i)] = spec(f.Addr+"/builders/app:latest", tn.Order)
	}
	for name, s := range builders {
		if _, err := c.BuildsmithV1alpha1().Builders(tn.Namespace).Create(ctx, &v1alpha1.Builder{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tn.Namespace}, Spec: s}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	return expectations(len(floods)), nil
}

func floodBuilder(i int) string { return fmt.Sprintf("flood-%02d", i) }

// expectations are the statuses of Create's objects.
func expectations(floods int) Objects {
	os := Objects{
		{Kind: "Builder", Name: "zstd", Want: "Stalled, InvalidBuildpackLayer naming --max-zstd-window",
			OK: func(s *v1alpha1.ConditionedStatus) bool {
				return readyWith(s, cnb.ReasonInvalidBuildpackLayer, "--max-zstd-window") && isTrue(s, v1alpha1.ConditionStalled)
			}},
		{Kind: "Builder", Name: "endless", Want: "Reconciling, RegistryError: the registry sent more than the bytes declared",
			OK: func(s *v1alpha1.ConditionedStatus) bool {
				return readyWith(s, registry.ReasonRegistryError, "sent more than") && isTrue(s, v1alpha1.ConditionReconciling)
			}},
		{Kind: "Builder", Name: "signed", Want: "SignatureImageTooLarge naming --max-signature-layers",
			OK: func(s *v1alpha1.ConditionedStatus) bool {
				return readyWith(s, builder.ReasonSignatureImageTooLarge, "--max-signature-layers")
			}},
		{Kind: "Buildpack", Name: "limited", Want: "RateLimited, retrying no sooner than the Retry-After (hours)",
			OK: func(s *v1alpha1.ConditionedStatus) bool {
				return readyWith(s, registry.ReasonRateLimited, "") && retryingAfter(s, time.Hour)
			}},
	}
	for i := range floods {
		os = append(os, &Object{Kind: "Builder", Name: floodBuilder(i), Want: "RegistryError naming --registry-max-header-bytes",
			OK: func(s *v1alpha1.ConditionedStatus) bool {
				return readyWith(s, registry.ReasonRegistryError, "--registry-max-header-bytes")
			}})
	}
	return os
}

// Check reads every object's status once: do all say what they must? The
// second result lists those that do not.
func (os Objects) Check(ctx context.Context, c versioned.Interface, ns string) (bool, string) {
	bs := c.BuildsmithV1alpha1()
	var wrong []string
	for _, o := range os {
		var status *v1alpha1.ConditionedStatus
		if o.Kind == "Buildpack" {
			b, err := bs.Buildpacks(ns).Get(ctx, o.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			status = &b.Status.ConditionedStatus
		} else {
			b, err := bs.Builders(ns).Get(ctx, o.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			status = &b.Status.ConditionedStatus
		}
		o.Last, o.Met = ReadyOf(status), o.OK(status)
		if !o.Met {
			wrong = append(wrong, fmt.Sprintf("%s/%s, want %s: %s", o.Kind, o.Name, o.Want, o.Last))
		}
	}
	return len(wrong) == 0, strings.Join(wrong, "\n")
}

// Met is how many objects said what they must when last read.
func (os Objects) Met() int {
	n := 0
	for _, o := range os {
		if o.Met {
			n++
		}
	}
	return n
}

// Log prints each status as last read, the flood builders' counted by
// reason.
func (os Objects) Log(t testing.TB) {
	t.Helper()
	for _, o := range os {
		if o.Name == floodBuilder(0) || !strings.HasPrefix(o.Name, "flood-") {
			t.Logf("%s/%s: %.900s", o.Kind, o.Name, o.Last)
		}
	}
	t.Logf("the builders tagged on the flood hosts, by Ready reason: %s", os.FloodReasons())
}

// FloodReasons counts the flood builders by the reason of Ready, as last
// read.
func (os Objects) FloodReasons() string {
	floods := map[string]int{}
	for _, o := range os {
		if strings.HasPrefix(o.Name, "flood-") {
			reason, _, _ := strings.Cut(strings.TrimPrefix(o.Last, "False "), ":")
			floods[reason]++
		}
	}
	var parts []string
	for reason, n := range floods {
		parts = append(parts, fmt.Sprintf("%s %d", reason, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// ReadyOf is "status reason: message" of the Ready condition, or "no
// status".
func ReadyOf(s *v1alpha1.ConditionedStatus) string {
	c := s.GetCondition(v1alpha1.ConditionReady)
	if c == nil {
		return "no status"
	}
	return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
}

// readyWith: Ready is False with reason and a message holding part.
func readyWith(s *v1alpha1.ConditionedStatus, reason, part string) bool {
	c := s.GetCondition(v1alpha1.ConditionReady)
	return c != nil && c.IsFalse() && c.Reason == reason && strings.Contains(c.Message, part)
}

// retryingAfter: Reconciling says it retries no sooner than least.
func retryingAfter(s *v1alpha1.ConditionedStatus, least time.Duration) bool {
	c := s.GetCondition(v1alpha1.ConditionReconciling)
	if c == nil || !c.IsTrue() {
		return false
	}
	in, ok := strings.CutPrefix(c.Message, "retrying in ")
	d, err := time.ParseDuration(strings.Fields(in + " ")[0])
	return ok && err == nil && d >= least
}

func isTrue(s *v1alpha1.ConditionedStatus, ct apis.ConditionType) bool {
	c := s.GetCondition(ct)
	return c != nil && c.IsTrue()
}
