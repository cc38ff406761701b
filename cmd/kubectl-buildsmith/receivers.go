package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

func newReceiversCommand(streams genericiooptions.IOStreams) *cobra.Command {
	connection := newConnectionFlags()
	all := false
	system := "buildsmith"
	cmd := &cobra.Command{
		Use:   "receivers [-A | -n NAMESPACE]",
		Short: "Each Receiver's webhook path, and what its notifications may wake",
		Long: `Prints each Receiver of the namespace (all namespaces with -A): its type,
whether it is Ready, the path its sender posts to (on the controller's
receiver Service), and what a push may wake: the Buildpacks of its
namespace reading the pushed repository and, for a Receiver in the
controller's namespace (--controller-namespace), the ClusterStores,
ClusterStacks and ClusterLifecycles reading it; only those its
spec.resources list, when it lists some.`,
		Example: `  kubectl buildsmith receivers -A`,
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			c, namespace, err := connection.client()
			if err != nil {
				return err
			}
			if all {
				namespace = ""
			}
			list, err := receiverKind().client(c, namespace).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("listing receivers: %w", err)
			}
			var receivers []v1alpha1.Receiver
			for _, u := range list.Items {
				var rc v1alpha1.Receiver
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rc); err != nil {
					return fmt.Errorf("receiver %s/%s: %w", u.GetNamespace(), u.GetName(), err)
				}
				receivers = append(receivers, rc)
			}
			writeReceivers(streams.Out, receivers, system)
			return nil
		},
	}
	connection.AddFlags(cmd.Flags())
	registerNamespaceCompletion(cmd, connection)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Receivers of all namespaces")
	cmd.Flags().StringVar(&system, "controller-namespace", system, "the controller's namespace, whose Receivers wake the cluster kinds")
	return cmd
}

func receiverKind() kind {
	k, _ := kindOf("receiver")
	return k
}

// writeReceivers prints receivers as a table, by namespace and name.
func writeReceivers(w io.Writer, receivers []v1alpha1.Receiver, system string) {
	slices.SortFunc(receivers, func(a, b v1alpha1.Receiver) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tTYPE\tREADY\tPATH\tWAKES")
	for _, rc := range receivers {
		ready := "Unknown"
		if c := rc.Status.GetCondition(v1alpha1.ConditionReady); c != nil {
			ready = string(c.Status)
			if c.Reason != "" && !c.IsTrue() {
				ready += " (" + c.Reason + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", rc.Namespace, rc.Name, rc.Spec.Type, ready, orDash(rc.Status.WebhookPath), wakes(rc, system))
	}
	_ = tw.Flush()
}

// wakes says what rc's notifications may wake.
func wakes(rc v1alpha1.Receiver, system string) string {
	if len(rc.Spec.Resources) > 0 {
		var named []string
		for _, r := range rc.Spec.Resources {
			if r.Kind != "Buildpack" && rc.Namespace != system {
				continue // cluster kinds: only from the controller's namespace
			}
			named = append(named, r.Kind+"/"+cmp.Or(r.Name, "*"))
		}
		return orDash(strings.Join(named, ","))
	}
	if rc.Namespace == system {
		return "ClusterStores, ClusterStacks, ClusterLifecycles, Buildpacks of " + rc.Namespace
	}
	return "Buildpacks of " + rc.Namespace
}
