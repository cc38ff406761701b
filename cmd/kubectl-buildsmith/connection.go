package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"
)

// defaultRequestTimeout is --request-timeout by default: it bounds one
// request, so that a hung API server does not hang the command.
const defaultRequestTimeout = 30 * time.Second

// connectionFlags are kubectl's connection flags, with kubectl's names and
// meanings: cli-runtime's ConfigFlags, which kubectl itself is made of
// (--kubeconfig, --context, --cluster, --user, -n/--namespace, -s/--server,
// --token, --as, --as-group, --as-uid, --as-user-extra, the TLS flags,
// --request-timeout, --disable-compression). Only --request-timeout has
// another default: 30s instead of none.
type connectionFlags struct {
	*genericclioptions.ConfigFlags
}

func newConnectionFlags() connectionFlags {
	f := genericclioptions.NewConfigFlags(true)
	f.Timeout = ptr.To(defaultRequestTimeout.String())
	return connectionFlags{f}
}

// client returns the client and the namespace to use.
func (f connectionFlags) client() (dynamic.Interface, string, error) {
	config, err := f.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	namespace, _, err := f.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, "", err
	}
	return c, namespace, nil
}

// completionTimeout bounds the requests of a completion: a shell waits on it.
const completionTimeout = 5 * time.Second

// completeObjects completes reconcile's KIND/NAME: a kind first, then the
// names of that kind's objects, read from the cluster the flags name.
func completeObjects(f connectionFlags) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		kindName, _, found := strings.Cut(toComplete, "/")
		k, known := kindOf(kindName)
		if !found || !known {
			var completions []cobra.Completion
			for _, k := range kinds {
				if strings.HasPrefix(k.name+"/", strings.ToLower(toComplete)) {
					completions = append(completions, k.name+"/")
				}
			}
			return completions, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		}
		c, namespace, err := f.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
		defer cancel()
		list, err := k.client(c, namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var completions []cobra.Completion
		for _, u := range list.Items {
			if ref := kindName + "/" + u.GetName(); strings.HasPrefix(ref, toComplete) {
				completions = append(completions, ref)
			}
		}
		return completions, cobra.ShellCompDirectiveNoFileComp
	}
}

// registerNamespaceCompletion completes -n with the cluster's namespaces.
func registerNamespaceCompletion(cmd *cobra.Command, f connectionFlags) {
	_ = cmd.RegisterFlagCompletionFunc("namespace", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		c, _, err := f.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
		defer cancel()
		list, err := c.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var names []cobra.Completion
		for _, u := range list.Items {
			names = append(names, u.GetName())
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
}
