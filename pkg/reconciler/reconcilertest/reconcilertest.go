// Package reconcilertest sets up reconciler tests: knative's fake clients and
// informers holding given objects, an event recorder to read, and real
// images in a real registry (test/registrytest).
package reconcilertest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	fakesecretinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/secret/fake"
	fakeserviceaccountinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/serviceaccount/fake"
	"knative.dev/pkg/controller"
	pkgtesting "knative.dev/pkg/reconciler/testing"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	fakeclient "github.com/buildsmith/buildsmith/pkg/client/clientset/versioned/fake"
	fakebuildsmithclient "github.com/buildsmith/buildsmith/pkg/client/injection/client/fake"
	fakeclusterstackinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstack/fake"
	fakeclusterstoreinformer "github.com/buildsmith/buildsmith/pkg/client/injection/informers/build/v1alpha1/clusterstore/fake"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// Clients are the fakes a reconciler under test talks to.
type Clients struct {
	Buildsmith *fakeclient.Clientset
	Recorder   *record.FakeRecorder
}

// Setup returns a context with fake clients and informers that hold objects.
func Setup(t *testing.T, objects ...runtime.Object) (context.Context, *Clients) {
	t.Helper()
	ctx, _ := pkgtesting.SetupFakeContext(t)
	var ours, kube []runtime.Object
	for _, o := range objects {
		var err error
		switch o := o.(type) {
		case *v1alpha1.ClusterStack:
			ours = append(ours, o)
			err = fakeclusterstackinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *v1alpha1.ClusterStore:
			ours = append(ours, o)
			err = fakeclusterstoreinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *corev1.ServiceAccount:
			kube = append(kube, o)
			err = fakeserviceaccountinformer.Get(ctx).Informer().GetIndexer().Add(o)
		case *corev1.Secret:
			kube = append(kube, o)
			err = fakesecretinformer.Get(ctx).Informer().GetIndexer().Add(o)
		default:
			t.Fatalf("reconcilertest: unsupported object %T", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, client := fakebuildsmithclient.With(ctx, ours...)
	ctx, _ = fakekubeclient.With(ctx, kube...)
	recorder := controller.GetEventRecorder(ctx).(*record.FakeRecorder)
	return ctx, &Clients{Buildsmith: client, Recorder: recorder}
}

// Events drains and returns the recorded events ("Type Reason message").
func (c *Clients) Events() []string {
	var out []string
	for {
		select {
		case e := <-c.Recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// PushStackImage pushes an image with the given labels and environment.
func PushStackImage(t *testing.T, f *registrytest.Registry, repo string, labels map[string]string, env ...string) v1.Image {
	t.Helper()
	layer, err := random.Layer(128, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Labels, cf.Config.Env = labels, env
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(f.Ref(repo), img); err != nil {
		t.Fatal(err)
	}
	return img
}

// Buildpack describes a buildpack in a test buildpackage.
type Buildpack struct {
	ID, Version, API string
}

// PushBuildpackage pushes an image with one (random) layer per buildpack
// and an io.buildpacks.buildpack.layers label listing them.
func PushBuildpackage(t *testing.T, f *registrytest.Registry, repo string, buildpacks ...Buildpack) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	label := map[string]map[string]map[string]string{}
	for _, bp := range buildpacks {
		layer, err := random.Layer(256, types.OCILayer)
		if err != nil {
			t.Fatal(err)
		}
		diffID, err := layer.DiffID()
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
		if label[bp.ID] == nil {
			label[bp.ID] = map[string]map[string]string{}
		}
		label[bp.ID][bp.Version] = map[string]string{"api": bp.API, "layerDiffID": diffID.String()}
	}
	raw, err := json.Marshal(label)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Labels = map[string]string{cnb.LabelBuildpackLayers: string(raw)}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(f.Ref(repo), img); err != nil {
		t.Fatal(err)
	}
	return img
}

// Requeue kinds of an Outcome.
const (
	Resync    = "resync"
	Retry     = "retry"
	Poll      = "poll"
	NoRequeue = "permanent"
)

// Outcome is what a reconcile must end in.
type Outcome struct {
	Ready       corev1.ConditionStatus
	Reason      string // of Ready
	Reconciling bool
	Stalled     bool
	// Requeue is Resync, Retry or Poll (a requeue after a delay within
	// [MinDelay, MaxDelay]) or NoRequeue (a permanent error).
	Requeue            string
	MinDelay, MaxDelay time.Duration
	EventReasons       []string
	MessageContains    string
}

// Check checks obj's conditions, the reconcile's returned error and the
// events against want.
func Check(t *testing.T, obj reconciler.Object, err error, events []string, want Outcome) {
	t.Helper()
	status := obj.Conditions()
	ready := status.GetCondition(v1alpha1.ConditionReady)
	if ready == nil || ready.Status != want.Ready || ready.Reason != want.Reason {
		t.Errorf("Ready = %+v, want %s %s", ready, want.Ready, want.Reason)
	}
	if ready != nil && want.MessageContains != "" && !strings.Contains(ready.Message, want.MessageContains) {
		t.Errorf("Ready message %q lacks %q", ready.Message, want.MessageContains)
	}
	if c := status.GetCondition(v1alpha1.ConditionReconciling); (c != nil && c.IsTrue()) != want.Reconciling {
		t.Errorf("Reconciling = %+v, want %v", c, want.Reconciling)
	}
	if c := status.GetCondition(v1alpha1.ConditionStalled); (c != nil && c.IsTrue()) != want.Stalled {
		t.Errorf("Stalled = %+v, want %v", c, want.Stalled)
	}
	if status.ObservedGeneration != obj.GetGeneration() {
		t.Errorf("observedGeneration %d, generation %d", status.ObservedGeneration, obj.GetGeneration())
	}
	if want.Requeue == NoRequeue {
		if !controller.IsPermanentError(err) {
			t.Errorf("Reconcile = %v, want a permanent error", err)
		}
	} else {
		ok, delay := controller.IsRequeueKey(err)
		if !ok || delay < want.MinDelay || delay > want.MaxDelay {
			t.Errorf("Reconcile = %v (requeue %v after %v), want a requeue in [%v, %v]", err, ok, delay, want.MinDelay, want.MaxDelay)
		}
		if c := status.GetCondition(v1alpha1.ConditionReconciling); want.Reconciling && (c == nil || !strings.HasPrefix(c.Message, "retrying in ")) {
			t.Errorf("Reconciling message = %+v, want \"retrying in …\"", c)
		}
	}
	if len(events) != len(want.EventReasons) {
		t.Errorf("events = %q, want reasons %q", events, want.EventReasons)
	}
	for i, reason := range want.EventReasons {
		if i < len(events) && !strings.Contains(events[i], " "+reason+" ") {
			t.Errorf("event %q, want reason %s", events[i], reason)
		}
	}
}
