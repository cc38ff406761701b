// Package apiserver tests the API types against a real kube-apiserver: the
// generated CRDs, clientset and informers, and the samples.
package apiserver

import (
	"os"
	"testing"

	"k8s.io/client-go/dynamic"

	"github.com/buildsmith/buildsmith/pkg/client/clientset/versioned"
	"github.com/buildsmith/buildsmith/test/envtest"
)

var (
	env           *envtest.Env
	client        versioned.Interface
	dynamicClient dynamic.Interface
)

func TestMain(m *testing.M) {
	os.Exit(envtest.Main(func(e *envtest.Env) (int, error) {
		env = e
		var err error
		if client, err = versioned.NewForConfig(env.Config); err != nil {
			return 0, err
		}
		if dynamicClient, err = dynamic.NewForConfig(env.Config); err != nil {
			return 0, err
		}
		return m.Run(), nil
	}))
}
