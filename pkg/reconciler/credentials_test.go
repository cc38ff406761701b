package reconciler

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// readPaths are the ways Credentials reads an account's Secrets: registry
// credentials (every kind) and signing keys (builders). A new way to read
// credentials or keys belongs here, so that the checks below cover it.
var readPaths = []struct {
	name string
	read func(context.Context, Credentials, kmeta.Accessor, *v1alpha1.ServiceAccountRef) error
}{
	{"registry credentials", func(ctx context.Context, c Credentials, obj kmeta.Accessor, ref *v1alpha1.ServiceAccountRef) error {
		_, err := c.ForServiceAccount(ctx, obj, ref)
		return err
	}},
	{"signing keys", func(ctx context.Context, c Credentials, obj kmeta.Accessor, ref *v1alpha1.ServiceAccountRef) error {
		secrets, err := c.SigningSecrets(ctx, obj, ref, "cosign.key", "cosign.password")
		if err == nil && len(secrets) == 0 {
			return errNothingRead
		}
		return err
	}},
}

var errNothingRead = errors.New("no signing Secret read")

// accountWorld is a namespace's ServiceAccount "default" naming a pull
// Secret and a cosign key Secret, both there, for each namespace given.
func accountWorld(namespaces ...string) (corev1listers.ServiceAccountLister, *fake.Clientset) {
	accounts := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	var secrets []runtime.Object
	for _, ns := range namespaces {
		_ = accounts.Add(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"},
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
			Secrets:          []corev1.ObjectReference{{Name: "cosign"}}})
		secrets = append(secrets, secret(ns, "registry", `{"auths":{}}`),
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cosign"},
				Data: map[string][]byte{"cosign.key": []byte("key"), "cosign.password": nil}})
	}
	return corev1listers.NewServiceAccountLister(accounts), fake.NewClientset(secrets...)
}

// secretReads are the namespaces of the Secret requests client was sent.
func secretReads(client *fake.Clientset) []string {
	var out []string
	for _, action := range client.Actions() {
		if action.GetResource().Resource == "secrets" && !slices.Contains(out, action.GetNamespace()) {
			out = append(out, action.GetNamespace())
		}
	}
	return out
}

// TestEveryReadPathChecksTheClusterLockDown (issue 27, finding 6): with
// --cluster-credential-namespaces set, each path that reads an account's
// credentials or keys refuses a cluster kind's ServiceAccount elsewhere
// (ServiceAccountNotAllowed) by itself, before any Secret is read — the
// signing keys do not rely on the registry credentials having been read
// first. Removing either check fails this test: the Secrets are there to
// read, as the allowed cases show.
func TestEveryReadPathChecksTheClusterLockDown(t *testing.T) {
	for _, path := range readPaths {
		for _, obj := range []kmeta.Accessor{
			&v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "shared"}},
			&v1alpha1.ClusterBuilder{ObjectMeta: metav1.ObjectMeta{Name: "shared"}},
		} {
			for _, tc := range []struct {
				account string
				refused bool
			}{{"kube-system", true}, {"build-system", false}} {
				t.Run(fmt.Sprintf("%s/%T/%s", path.name, obj, tc.account), func(t *testing.T) {
					accounts, client := accountWorld("kube-system", "build-system")
					c := NewCredentialsFrom(accounts, NewSecretWatches(t.Context(), client, time.Hour, DefaultSecretLimits()),
						tracker.New(func(types.NamespacedName) {}, 0), Options{CredentialNamespaces: []string{"build-system"}})
					err := path.read(t.Context(), c, obj, &v1alpha1.ServiceAccountRef{Namespace: tc.account, Name: "default"})
					if !tc.refused {
						if err != nil || !slices.Equal(secretReads(client), []string{tc.account}) {
							t.Fatalf("an allowed namespace: %v, Secrets read in %q", err, secretReads(client))
						}
						return
					}
					if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != ReasonServiceAccountNotAllowed ||
						!strings.Contains(err.Error(), "--cluster-credential-namespaces") {
						t.Errorf("error %v, want a permanent %s naming the flag", err, ReasonServiceAccountNotAllowed)
					}
					if read := secretReads(client); len(read) > 0 {
						t.Errorf("Secrets read in %q before the refusal", read)
					}
				})
			}
		}
	}
}

// TestEveryReadPathChecksSecretNamespaces: with --secret-namespaces set,
// each path that reads an account's Secrets refuses one outside those
// namespaces before any request (SecretNamespaceNotAllowed, permanent,
// naming the flag and the namespaces), for namespaced and cluster kinds
// alike, while a tenant in a listed namespace is read as ever.
func TestEveryReadPathChecksSecretNamespaces(t *testing.T) {
	limits := DefaultSecretLimits()
	limits.Namespaces = []string{"builds", "platform"}
	for _, path := range readPaths {
		for _, tc := range []struct {
			name    string
			obj     kmeta.Accessor
			account string
			refused bool
		}{
			{"a builder in a listed namespace", &v1alpha1.Builder{ObjectMeta: metav1.ObjectMeta{Namespace: "builds", Name: "app"}}, "builds", false},
			{"a builder elsewhere", &v1alpha1.Builder{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"}}, "team", true},
			{"a cluster builder, an account elsewhere", &v1alpha1.ClusterBuilder{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}, "kube-system", true},
		} {
			t.Run(path.name+"/"+tc.name, func(t *testing.T) {
				accounts, client := accountWorld("builds", "team", "kube-system")
				c := NewCredentialsFrom(accounts, NewSecretWatches(t.Context(), client, time.Hour, limits),
					tracker.New(func(types.NamespacedName) {}, 0), Options{Secrets: limits})
				err := path.read(t.Context(), c, tc.obj, &v1alpha1.ServiceAccountRef{Namespace: tc.account, Name: "default"})
				if !tc.refused {
					if err != nil || !slices.Equal(secretReads(client), []string{tc.account}) {
						t.Fatalf("a listed namespace: %v, Secrets read in %q", err, secretReads(client))
					}
					return
				}
				if f, ok := failure.As(err); !ok || f.Class != failure.Permanent || f.Reason != ReasonSecretNamespaceNotAllowed ||
					!strings.Contains(err.Error(), "--secret-namespaces") || !strings.Contains(err.Error(), "builds, platform") {
					t.Errorf("error %v, want a permanent %s naming the flag and the namespaces", err, ReasonSecretNamespaceNotAllowed)
				}
				if read := secretReads(client); len(read) > 0 {
					t.Errorf("Secrets requested in %q: the refusal must come before any request", read)
				}
			})
		}
	}
}

// TestSecretNamespacesFlag: --secret-namespaces adds namespaces each time
// it is given (once each), and refuses a blank value or a name no
// namespace can have rather than reading any namespace.
func TestSecretNamespacesFlag(t *testing.T) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if len(o.Secrets.Namespaces) != 0 {
		t.Fatalf("default %q, want none (any namespace)", o.Secrets.Namespaces)
	}
	if err := fs.Parse([]string{"--secret-namespaces", "builds, platform", "--secret-namespaces=tools,builds"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"builds", "platform", "tools"}; !slices.Equal(o.Secrets.Namespaces, want) {
		t.Errorf("namespaces %q, want %q", o.Secrets.Namespaces, want)
	}
	for _, bad := range []string{"", " ", ",", "Team_A", "team/a"} {
		if err := fs.Parse([]string{"--secret-namespaces=" + bad}); err == nil {
			t.Errorf("--secret-namespaces=%q accepted", bad)
		}
	}
}
