package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/apis"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// object is what reconcile and status read of any of the kinds.
type object struct {
	u         *unstructured.Unstructured
	ref       string // kind/name, as kubectl prints it
	namespace string
	status    *v1alpha1.ConditionedStatus
	image     string // what it found last: a builder's image, a stack's run image
}

// kind is one of buildsmith's kinds, read and annotated through the dynamic
// client: the commands need only what every kind's status shares.
type kind struct {
	name       string // singular, lower case: clusterstore, builder, …
	resource   string
	namespaced bool
}

var kinds = []kind{
	{name: "clusterstore", resource: "clusterstores"},
	{name: "buildpack", resource: "buildpacks", namespaced: true},
	{name: "clusterstack", resource: "clusterstacks"},
	{name: "clusterlifecycle", resource: "clusterlifecycles"},
	{name: "clusterbuilder", resource: "clusterbuilders"},
	{name: "builder", resource: "builders", namespaced: true},
	{name: "receiver", resource: "receivers", namespaced: true},
}

func (k kind) client(c dynamic.Interface, namespace string) dynamic.ResourceInterface {
	r := c.Resource(v1alpha1.SchemeGroupVersion.WithResource(k.resource))
	if k.namespaced {
		return r.Namespace(namespace)
	}
	return r
}

func (k kind) get(ctx context.Context, c dynamic.Interface, namespace, name string) (object, error) {
	u, err := k.client(c, namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return object{}, err
	}
	return k.object(u)
}

// list lists the kind's objects (of namespace, or all namespaces when "").
func (k kind) list(ctx context.Context, c dynamic.Interface, namespace string) ([]object, error) {
	l, err := k.client(c, namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]object, 0, len(l.Items))
	for i := range l.Items {
		o, err := k.object(&l.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

func (k kind) patch(ctx context.Context, c dynamic.Interface, namespace, name string, patch []byte) error {
	_, err := k.client(c, namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// statusView is the part of any kind's status the commands show.
type statusView struct {
	Status struct {
		v1alpha1.ConditionedStatus `json:",inline"`
		LatestImage                string                    `json:"latestImage"` // builders
		RunImage                   v1alpha1.ResolvedRunImage `json:"runImage"`    // stacks
		Buildpacks                 []v1alpha1.StoreBuildpack `json:"buildpacks"`  // stores
		Image                      v1alpha1.ResolvedImage    `json:"image"`       // lifecycles
		WebhookPath                string                    `json:"webhookPath"` // receivers
	} `json:"status"`
}

func (k kind) object(u *unstructured.Unstructured) (object, error) {
	var view statusView
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &view); err != nil {
		return object{}, fmt.Errorf("%s/%s: %w", k.name, u.GetName(), err)
	}
	o := object{u: u, ref: k.name + "/" + u.GetName(), namespace: u.GetNamespace(), status: &view.Status.ConditionedStatus}
	switch k.name {
	case "clusterstore", "buildpack":
		o.image = fmt.Sprintf("%d buildpacks", len(view.Status.Buildpacks))
	case "clusterstack":
		o.image = view.Status.RunImage.LatestImage
	case "clusterlifecycle":
		o.image = view.Status.Image.LatestImage
	case "receiver":
		o.image = view.Status.WebhookPath
	default:
		o.image = view.Status.LatestImage
	}
	return o, nil
}

// kindOf finds a kind by the names kubectl users type: singular or plural,
// any case (Builder, builders, clusterstores).
func kindOf(s string) (kind, bool) {
	s = strings.TrimSuffix(strings.ToLower(s), "s")
	for _, k := range kinds {
		if k.name == s {
			return k, true
		}
	}
	return kind{}, false
}

// objectArg reads the one KIND/NAME argument.
func objectArg(args []string) (k kind, name string, ok bool) {
	if len(args) != 1 {
		return kind{}, "", false
	}
	kindName, name, found := strings.Cut(args[0], "/")
	k, known := kindOf(kindName)
	return k, name, found && known && name != ""
}

// kindNames are the kinds' names, for help and messages.
func kindNames() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.name
	}
	return strings.Join(names, ", ")
}

func newReconcileCommand(streams genericiooptions.IOStreams) *cobra.Command {
	connection := newConnectionFlags()
	waitReady := false
	timeout := 5 * time.Minute
	cmd := &cobra.Command{
		Use:   "reconcile KIND/NAME [--wait]",
		Short: "Reconcile an object now (KIND/NAME), and with --wait wait until it is Ready",
		Long: `Asks the controller to reconcile the object now: sets the
buildsmith.dev/reconcile-requested-at annotation, which also skips the wait
of the object's backoff. With --wait, waits until the controller has acted
on the request and the object is Ready, and prints why when it is not.
KIND is one of ` + kindNames() + ` (singular or plural, any case).

Exit status: 0 when requested (and Ready, with --wait), 1 otherwise.`,
		Example: `  kubectl buildsmith reconcile -n team builder/app --wait
  kubectl buildsmith reconcile clusterstack/base`,
		ValidArgsFunction: completeObjects(connection),
		RunE: func(_ *cobra.Command, args []string) error {
			k, name, ok := objectArg(args)
			if !ok {
				return usageError("give one KIND/NAME, KIND one of %s", kindNames())
			}
			c, namespace, err := connection.client()
			if err != nil {
				return err
			}
			return reconcileNow(context.Background(), c, k, namespace, name, waitReady, timeout, streams)
		},
	}
	connection.AddFlags(cmd.Flags())
	registerNamespaceCompletion(cmd, connection)
	cmd.Flags().BoolVar(&waitReady, "wait", waitReady, "wait until the object is Ready")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "how long --wait waits")
	return cmd
}

// reconcileNow requests a reconcile of k's object name, and with wait waits
// for it to be handled and Ready.
func reconcileNow(ctx context.Context, c dynamic.Interface, k kind, namespace, name string, waitReady bool, timeout time.Duration,
	streams genericiooptions.IOStreams) error {
	requested := time.Now().UTC().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.ReconcileRequestedAtAnnotation, requested)
	if err := k.patch(ctx, c, namespace, name, []byte(patch)); err != nil {
		return err
	}
	ref := k.name + "/" + name
	fmt.Fprintf(streams.Out, "%s: reconcile requested at %s\n", ref, requested)
	if !waitReady {
		return nil
	}
	o, err := waitHandled(ctx, c, k, namespace, name, requested, timeout)
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	fmt.Fprintf(streams.Out, "%s: Ready %s\n", ref, o.image)
	return nil
}

// waitHandled polls until the controller has handled the request and the
// object is Ready (nil error), says it cannot become Ready without a
// change (Stalled), or timeout passes; the error then says why it is not
// Ready. Failed reads (the API server restarting, busy) are asked again.
func waitHandled(ctx context.Context, c dynamic.Interface, k kind, namespace, name, requested string, timeout time.Duration) (object, error) {
	var last object
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		o, err := k.get(ctx, c, namespace, name)
		if apierrors.IsNotFound(err) {
			return false, err
		}
		if err != nil {
			if ctx.Err() == nil {
				lastErr = err
			}
			return false, nil
		}
		last, lastErr = o, nil
		handled := o.status.LastHandledReconcileAt == requested && o.status.ObservedGeneration > 0
		ready := o.status.GetCondition(v1alpha1.ConditionReady)
		switch {
		case handled && ready != nil && ready.IsTrue():
			return true, nil
		case handled && isTrue(o.status.GetCondition(v1alpha1.ConditionStalled)):
			return false, fmt.Errorf("not Ready, and will not be without a change: %s", describe(ready))
		}
		return false, nil
	})
	switch {
	case err == nil:
		return last, nil
	case !wait.Interrupted(err): // not found, or Stalled
		return last, err
	case last.status == nil:
		return last, fmt.Errorf("not read within %v: %v", timeout, lastErr)
	case last.status.LastHandledReconcileAt != requested:
		return last, fmt.Errorf("the controller has not acted on the request after %v (is it running?); %s",
			timeout, describe(last.status.GetCondition(v1alpha1.ConditionReady)))
	}
	return last, fmt.Errorf("not Ready after %v: %s", timeout, describe(last.status.GetCondition(v1alpha1.ConditionReady)))
}

func isTrue(c *apis.Condition) bool { return c != nil && c.IsTrue() }

func describe(ready *apis.Condition) string {
	if ready == nil {
		return "no Ready condition yet"
	}
	if ready.Message == "" {
		return fmt.Sprintf("Ready=%s %s", ready.Status, ready.Reason)
	}
	return fmt.Sprintf("Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
}

func newStatusCommand(streams genericiooptions.IOStreams) *cobra.Command {
	connection := newConnectionFlags()
	printing := genericclioptions.NewPrintFlags("")
	all := false
	cmd := &cobra.Command{
		Use:   "status [-A | -n NAMESPACE] [-o FORMAT]",
		Short: "Every buildsmith object, one line each: Ready, reason, since when, what it found last",
		Long: `Prints every buildsmith object, one line each: the cluster kinds, and the
Builders, Buildpacks and Receivers of the namespace (all namespaces with
-A), with Ready, UpToDate, the reason (Ready's, or UpToDate's when a Ready
object's last re-check failed), how long ago Ready last changed, and what
the object found last (a builder's image, a stack's run image, a store's
buildpack count, a Receiver's webhook path). -o wide adds the message; -o json, yaml, name, jsonpath=… and
go-template=… print the objects as kubectl get does, in a List.`,
		Example: `  kubectl buildsmith status -A
  kubectl buildsmith status -n team -o wide
  kubectl buildsmith status -A -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}{"\n"}{end}'`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			output := ptr.Deref(printing.OutputFormat, "")
			var printer printers.ResourcePrinter
			if output != "" && output != "wide" {
				p, err := printing.ToPrinter()
				if err != nil {
					return usageError("%v (or wide)", err)
				}
				printer = p
			}
			c, namespace, err := connection.client()
			if err != nil {
				return err
			}
			if all {
				namespace = ""
			}
			objects, err := listAll(context.Background(), c, namespace)
			if err != nil {
				return err
			}
			if printer != nil {
				return printObjects(printer, objects, streams.Out)
			}
			writeStatus(streams.Out, objects, time.Now(), output == "wide")
			return nil
		},
	}
	connection.AddFlags(cmd.Flags())
	registerNamespaceCompletion(cmd, connection)
	printing.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "Output format. One of: (wide, " + strings.Join(printing.AllowedFormats(), ", ") + ")."
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return append([]string{"wide"}, printing.AllowedFormats()...), cobra.ShellCompDirectiveNoFileComp
	})
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Builders, Buildpacks and Receivers of all namespaces")
	return cmd
}

// listAll lists every kind's objects (namespaced kinds of namespace, or of
// all namespaces when "").
func listAll(ctx context.Context, c dynamic.Interface, namespace string) ([]object, error) {
	var objects []object
	for _, k := range kinds {
		found, err := k.list(ctx, c, namespace)
		if err != nil {
			return nil, fmt.Errorf("listing %ss: %w", k.name, err)
		}
		objects = append(objects, found...)
	}
	return objects, nil
}

// printObjects prints objects as a List with printer (-o json, yaml,
// name…), as kubectl get prints several kinds.
func printObjects(printer printers.ResourcePrinter, objects []object, out io.Writer) error {
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{}}}
	for _, o := range objects {
		list.Items = append(list.Items, *o.u)
	}
	return printer.PrintObj(list, out)
}

// writeStatus prints objects as a table, cluster kinds first; wide adds
// the message of the condition the reason is from.
func writeStatus(w io.Writer, objects []object, now time.Time, wide bool) {
	sort.SliceStable(objects, func(i, j int) bool {
		if objects[i].namespace != objects[j].namespace {
			return objects[i].namespace < objects[j].namespace
		}
		return objects[i].ref < objects[j].ref
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "NAMESPACE\tNAME\tREADY\tUPTODATE\tREASON\tSINCE\tLATEST"
	if wide {
		header += "\tMESSAGE"
	}
	fmt.Fprintln(tw, header)
	for _, o := range objects {
		ready, upToDate, reason, message, since := "Unknown", "-", "", "", "-"
		if c := o.status.GetCondition(v1alpha1.ConditionReady); c != nil {
			ready, reason, message = string(c.Status), c.Reason, c.Message
			if !c.LastTransitionTime.Inner.IsZero() {
				since = now.Sub(c.LastTransitionTime.Inner.Time).Round(time.Second).String()
			}
		}
		if c := o.status.GetCondition(v1alpha1.ConditionUpToDate); c != nil {
			upToDate = string(c.Status)
			if reason == "" {
				reason, message = c.Reason, c.Message // Ready, and its last re-check failed
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s", orDash(o.namespace), o.ref, ready, upToDate, orDash(reason), since, orDash(o.image))
		if wide {
			// One line each: a message may hold newlines.
			fmt.Fprintf(tw, "\t%s", orDash(strings.Join(strings.Fields(message), " ")))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
