package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/receiver"
	"github.com/buildsmith/buildsmith/test/controllertest"
	"github.com/buildsmith/buildsmith/test/distribution"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// TestReceiverWakesOnPush: the real distribution registry notifies a
// Receiver of the controller's namespace (an endpoint with an Authorization
// header, as its docs configure one); with resyncs 10 hours apart, a
// patched build image pushed under the stack's tag reaches the stack, and
// the builder on it is rebuilt, within seconds. A notification with another
// token is refused and wakes nothing.
func TestReceiverWakesOnPush(t *testing.T) {
	ctx := context.Background()
	const token, ns, name = "e2e-receiver-token", "receiver", "registry"
	receiverPort := controllertest.FreePort(t)
	path := receiver.WebhookPath([]byte(token), name, systemNamespace)
	hook := fmt.Sprintf("http://127.0.0.1:%d%s", receiverPort, path)
	d := distribution.New(t, filepath.Join(env.Root, "bin", "registry"), distribution.Options{Htpasswd: registryHtpasswd,
		Notify: []distribution.Endpoint{{Name: "buildsmith", URL: hook, Headers: map[string]string{"Authorization": "Bearer " + token}}}})
	objects := storeStack{Addr: d.Addr, Name: "receiver", Buildpackages: []string{"buildpacks/hello:1.0.0"},
		StackID: "io.buildpacks.stacks.receiver", Account: &v1alpha1.ServiceAccountRef{Namespace: ns, Name: "builder"}}
	push := func(repo string, img v1.Image, err error) { pushAuthenticated(t, d.Addr, repo, img, err) }
	objects.pushSamples(t, push)
	pullSecretNamespace(t, ns, dockerConfig(d.Addr, registryUser, registryPassword))
	useLifecycleImage(t, d.Addr+"/buildsmith/lifecycle:0.21.0")

	if _, err := kube.CoreV1().Secrets(systemNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "receiver-token"},
		Data: map[string][]byte{"token": []byte(token)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	receivers := client.BuildsmithV1alpha1().Receivers(systemNamespace)
	if _, err := receivers.Create(ctx, &v1alpha1.Receiver{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ReceiverSpec{Type: v1alpha1.ReceiverDistribution, SecretRef: v1alpha1.LocalSecretReference{Name: "receiver-token"}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = receivers.Delete(ctx, name, metav1.DeleteOptions{})
		_ = kube.CoreV1().Secrets(systemNamespace).Delete(ctx, "receiver-token", metav1.DeleteOptions{})
	})
	metricsPort := servePrometheus(t)
	p := controllertest.Start(t, controller, controllertest.Options{Kubeconfig: env.Kubeconfig, Namespace: systemNamespace,
		DisableHA: true, MetricsPort: metricsPort, ReceiverPort: receiverPort, Args: []string{"--resync-interval=10h"}})

	objects.create(t)
	objects.createBuilder(t, ns, "app", v1alpha1.NamespacedBuilderSpec{ServiceAccountName: "builder",
		BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder()}})
	wait := env.Kubectl("wait", "--for=condition=Ready", "--timeout=60s", "clusterstore/receiver", "clusterstack/receiver",
		"-n", ns, "builder/app")
	if out, err := wait.CombinedOutput(); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	eventually(t, 10*time.Second, "the Receiver Ready at its path", func() (bool, string) {
		rc, err := receivers.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return rc.Status.IsReady() && rc.Status.WebhookPath == path, fmt.Sprintf("%+v", rc.Status)
	})
	before, err := client.BuildsmithV1alpha1().Builders(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Another token: refused, nothing recorded. (The pushes of the
	// samples, notified when the controller started, recorded some.)
	lastNotification := func() string {
		rc, err := receivers.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%+v", rc.Status.LastNotification)
	}
	time.Sleep(2 * time.Second) // the samples' notifications delivered
	last := lastNotification()
	forged := fmt.Appendf(nil, `{"events": [{"action": "push", "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
 "repository": "stack/build", "tag": "1"}, "request": {"host": %q}}]}`, d.Addr)
	if status := postNotification(t, hook, forged, "Bearer forged"); status != http.StatusUnauthorized {
		t.Errorf("a notification with another token: %d, want 401", status)
	}
	if now := lastNotification(); now != last {
		t.Errorf("the forged notification was recorded: %s, then %s", last, now)
	}

	// A patched build image under the stack's tag: the registry notifies.
	layer, err := random.Layer(512, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	build, err := sampleimages.StackImage(objects.StackID, cnbUID)
	if err == nil {
		build, err = mutate.AppendLayers(build, layer)
	}
	push("stack/build:1", build, err)
	took := eventually(t, 60*time.Second, "the builder rebuilt on the patched build image", func() (bool, string) {
		b, err := client.BuildsmithV1alpha1().Builders(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return b.Status.LatestImage != before.Status.LatestImage && b.Status.IsReady(), b.Status.LatestImage
	})
	t.Logf("the build image pushed, the builder rebuilt on it %v later (resyncs 10h apart)", took.Round(100*time.Millisecond))
	rc, err := receivers.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := rc.Status.LastNotification; n == nil || !slices.Contains(n.Repositories, d.Addr+"/stack/build") {
		t.Errorf("the Receiver's last notification: %+v, want %s/stack/build", n, d.Addr)
	}

	followVersions(t, d.Addr, push)

	body := scrape(p)
	for _, want := range [][]string{
		{"buildsmith_receiver_events_total", `type="distribution"`, `result="woken"`},
		{"buildsmith_receiver_events_total", `type="distribution"`, `result="unauthorized"`},
	} {
		if !hasSample(body, want[0], want[1:]...) {
			t.Errorf("metrics lack %s with %v", want[0], want[1:])
		}
	}
}

// postNotification posts body to url with an Authorization header and
// returns the status.
func postNotification(t *testing.T, url string, body []byte, authorization string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", authorization)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// followVersions: the store of TestReceiverWakesOnPush follows the hello
// buildpackage's versions (^1); a new version pushed reaches the store's
// status through the registry's notification (resyncs are 10 h apart), and
// the builder over it is rebuilt with it.
func followVersions(t *testing.T, addr string, push func(repo string, img v1.Image, err error)) {
	ctx := context.Background()
	stores := client.BuildsmithV1alpha1().ClusterStores()
	store, err := stores.Get(ctx, "receiver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store.Spec.Sources = []v1alpha1.ImageSource{{Image: addr + "/buildpacks/hello",
		Policy: &v1alpha1.TagPolicy{Semver: v1alpha1.SemverPolicy{Range: "^1"}}}}
	if _, err := stores.Update(ctx, store, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	chosen := func(tag string) func() (bool, string) {
		return func() (bool, string) {
			s, err := stores.Get(ctx, "receiver", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ok := s.Status.IsReady() && s.Status.ObservedGeneration == s.Generation &&
				len(s.Status.ChosenTags) == 1 && s.Status.ChosenTags[0].Tag == tag
			return ok, fmt.Sprintf("%+v", s.Status.ChosenTags)
		}
	}
	eventually(t, 30*time.Second, "the store following buildpacks/hello at 1.0.0", chosen("1.0.0"))
	before, err := client.BuildsmithV1alpha1().Builders("receiver").Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	newer := helloBuildpack
	newer.Version = "1.1.0"
	hello, err := sampleimages.Buildpackage(newer)
	push("buildpacks/hello:1.1.0", hello, err)
	took := eventually(t, 30*time.Second, "the store at buildpacks/hello:1.1.0", chosen("1.1.0"))
	t.Logf("buildpacks/hello:1.1.0 pushed, the store chose it %v later", took.Round(100*time.Millisecond))

	eventually(t, 60*time.Second, "the builder rebuilt with example/hello@1.1.0", func() (bool, string) {
		b, err := client.BuildsmithV1alpha1().Builders("receiver").Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return b.Status.IsReady() && b.Status.LatestImage != before.Status.LatestImage &&
				slices.ContainsFunc(b.Status.BuilderMetadata, func(bp v1alpha1.BuildpackMetadata) bool { return bp.ID == "example/hello" && bp.Version == "1.1.0" }),
			fmt.Sprintf("%s %+v", b.Status.LatestImage, b.Status.BuilderMetadata)
	})
}
