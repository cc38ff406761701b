package registry

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// staticKeychain answers every registry with one username and password.
type staticKeychain struct{ user, password string }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return &authn.Basic{Username: k.user, Password: k.password}, nil
}

// requireBasicAuth makes the registry demand user:password on every request.
func requireBasicAuth(f *registrytest.Registry, user, password string) {
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	f.Inject("", "/v2/", -1, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == want {
			f.Handler.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="buildsmith-test"`)
		registrytest.Answer(http.StatusUnauthorized, nil, registrytest.OCIError("UNAUTHORIZED", "authentication required"))(w, r)
	})
}

func listers(t *testing.T, objs ...runtime.Object) Keychains {
	t.Helper()
	sas := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	secrets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		var err error
		switch o.(type) {
		case *corev1.ServiceAccount:
			err = sas.Add(o)
		case *corev1.Secret:
			err = secrets.Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return Keychains{ServiceAccounts: corev1listers.NewServiceAccountLister(sas), Secrets: listedSecrets{corev1listers.NewSecretLister(secrets)}}
}

// listedSecrets reads Secrets from a lister.
type listedSecrets struct{ corev1listers.SecretLister }

func (l listedSecrets) Get(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	return l.Secrets(namespace).Get(name)
}

func serviceAccount(name string, pullSecrets []string, secrets []string) *corev1.ServiceAccount {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name}}
	for _, s := range pullSecrets {
		sa.ImagePullSecrets = append(sa.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	for _, s := range secrets {
		sa.Secrets = append(sa.Secrets, corev1.ObjectReference{Name: s})
	}
	return sa
}

func dockerConfigSecret(name, registry, user, password string) *corev1.Secret {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(
			`{"auths":{"` + registry + `":{"auth":"` + auth + `"}}}`)},
	}
}

func TestKeychainFromServiceAccount(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/app:1")
	requireBasicAuth(f, "robot", "s3cr3t")
	ctx := context.Background()

	tests := []struct {
		name       string
		objects    []runtime.Object
		account    string
		keychainOK bool   // ForServiceAccount succeeds
		reason     string // of ForServiceAccount's error, or of Resolve's
	}{
		{
			name: "image pull secret with the right credentials",
			objects: []runtime.Object{serviceAccount("builder", []string{"pull"}, nil),
				dockerConfigSecret("pull", f.Addr, "robot", "s3cr3t")},
			account: "builder", keychainOK: true,
		},
		{
			name: "mountable secret of type dockercfg",
			objects: []runtime.Object{serviceAccount("builder", nil, []string{"legacy", "token"}),
				&corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "legacy"},
					Type:       corev1.SecretTypeDockercfg,
					Data: map[string][]byte{corev1.DockerConfigKey: []byte(`{"` + f.Addr + `":{"auth":"` +
						base64.StdEncoding.EncodeToString([]byte("robot:s3cr3t")) + `"}}`)},
				},
				// Other types are skipped.
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "token"},
					Type: corev1.SecretTypeServiceAccountToken, Data: map[string][]byte{"token": []byte("xyz")}},
			},
			account: "builder", keychainOK: true,
		},
		{
			name: "wrong password",
			objects: []runtime.Object{serviceAccount("builder", []string{"pull"}, nil),
				dockerConfigSecret("pull", f.Addr, "robot", "wrong")},
			account: "builder", keychainOK: true, reason: ReasonUnauthorized,
		},
		{
			name:    "no secrets at all is anonymous",
			objects: []runtime.Object{serviceAccount("builder", nil, nil)},
			account: "builder", keychainOK: true, reason: ReasonUnauthorized,
		},
		{
			name:    "missing service account",
			account: "builder", reason: ReasonServiceAccountNotFound,
		},
		{
			name:    "missing secret",
			objects: []runtime.Object{serviceAccount("builder", []string{"pull"}, nil)},
			account: "builder", reason: ReasonSecretNotFound,
		},
		{
			name: "malformed docker config",
			objects: []runtime.Object{serviceAccount("builder", []string{"pull"}, nil),
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "pull"},
					Type: corev1.SecretTypeDockerConfigJson,
					Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths": s3cr3t`)}}},
			account: "builder", reason: ReasonInvalidSecret,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kc, err := listers(t, tc.objects...).ForServiceAccount(ctx, "apps", tc.account, nil)
			if !tc.keychainOK {
				if err == nil {
					t.Fatalf("ForServiceAccount: no error, want reason %q", tc.reason)
				}
				if reason := Classify(err).Reason; reason != tc.reason {
					t.Fatalf("ForServiceAccount: %v (reason %q), want reason %q", err, reason, tc.reason)
				}
				if strings.Contains(err.Error(), "s3cr3t") {
					t.Errorf("error leaks secret data: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ForServiceAccount: %v", err)
			}
			c := newTestClient(t, Options{})
			_, err = c.As(kc).Resolve(ctx, f.Ref("team/app:1"))
			var reason string // "" for no error
			if err != nil {
				reason = Classify(err).Reason
			}
			if reason != tc.reason {
				t.Fatalf("Resolve: %v (reason %q), want reason %q", err, reason, tc.reason)
			}
			if err != nil && strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error leaks the password: %v", err)
			}
		})
	}
}

func TestKeychainCacheKeyFollowsSecrets(t *testing.T) {
	ctx := context.Background()
	sa := serviceAccount("builder", []string{"pull"}, nil)
	secret := dockerConfigSecret("pull", "r.example", "robot", "one")
	kc1, err := listers(t, sa, secret).ForServiceAccount(ctx, "apps", "builder", nil)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := listers(t, sa, secret).ForServiceAccount(ctx, "apps", "builder", nil)
	changed := secret.DeepCopy()
	changed.ResourceVersion = "2"
	kc2, _ := listers(t, sa, changed).ForServiceAccount(ctx, "apps", "builder", nil)
	key := func(kc authn.Keychain) string { return kc.(cacheKeyer).CacheKey() }
	if key(kc1) != key(again) {
		t.Errorf("same secrets, different keys: %q, %q", key(kc1), key(again))
	}
	if key(kc1) == key(kc2) {
		t.Errorf("a changed secret kept the cache key %q", key(kc1))
	}
	if strings.Contains(key(kc1), "one") {
		t.Errorf("cache key holds secret data: %q", key(kc1))
	}
}

// countedSecrets counts the reads of a SecretReader.
type countedSecrets struct {
	SecretReader
	reads int
}

func (c *countedSecrets) Get(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	c.reads++
	return c.SecretReader.Get(ctx, namespace, name)
}

// TestServiceAccountNamingTooManySecrets: a ServiceAccount naming more
// Secrets than MaxSecrets is refused, permanently and naming the flag,
// before a single Secret is read (each read is a watch); one at the bound,
// counting a name listed twice once, is read as ever.
func TestServiceAccountNamingTooManySecrets(t *testing.T) {
	names := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("made-up-%d", i))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		sa      *corev1.ServiceAccount
		refused bool
	}{
		{"2,000 made-up names", serviceAccount("hostile", nil, names(2000)), true},
		{"one over, split between both lists", serviceAccount("split", names(2), names(5)[2:]), true},
		{"at the bound, a name listed in both lists", serviceAccount("at", names(3), names(4)), false},
		{"over the bound, names listed in both lists", serviceAccount("over", names(3), names(5)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := listers(t, tc.sa)
			counted := &countedSecrets{SecretReader: k.Secrets}
			k.Secrets, k.MaxSecrets = counted, 4
			_, err := k.ForServiceAccount(context.Background(), tc.sa.Namespace, tc.sa.Name, nil)
			f := Classify(err)
			if !tc.refused {
				if f.Reason == ReasonTooManySecrets {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if f.Reason != ReasonTooManySecrets || f.Class != failure.Permanent || !strings.Contains(err.Error(), "--max-service-account-secrets") {
				t.Errorf("ForServiceAccount = %v, want a permanent %s naming the flag", err, ReasonTooManySecrets)
			}
			if counted.reads != 0 {
				t.Errorf("%d Secrets read before refusing", counted.reads)
			}
		})
	}
}

// TestCheckSecretCountOfATrimmedAccount: a ServiceAccount the cache kept
// only some Secret names of is refused, saying how many it names.
func TestCheckSecretCountOfATrimmedAccount(t *testing.T) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "many",
		Annotations: map[string]string{AnnotationSecretReferences: "100000"}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}}}
	err := Keychains{MaxSecrets: 32}.CheckSecretCount(sa)
	if f, ok := failure.As(err); !ok || f.Reason != ReasonTooManySecrets || f.Class != failure.Permanent || !strings.Contains(err.Error(), "names 100000 Secrets") {
		t.Errorf("a trimmed account: %v, want a permanent %s saying how many it names", err, ReasonTooManySecrets)
	}
}
