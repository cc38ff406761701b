// Package apiserver tests the API types against a real kube-apiserver: the
// generated CRDs, clientset and informers, and the samples.
package apiserver

import (
	"fmt"
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
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if env, err = envtest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	if client, err = versioned.NewForConfig(env.Config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if dynamicClient, err = dynamic.NewForConfig(env.Config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
