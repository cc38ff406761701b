package reconciler

import (
	"context"
	"flag"
	"io"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/kmeta"
	"knative.dev/pkg/tracker"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
)

// TestClusterKindsCredentialNamespaces: with --cluster-credential-namespaces
// set, a cluster kind naming a ServiceAccount outside those namespaces gets
// a permanent error saying which namespaces it may use, and nothing is read;
// inside them, and for namespaced builders anywhere, credentials resolve as
// before. Unset, any namespace goes (kpack's behaviour).
func TestClusterKindsCredentialNamespaces(t *testing.T) {
	accounts := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range []string{"builds", "kube-system", "team"} {
		_ = accounts.Add(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}})
	}
	store := &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}
	builder := &v1alpha1.Builder{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"}}
	tests := []struct {
		name    string
		allowed []string
		obj     kmeta.Accessor
		account string // namespace of the ServiceAccount named
		refused bool
	}{
		{"no list: a cluster kind may use any namespace", nil, store, "kube-system", false},
		{"a cluster kind, a listed namespace", []string{"builds"}, store, "builds", false},
		{"a cluster kind, another namespace", []string{"builds"}, store, "kube-system", true},
		{"a namespaced builder, its own namespace, not listed", []string{"builds"}, builder, "team", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCredentialsFrom(corev1listers.NewServiceAccountLister(accounts),
				NewSecretWatches(t.Context(), fake.NewClientset(), time.Hour, DefaultSecretLimits()),
				tracker.New(func(types.NamespacedName) {}, 0), Options{CredentialNamespaces: tc.allowed})
			_, err := c.ForServiceAccount(context.Background(), tc.obj, &v1alpha1.ServiceAccountRef{Namespace: tc.account, Name: "default"})
			f, classified := failure.As(err)
			switch {
			case !tc.refused && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused && (!classified || f.Class != failure.Permanent || f.Reason != ReasonServiceAccountNotAllowed):
				t.Fatalf("error %v, want a permanent %s", err, ReasonServiceAccountNotAllowed)
			case tc.refused:
				t.Logf("%v", err)
			}
		})
	}
}

// TestCredentialNamespacesFlag: the flag adds namespaces each time it is
// given, and refuses a blank value rather than meaning "any".
func TestCredentialNamespacesFlag(t *testing.T) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--cluster-credential-namespaces", "builds, platform", "--cluster-credential-namespaces=tools"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"builds", "platform", "tools"}; !slices.Equal(o.CredentialNamespaces, want) {
		t.Errorf("namespaces %q, want %q", o.CredentialNamespaces, want)
	}
	for _, blank := range []string{"", " ", ","} {
		if err := fs.Parse([]string{"--cluster-credential-namespaces=" + blank}); err == nil {
			t.Errorf("--cluster-credential-namespaces=%q accepted", blank)
		}
	}
}
