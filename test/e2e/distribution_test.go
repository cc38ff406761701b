package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/distribution"
)

// The user of the authenticating registry, and the bcrypt hash of its
// password ("s3cr3t-pushes"), made once with golang.org/x/crypto/bcrypt.
const (
	registryUser     = "pusher"
	registryPassword = "s3cr3t-pushes"
	registryHtpasswd = "pusher:$2a$10$WacmzzjvXXpSgwiq8B9uxeP5pEK0IAaSiHg7H3H3/ggJ7kCldltWi\n"
)

// startDistribution runs the reference registry (bin/registry) with htpasswd
// auth, until the test ends. It logs every request: the tests read the
// mounts there.
func startDistribution(t *testing.T) *distribution.Registry {
	t.Helper()
	return distribution.New(t, filepath.Join(env.Root, "bin", "registry"),
		distribution.Options{Htpasswd: registryHtpasswd, LogLevel: "info", AccessLog: true})
}

// pushAuthenticated pushes img to the registry at addr as registryUser.
func pushAuthenticated(t *testing.T, addr, repo string, img v1.Image, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(addr + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: registryUser, Password: registryPassword})); err != nil {
		t.Fatal(err)
	}
}

// pullSecretNamespace creates namespace ns with the Secret "registry" of
// the Docker config given and the ServiceAccount "builder" pulling with it.
func pullSecretNamespace(t *testing.T, ns string, config []byte) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry"},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: config}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func dockerConfig(registry, user, password string) []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	return []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, registry, auth))
}

// TestAuthenticatingRegistry runs everything against the distribution
// registry with htpasswd auth: with a wrong password in the pull Secret,
// the objects say Unauthorized; fixing the Secret makes them Ready at once
// (the Secret is watched: no waiting for the poll); and the builder's push
// mounts the buildpack layers from the store's repository instead of
// uploading them.
func TestAuthenticatingRegistry(t *testing.T) {
	ctx := context.Background()
	d := startDistribution(t)
	const ns = "auth"
	objects := storeStack{Addr: d.Addr, Name: "auth", Buildpackages: []string{"buildpacks/hello:1.0.0"}, StackID: "io.buildpacks.stacks.auth",
		Account: &v1alpha1.ServiceAccountRef{Name: "builder", Namespace: ns}}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { pushAuthenticated(t, d.Addr, repo, img, err) })

	pullSecretNamespace(t, ns, dockerConfig(d.Addr, registryUser, "wrong"))
	secrets := kube.CoreV1().Secrets(ns)
	// The lifecycle-image ConfigMap of the controller's namespace, for
	// this test's registry.
	useLifecycleImage(t, d.Addr+"/buildsmith/lifecycle:0.21.0")
	startController(t)

	bs := client.BuildsmithV1alpha1()
	objects.create(t)
	objects.createBuilder(t, ns, "auth", v1alpha1.NamespacedBuilderSpec{ServiceAccountName: "builder",
		BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder()}})

	eventually(t, 30*time.Second, "the store to report the refused credentials", func() (bool, string) {
		s, err := bs.ClusterStores().Get(ctx, "auth", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := s.Status.GetCondition(v1alpha1.ConditionReady)
		return c != nil && c.Reason == "Unauthorized", fmt.Sprintf("%+v", s.Status.Conditions)
	})
	s, _ := bs.ClusterStores().Get(ctx, "auth", metav1.GetOptions{})
	if msg := s.Status.GetCondition(v1alpha1.ConditionReady).Message; strings.Contains(msg, "wrong") || strings.Contains(msg, registryPassword) {
		t.Errorf("the condition leaks a password: %s", msg)
	}

	secret, err := secrets.Get(ctx, "registry", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data[corev1.DockerConfigJsonKey] = dockerConfig(d.Addr, registryUser, registryPassword)
	if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixed := time.Now()
	wait := env.Kubectl("wait", "--for=condition=Ready", "--timeout=40s", "clusterstore/auth", "clusterstack/auth", "-n", ns, "builder/auth")
	if out, err := wait.CombinedOutput(); err != nil {
		b, _ := bs.Builders(ns).Get(ctx, "auth", metav1.GetOptions{})
		t.Fatalf("kubectl wait after fixing the Secret: %v\n%s\nbuilder: %+v", err, out, b.Status.Conditions)
	}
	t.Logf("all Ready %v after the Secret was fixed (poll interval: 1m)", time.Since(fixed).Round(10*time.Millisecond))

	// The builder's push mounted the buildpack layer from the store's
	// repository (distribution answers a mount with 201 Created).
	log, err := os.ReadFile(d.Log)
	if err != nil {
		t.Fatal(err)
	}
	mounts := 0
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "/v2/builders/auth/blobs/uploads/?") && strings.Contains(line, "mount=") &&
			strings.Contains(line, "from=buildpacks%2Fhello") && strings.Contains(line, " 201 ") {
			mounts++
		}
	}
	if mounts == 0 {
		t.Errorf("no cross-repository mount of the buildpack layer into builders/auth; registry log:\n%s", lastLines(string(log), 40))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
