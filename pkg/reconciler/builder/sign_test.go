package builder

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/failure"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestBuilderSigned: with a cosign key among its ServiceAccount's secrets a
// builder's image is signed as cosign does; the signature is recorded and
// not pushed again at resyncs, nor added twice when the status was lost; a
// second key adds its own; a key that does not decrypt stalls the builder
// before anything is pushed.
func TestBuilderSigned(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	first, _ := cosigntest.KeyPair(t, "pass")
	second, _ := cosigntest.KeyPair(t, "")
	firstKey, err := cosign.ParseKey(context.Background(), "first", first, []byte("pass"), cosign.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	secondKey, _ := cosign.ParseKey(context.Background(), "second", second, nil, cosign.Limits{})
	account := func(secrets ...string) *corev1.ServiceAccount {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"}}
		for _, s := range secrets {
			sa.Secrets = append(sa.Secrets, corev1.ObjectReference{Name: s})
		}
		return sa
	}
	objects := func(sa *corev1.ServiceAccount) []runtime.Object {
		return []runtime.Object{sa, cosigntest.Secret("apps", "first", first, "pass"), cosigntest.Secret("apps", "second", second, ""),
			cosigntest.Secret("apps", "wrong", first, "guess"),
			// A docker config among them: not a signing Secret.
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "other"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"x": nil}}}
	}
	b := x.builder(func(b *v1alpha1.Builder) { b.Spec.ServiceAccountName = "signer" })

	got, events, err, _ := x.run(t, b, lifecycle, objects(account("other", "first", "gone"))...)
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionTrue, Requeue: rt.Resync,
		MinDelay: 8 * time.Minute, MaxDelay: 12 * time.Minute, EventReasons: []string{"Ready"}})
	image, err := name.NewDigest(got.Status.LatestImage)
	if err != nil {
		t.Fatal(err)
	}
	sigTag := cosign.SignatureTag(image.Context(), image)
	signatures := func() []string { // the signature image's layers, as which key signed them
		t.Helper()
		img, err := remote.Image(sigTag)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := img.Manifest()
		var out []string
		for _, l := range m.Layers {
			who := "?"
			for n, k := range map[string]*cosign.Key{"first": firstKey, "second": secondKey} {
				if k.Verifies(cosign.Payload(image), l.Annotations[cosign.SignatureAnnotation]) {
					who = n
				}
			}
			out = append(out, who)
		}
		return out
	}
	if diff := cmp.Diff([]string{"first"}, signatures()); diff != "" {
		t.Errorf("signatures (-want +got):\n%s", diff)
	}
	sigDigest, _ := x.f.Resolve(sigTag.String())
	wantStatus := []v1alpha1.ImageSignature{{Image: got.Status.LatestImage, SigningSecret: "apps/first", KeyID: firstKey.ID,
		Signature: sigTag.String() + "@" + strings.TrimPrefix(sigDigest, sigTag.Context().String()+"@")}}
	if diff := cmp.Diff(wantStatus, got.Status.Signatures); diff != "" {
		t.Errorf("status.signatures (-want +got):\n%s", diff)
	}

	// A resync: the recorded signature is trusted, one HEAD in all.
	x.f.ForgetRequests()
	again, _, err, _ := x.run(t, got, lifecycle, objects(account("other", "first", "gone"))...)
	if !again.Status.IsReady() || !cmp.Equal(again.Status.Signatures, got.Status.Signatures) ||
		!cmp.Equal(x.f.Requests(), []string{"HEAD /v2/builders/go/manifests/latest"}) {
		t.Errorf("resync: ready %v (%v), signatures %+v, requests %v", again.Status.IsReady(), err, again.Status.Signatures, x.f.Requests())
	}

	// The status lost its signatures (its write failed, say): the
	// signature image is read, found signed, and nothing is pushed.
	lost := got.DeepCopy()
	lost.Status.Signatures = nil
	x.f.ForgetRequests()
	found, _, err, _ := x.run(t, lost, lifecycle, objects(account("other", "first", "gone"))...)
	if !found.Status.IsReady() || !cmp.Equal(found.Status.Signatures, got.Status.Signatures) || x.f.Count("PUT", "") != 0 {
		t.Errorf("status lost: ready %v (%v), signatures %+v, requests %v", found.Status.IsReady(), err, found.Status.Signatures, x.f.Requests())
	}
	if diff := cmp.Diff([]string{"first"}, signatures()); diff != "" {
		t.Errorf("signatures after the status was lost (-want +got):\n%s", diff)
	}

	// A second key: its signature is added beside the first.
	both, _, err, _ := x.run(t, got, lifecycle, objects(account("first", "second"))...)
	if !both.Status.IsReady() || len(both.Status.Signatures) != 2 || both.Status.Signatures[1].SigningSecret != "apps/second" {
		t.Errorf("second key: ready %v (%v), signatures %+v", both.Status.IsReady(), err, both.Status.Signatures)
	}
	if diff := cmp.Diff([]string{"first", "second"}, signatures()); diff != "" {
		t.Errorf("signatures after the second key (-want +got):\n%s", diff)
	}

	// A Secret that does not decrypt: a permanent error naming it, before
	// any push (a changed env would otherwise push a new builder).
	changed := both.DeepCopy()
	changed.Spec.Env = []v1alpha1.BuildEnv{{Name: "GOFLAGS", Value: "-trimpath"}}
	x.f.ForgetRequests()
	failed, events, err, _ := x.run(t, changed, lifecycle, objects(account("first", "wrong"))...)
	rt.Check(t, failed, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: cosign.ReasonInvalidSigningKey, Stalled: true,
		Requeue: rt.NoRequeue, EventReasons: []string{cosign.ReasonInvalidSigningKey},
		MessageContains: "secret apps/wrong: cosign.key does not decrypt with cosign.password"})
	if failed.Status.LatestImage != got.Status.LatestImage || len(x.f.Requests()) != 0 {
		t.Errorf("bad key: latestImage %s (want %s kept), requests %v", failed.Status.LatestImage, got.Status.LatestImage, x.f.Requests())
	}
}

// TestBuilderSignedWhere: the kpack.io/cosign.* annotations send
// signatures to another repository and make Docker manifests; moving the
// repository signs again there; two keys bound for one tag cost one write;
// a new image gets new signatures and the old ones leave status; a write
// another writer undid is done again; a bad annotation stalls the builder.
func TestBuilderSignedWhere(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	first, _ := cosigntest.KeyPair(t, "")
	second, _ := cosigntest.KeyPair(t, "")
	secret := func(name string, key []byte, annotations map[string]string) *corev1.Secret {
		s := cosigntest.Secret("apps", name, key, "")
		s.Annotations = annotations
		return s
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"},
		Secrets: []corev1.ObjectReference{{Name: "first"}, {Name: "second"}, {Name: "first"}}} // listed twice: one signature
	elsewhere := x.f.Addr + "/signatures"
	b := x.builder(func(b *v1alpha1.Builder) { b.Spec.ServiceAccountName = "signer" })
	manifestOf := func(t *testing.T, ref string) *v1.Manifest {
		t.Helper()
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(r)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := img.Manifest()
		return m
	}

	// Both keys to the other repository, Docker manifests: one write.
	docker := map[string]string{AnnotationSignatureRepository: elsewhere, AnnotationDockerMediaTypes: "true"}
	x.f.ForgetRequests()
	got, _, err, _ := x.run(t, b, lifecycle, sa, secret("first", first, docker), secret("second", second, docker))
	if !got.Status.IsReady() || len(got.Status.Signatures) != 2 {
		t.Fatalf("ready %v (%v), signatures %+v", got.Status.IsReady(), err, got.Status.Signatures)
	}
	sig := got.Status.Signatures[0].Signature
	if !strings.HasPrefix(sig, elsewhere+":sha256-") || got.Status.Signatures[1].Signature != sig {
		t.Errorf("signatures not both at %s: %+v", elsewhere, got.Status.Signatures)
	}
	if m := manifestOf(t, sig); m.MediaType != types.DockerManifestSchema2 || len(m.Layers) != 2 {
		t.Errorf("signature manifest %s with %d layers, want a Docker manifest with both", m.MediaType, len(m.Layers))
	}
	if n := x.f.Count("PUT", "/signatures/manifests/sha256-"); n != 1 {
		t.Errorf("%d manifest PUTs to the signature repository, want 1", n)
	}

	// The annotation moves: the signatures follow, into an OCI manifest.
	moved, _, err, _ := x.run(t, got, lifecycle, sa, secret("first", first, nil), secret("second", second, nil))
	image, _ := name.NewDigest(got.Status.LatestImage)
	own := cosign.SignatureTag(image.Context(), image).String()
	if !moved.Status.IsReady() || len(moved.Status.Signatures) != 2 || !strings.HasPrefix(moved.Status.Signatures[0].Signature, own+"@") {
		t.Fatalf("after the annotation went: ready %v (%v), signatures %+v", moved.Status.IsReady(), err, moved.Status.Signatures)
	}
	if m := manifestOf(t, own); m.MediaType != types.OCIManifestSchema1 || len(m.Layers) != 2 {
		t.Errorf("signature manifest %s with %d layers, want an OCI manifest with both", m.MediaType, len(m.Layers))
	}

	// A new image (another env): signed anew, the old signatures gone from
	// status; the first write of its signature tag is lost (another writer
	// replaced the tag), so it is read and written again.
	changed := moved.DeepCopy()
	changed.Spec.Env = []v1alpha1.BuildEnv{{Name: "GOFLAGS", Value: "-trimpath"}}
	x.f.Inject("PUT", ".sig", 1, registrytest.Answer(201, nil, ""))
	x.f.ForgetRequests()
	rebuilt, _, err, _ := x.run(t, changed, lifecycle, sa, secret("first", first, nil), secret("second", second, nil))
	if !rebuilt.Status.IsReady() || rebuilt.Status.LatestImage == moved.Status.LatestImage || len(rebuilt.Status.Signatures) != 2 {
		t.Fatalf("rebuilt: ready %v (%v), latestImage %s, signatures %+v", rebuilt.Status.IsReady(), err, rebuilt.Status.LatestImage, rebuilt.Status.Signatures)
	}
	for _, s := range rebuilt.Status.Signatures {
		if s.Image != rebuilt.Status.LatestImage {
			t.Errorf("a signature of another image kept: %+v", s)
		}
	}
	if n := x.f.Count("PUT", ".sig"); n != 2 {
		t.Errorf("%d PUTs of the signature manifest, want 2 (the lost one, then again)", n)
	}
	if m := manifestOf(t, strings.Split(rebuilt.Status.Signatures[0].Signature, "@")[0]); len(m.Layers) != 2 {
		t.Errorf("the new image's signature manifest has %d layers, want 2", len(m.Layers))
	}

	// Bad annotations: a permanent error naming the Secret and the annotation.
	x.checkStalledWith(t, rebuilt.Status, map[string]stalledWith{
		"repository": {secret("first", first, map[string]string{AnnotationSignatureRepository: "Not A Repo"}),
			"secret apps/first: annotation kpack.io/cosign.repository"},
		"media types": {secret("first", first, map[string]string{AnnotationDockerMediaTypes: "maybe"}),
			`secret apps/first: annotation kpack.io/cosign.docker-media-types: "maybe" is not a boolean`},
	}, func(bad *corev1.Secret) []runtime.Object {
		return []runtime.Object{sa, bad, secret("second", second, nil)}
	}, b, lifecycle)
}

// stalledWith is a signing Secret that must stall the builder with
// InvalidSigningKey and a message containing message.
type stalledWith struct {
	secret  *corev1.Secret
	message string
}

func (x *fixture) checkStalledWith(t *testing.T, before v1alpha1.BuilderStatus, cases map[string]stalledWith,
	objects func(*corev1.Secret) []runtime.Object, b *v1alpha1.Builder, lifecycle string) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := b.DeepCopy()
			b.Status = before
			failed, events, err, _ := x.run(t, b, lifecycle, objects(tc.secret)...)
			rt.Check(t, failed, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: cosign.ReasonInvalidSigningKey, Stalled: true,
				Requeue: rt.NoRequeue, EventReasons: []string{cosign.ReasonInvalidSigningKey}, MessageContains: tc.message})
		})
	}
}

// runWith is run with the controller made of cfg; it also returns the
// controller's reconciler and the fake context, for a look inside and for
// changing the Secrets afterwards.
func (x *fixture) runWith(t *testing.T, cfg Config, b *v1alpha1.Builder, lifecycle string, extra ...runtime.Object) (
	*v1alpha1.Builder, []string, error, *BuilderReconciler, context.Context) {
	t.Helper()
	objects := append([]runtime.Object{b, x.stack, x.store,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "apps"}}}, extra...)
	ctx, clients := rt.Setup(t, objects...)
	var r *BuilderReconciler
	impl := rt.Controller(ctx, func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		impl, rec := newBuilderController(ctx, cmw, cfg)
		r = rec
		return impl
	}, lifecycleConfigMap(lifecycle))
	err := rt.Sync(impl).Reconcile(ctx, b.Namespace+"/"+b.Name)
	got, getErr := clients.Buildsmith.BuildsmithV1alpha1().Builders(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	if getErr != nil {
		t.Fatal(getErr)
	}
	return got, clients.Events(), err, r, ctx
}

// withScrypt returns the encrypted cosign key with other scrypt
// parameters in its envelope: what a tenant writes into a Secret without
// paying scrypt's cost (the key no longer decrypts, but is refused first).
func withScrypt(t *testing.T, key []byte, n, r, p int) []byte {
	t.Helper()
	block, _ := pem.Decode(key)
	var envelope map[string]any
	if err := json.Unmarshal(block.Bytes, &envelope); err != nil {
		t.Fatal(err)
	}
	envelope["kdf"].(map[string]any)["params"] = map[string]int{"N": n, "r": r, "p": p}
	block.Bytes, _ = json.Marshal(envelope)
	return pem.EncodeToMemory(block)
}

// TestBuilderSigningKeyTooCostly: a key whose scrypt parameters cost more
// than Config.Signing allows stalls the builder before anything is read
// or pushed, with a message naming the parameters and the limit; the
// default limit takes the keys cosign generate-key-pair writes.
func TestBuilderSigningKeyTooCostly(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	own, _ := cosigntest.KeyPair(t, "") // cosign's parameters: N=65536, r=8, p=1
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"},
		Secrets: []corev1.ObjectReference{{Name: "signing"}}}
	b := x.builder(func(b *v1alpha1.Builder) { b.Spec.ServiceAccountName = "signer" })
	for _, tc := range []struct {
		name    string
		key     []byte
		signing SigningLimits
		message string // "": signed
	}{
		{name: "cosign's key, the default limit", key: own},
		{name: "the OWASP preset", key: withScrypt(t, own, 1<<17, 8, 1),
			message: "secret apps/signing: cosign.key's scrypt parameters (N=131072, r=8, p=1) need 128 MiB to decrypt, more than the limit of 64 MiB"},
		{name: "p=2", key: withScrypt(t, own, 1<<15, 8, 2),
			message: "secret apps/signing: cosign.key's scrypt parameters (N=32768, r=8, p=2) ask for 2 scrypt rounds; the limit is p=1"},
		{name: "cosign's key, a lower limit", key: own, signing: SigningLimits{Limits: cosign.Limits{MaxScryptMemory: 32 << 20}},
			message: "(N=65536, r=8, p=1) need 64 MiB to decrypt, more than the limit of 32 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := x.config()
			cfg.Signing = tc.signing
			before := cosign.Decryptions()
			x.f.ForgetRequests()
			got, events, err, _, _ := x.runWith(t, cfg, b.DeepCopy(), lifecycle, sa, cosigntest.Secret("apps", "signing", tc.key, ""))
			if tc.message == "" {
				if !got.Status.IsReady() || len(got.Status.Signatures) != 1 || cosign.Decryptions()-before != 1 {
					t.Errorf("ready %v (%v), signatures %+v, %d decryptions", got.Status.IsReady(), err, got.Status.Signatures, cosign.Decryptions()-before)
				}
				return
			}
			rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: cosign.ReasonSigningKeyTooCostly, Stalled: true,
				Requeue: rt.NoRequeue, EventReasons: []string{cosign.ReasonSigningKeyTooCostly}, MessageContains: tc.message})
			if n := cosign.Decryptions() - before; n != 0 || len(x.f.Requests()) != 0 {
				t.Errorf("refused after %d decryptions and requests %v, want none", n, x.f.Requests())
			}
		})
	}
}

// TestSigningKeysDroppedWithTheirSecret: a key whose Secret is changed
// (the key taken out) or deleted leaves the cache when its watch says so,
// without waiting for a reconcile.
func TestSigningKeysDroppedWithTheirSecret(t *testing.T) {
	x := newFixture(t)
	lifecycle := x.f.Addr + "/lifecycle:0.21.0"
	key, _ := cosigntest.KeyPair(t, "")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "signer"},
		Secrets: []corev1.ObjectReference{{Name: "changed"}, {Name: "deleted"}}}
	b := x.builder(func(b *v1alpha1.Builder) { b.Spec.ServiceAccountName = "signer" })
	got, _, err, r, ctx := x.runWith(t, x.config(), b, lifecycle, sa,
		cosigntest.Secret("apps", "changed", key, ""), cosigntest.Secret("apps", "deleted", key, ""))
	if !got.Status.IsReady() || len(got.Status.Signatures) != 2 || r.keys.cached() != 2 {
		t.Fatalf("ready %v (%v), signatures %+v, %d keys cached", got.Status.IsReady(), err, got.Status.Signatures, r.keys.cached())
	}
	secrets := fakekubeclient.Get(ctx).CoreV1().Secrets("apps")
	changed := cosigntest.Secret("apps", "changed", nil, "")
	changed.ResourceVersion = "2"
	delete(changed.Data, cosign.SecretKey)
	if _, err := secrets.Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); r.keys.cached() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys still cached after their Secrets changed and went", r.keys.cached())
		}
	}
}

// fakeParses stands for parseSigningSecret: it counts the parses of each
// Secret version, holds them while hold is open (until their context
// ends), and fails those errs names.
type fakeParses struct {
	mu        sync.Mutex
	calls     map[string]int // by name@resourceVersion
	hold      chan struct{}
	errs      map[string]error // by name@resourceVersion
	cancelled atomic.Int64
}

func (p *fakeParses) parse(ctx context.Context, secret *corev1.Secret, _ cosign.Limits) (signingKey, error) {
	version := secret.Name + "@" + secret.ResourceVersion
	p.mu.Lock()
	if p.calls == nil {
		p.calls = map[string]int{}
	}
	p.calls[version]++
	hold, err := p.hold, p.errs[version]
	p.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			p.cancelled.Add(1)
			return signingKey{}, ctx.Err()
		}
	}
	if err != nil {
		return signingKey{}, err
	}
	return signingKey{secret: version}, nil
}

func (p *fakeParses) count(version string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[version]
}

func (p *fakeParses) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		n += c
	}
	return n
}

// signingSecret is a Secret at a version; the fake parse reads no data.
func signingSecret(name, resourceVersion string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, ResourceVersion: resourceVersion}}
}

// eventually waits for cond, failing after a while.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waiters is how many callers wait on the entry of the Secret name.
func (s *signingKeys) waiters(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[k8stypes.NamespacedName{Namespace: "apps", Name: name}]; e != nil {
		return e.waiting
	}
	return 0
}

// TestSigningKeysShareAParse: the builders that ask for a Secret version
// while it is parsed share the parse, and later ones get it from the
// cache; with cosign's parse, one decryption serves them all.
func TestSigningKeysShareAParse(t *testing.T) {
	p := &fakeParses{hold: make(chan struct{})}
	s := &signingKeys{parse: p.parse}
	secret := signingSecret("first", "1")
	const builders = 8
	type result struct {
		keys []signingKey
		err  error
	}
	results := make(chan result, builders)
	for range builders {
		go func() {
			keys, err := s.of(context.Background(), []*corev1.Secret{secret})
			results <- result{keys, err}
		}()
	}
	eventually(t, "every builder waiting on the parse", func() bool { return s.waiters("first") == builders })
	close(p.hold)
	for range builders {
		r := <-results
		if r.err != nil || len(r.keys) != 1 || r.keys[0].secret != "first@1" {
			t.Errorf("keys %+v, %v", r.keys, r.err)
		}
	}
	if _, err := s.of(context.Background(), []*corev1.Secret{secret}); err != nil || p.count("first@1") != 1 {
		t.Errorf("%d parses of one version for %d builders and one more (%v), want 1", p.count("first@1"), builders+1, err)
	}

	// The real thing: 4 builders sharing one key at once, one decryption.
	key, _ := cosigntest.KeyPair(t, "pw")
	real := &signingKeys{}
	before := cosign.Decryptions()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := real.of(context.Background(), []*corev1.Secret{cosigntest.Secret("apps", "shared", key, "pw")}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := cosign.Decryptions() - before; n != 1 {
		t.Errorf("%d decryptions for 4 builders sharing a key, want 1", n)
	}
}

// TestSigningKeysAbandonedParse: a parse goes on while someone waits for
// it; when the last waiter leaves (its context ended) it is cancelled and
// forgotten, and the next caller parses anew.
func TestSigningKeysAbandonedParse(t *testing.T) {
	p := &fakeParses{hold: make(chan struct{})}
	s := &signingKeys{parse: p.parse}
	secret := []*corev1.Secret{signingSecret("first", "1")}
	leaving, leave := context.WithCancel(context.Background())
	staying, stay := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	for _, ctx := range []context.Context{leaving, staying} {
		go func() {
			_, err := s.of(ctx, secret)
			errs <- err
		}()
	}
	eventually(t, "both waiting", func() bool { return s.waiters("first") == 2 })
	leave()
	if err := <-errs; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "secret apps/first: waiting for its cosign key") {
		t.Errorf("the caller that left: %v", err)
	}
	if s.waiters("first") != 1 || p.cancelled.Load() != 0 {
		t.Errorf("one caller left: %d waiting, %d parses cancelled; want the parse to go on for the other", s.waiters("first"), p.cancelled.Load())
	}
	stay()
	<-errs
	eventually(t, "the abandoned parse cancelled", func() bool { return p.cancelled.Load() == 1 })
	if s.cached() != 0 {
		t.Errorf("%d entries kept after the parse was abandoned", s.cached())
	}
	p.mu.Lock()
	p.hold = nil
	p.mu.Unlock()
	if keys, err := s.of(context.Background(), secret); err != nil || keys[0].secret != "first@1" || p.count("first@1") != 2 {
		t.Errorf("after an abandoned parse: %+v, %v, %d parses (want 2)", keys, err, p.count("first@1"))
	}
}

// TestSigningKeysBounded: the parsed keys kept stay within MaxKeys (the
// least recently used go first) and KeyIdle; a new version, or the watch
// telling of a change or a deletion, drops the old key at once; errors are
// kept for their version only (a fixed Secret is parsed again), and only
// the Permanent ones.
func TestSigningKeysBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := &fakeParses{errs: map[string]error{
		"bad@1":   failure.Permanentf(cosign.ReasonInvalidSigningKey, "secret apps/bad: cosign.key does not decrypt"),
		"flaky@1": errors.New("something passing"),
	}}
	s := &signingKeys{limits: SigningLimits{MaxKeys: 3, KeyIdle: time.Hour}, parse: p.parse, now: func() time.Time { return now }}
	t.Cleanup(func() {
		if s.sweep != nil {
			s.sweep.Stop()
		}
	})
	for i, step := range []struct {
		do     string   // use name@version, changed name, deleted name, wait duration, sweep
		err    string   // of use
		cached []string // most recently used first
		parses int      // in all
	}{
		{do: "use a@1", cached: []string{"a@1"}, parses: 1},
		{do: "use b@1", cached: []string{"b@1", "a@1"}, parses: 2},
		{do: "use c@1", cached: []string{"c@1", "b@1", "a@1"}, parses: 3},
		{do: "use a@1", cached: []string{"a@1", "c@1", "b@1"}, parses: 3},
		{do: "use d@1", cached: []string{"d@1", "a@1", "c@1"}, parses: 4}, // b: the least recently used
		{do: "use b@1", cached: []string{"b@1", "d@1", "a@1"}, parses: 5},
		{do: "use a@2", cached: []string{"a@2", "b@1", "d@1"}, parses: 6}, // a@1's key gone at once
		{do: "deleted a", cached: []string{"b@1", "d@1"}, parses: 6},
		{do: "changed d", cached: []string{"b@1"}, parses: 6},
		{do: "use d@2", cached: []string{"d@2", "b@1"}, parses: 7},
		{do: "use bad@1", err: "secret apps/bad: cosign.key does not decrypt", cached: []string{"bad@1", "d@2", "b@1"}, parses: 8},
		{do: "use bad@1", err: "secret apps/bad: cosign.key does not decrypt", cached: []string{"bad@1", "d@2", "b@1"}, parses: 8},
		{do: "use bad@2", cached: []string{"bad@2", "d@2", "b@1"}, parses: 9}, // fixed
		// Not kept (b@1 made room for it while it was parsed).
		{do: "use flaky@1", err: "something passing", cached: []string{"bad@2", "d@2"}, parses: 10},
		{do: "use flaky@1", err: "something passing", cached: []string{"bad@2", "d@2"}, parses: 11},
		{do: "wait 40m", cached: []string{"bad@2", "d@2"}, parses: 11},
		{do: "use d@2", cached: []string{"d@2", "bad@2"}, parses: 11},
		{do: "wait 30m", cached: []string{"d@2", "bad@2"}, parses: 11},
		{do: "use e@1", cached: []string{"e@1", "d@2"}, parses: 12}, // bad@2 unused for 70m
		{do: "wait 2h", cached: []string{"e@1", "d@2"}, parses: 12},
		{do: "sweep", cached: nil, parses: 12}, // nobody asks for keys any more
	} {
		verb, arg, _ := strings.Cut(step.do, " ")
		var err error
		switch verb {
		case "use":
			name, version, _ := strings.Cut(arg, "@")
			var keys []signingKey
			keys, err = s.of(context.Background(), []*corev1.Secret{signingSecret(name, version)})
			if err == nil && (len(keys) != 1 || keys[0].secret != arg) {
				t.Errorf("step %d (%s): keys %+v", i, step.do, keys)
			}
		case "changed":
			s.forget(signingSecret(arg, "changed"))
		case "deleted":
			s.forget(cache.DeletedFinalStateUnknown{Key: "apps/" + arg, Obj: signingSecret(arg, "last")})
		case "wait":
			d, _ := time.ParseDuration(arg)
			now = now.Add(d)
		case "sweep":
			s.sweepIdle()
		}
		if got := fmt.Sprint(err); (step.err == "" && err != nil) || (step.err != "" && got != step.err) {
			t.Errorf("step %d (%s): error %v, want %q", i, step.do, err, step.err)
		}
		var cached []string
		s.mu.Lock()
		for e := s.lru.Front(); e != nil; e = e.Next() {
			cached = append(cached, e.Value.(*keyEntry).id.Name+"@"+e.Value.(*keyEntry).resourceVersion)
		}
		entries := len(s.entries)
		s.mu.Unlock()
		if !slices.Equal(cached, step.cached) || entries != len(cached) || p.total() != step.parses {
			t.Errorf("step %d (%s): cached %v (%d entries), %d parses; want %v, %d", i, step.do, cached, entries, p.total(), step.cached, step.parses)
		}
	}
}
