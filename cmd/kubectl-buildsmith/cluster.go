package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"knative.dev/pkg/apis"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// object is what reconcile and status read of any of the four kinds.
type object struct {
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
	} `json:"status"`
}

func (k kind) object(u *unstructured.Unstructured) (object, error) {
	var view statusView
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &view); err != nil {
		return object{}, fmt.Errorf("%s/%s: %w", k.name, u.GetName(), err)
	}
	o := object{ref: k.name + "/" + u.GetName(), namespace: u.GetNamespace(), status: &view.Status.ConditionedStatus}
	switch k.name {
	case "clusterstore", "buildpack":
		o.image = fmt.Sprintf("%d buildpacks", len(view.Status.Buildpacks))
	case "clusterstack":
		o.image = view.Status.RunImage.LatestImage
	case "clusterlifecycle":
		o.image = view.Status.Image.LatestImage
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

const reconcileUsage = `Usage: kubectl buildsmith reconcile KIND/NAME [--wait] [flags]

Asks the controller to reconcile the object now: sets the
buildsmith.dev/reconcile-requested-at annotation, which also skips the wait
of the object's backoff. With --wait, waits until the controller has acted
on the request and the object is Ready, and prints why when it is not.
KIND is clusterstore, clusterstack, clusterlifecycle, builder or clusterbuilder.

Exit status: 0 when requested (and Ready, with --wait), 1 otherwise.

Flags:
`

func runReconcile(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	var cf clusterFlags
	cf.register(fs)
	wait := fs.Bool("wait", false, "wait until the object is Ready")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long --wait waits")
	positional, code, done := parse(fs, reconcileUsage, args, stdout, stderr)
	if done {
		return code
	}
	k, name, ok := objectArg(positional)
	if !ok {
		fmt.Fprintln(stderr, "kubectl-buildsmith reconcile: give one KIND/NAME, KIND one of clusterstore, clusterstack, clusterlifecycle, builder, clusterbuilder")
		return 1
	}
	c, namespace, err := cf.client()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl-buildsmith reconcile: %v\n", err)
		return 1
	}
	ctx := context.Background()
	requested := time.Now().UTC().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.ReconcileRequestedAtAnnotation, requested)
	if err := k.patch(ctx, c, namespace, name, []byte(patch)); err != nil {
		fmt.Fprintf(stderr, "kubectl-buildsmith reconcile: %v\n", err)
		return 1
	}
	ref := k.name + "/" + name
	fmt.Fprintf(stdout, "%s: reconcile requested at %s\n", ref, requested)
	if !*wait {
		return 0
	}
	o, err := waitHandled(ctx, c, k, namespace, name, requested, *timeout)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl-buildsmith reconcile: %s: %v\n", ref, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: Ready %s\n", ref, o.image)
	return 0
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

const statusUsage = `Usage: kubectl buildsmith status [-A | -n NAMESPACE] [flags]

Prints every buildsmith object, one line each: the cluster kinds, and the
builders of the namespace (all namespaces with -A), with Ready, UpToDate,
the reason (Ready's, or UpToDate's when a Ready object's last re-check
failed), how long ago Ready last changed, and what the object found last (a
builder's image, a stack's run image, a store's buildpack count).

Flags:
`

func runStatus(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var cf clusterFlags
	cf.register(fs)
	all := fs.Bool("A", false, "builders of all namespaces")
	fs.BoolVar(all, "all-namespaces", false, "same as -A")
	positional, code, done := parse(fs, statusUsage, args, stdout, stderr)
	if done {
		return code
	}
	if len(positional) > 0 {
		fmt.Fprintln(stderr, "kubectl-buildsmith status: takes no arguments")
		return 1
	}
	c, namespace, err := cf.client()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl-buildsmith status: %v\n", err)
		return 1
	}
	if *all {
		namespace = ""
	}
	var objects []object
	for _, k := range kinds {
		found, err := k.list(context.Background(), c, namespace)
		if err != nil {
			fmt.Fprintf(stderr, "kubectl-buildsmith status: listing %ss: %v\n", k.name, err)
			return 1
		}
		objects = append(objects, found...)
	}
	writeStatus(stdout, objects, time.Now())
	return 0
}

// writeStatus prints objects as a table, cluster kinds first.
func writeStatus(w io.Writer, objects []object, now time.Time) {
	sort.SliceStable(objects, func(i, j int) bool {
		if objects[i].namespace != objects[j].namespace {
			return objects[i].namespace < objects[j].namespace
		}
		return objects[i].ref < objects[j].ref
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tREADY\tUPTODATE\tREASON\tSINCE\tLATEST")
	for _, o := range objects {
		ready, upToDate, reason, since := "Unknown", "-", "", "-"
		if c := o.status.GetCondition(v1alpha1.ConditionReady); c != nil {
			ready, reason = string(c.Status), c.Reason
			if !c.LastTransitionTime.Inner.IsZero() {
				since = now.Sub(c.LastTransitionTime.Inner.Time).Round(time.Second).String()
			}
		}
		if c := o.status.GetCondition(v1alpha1.ConditionUpToDate); c != nil {
			upToDate = string(c.Status)
			if reason == "" {
				reason = c.Reason // Ready, and its last re-check failed
			}
		}
		namespace := o.namespace
		if namespace == "" {
			namespace = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", namespace, o.ref, ready, upToDate, orDash(reason), since, orDash(o.image))
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// parse parses a command's flags, before and after its arguments (as
// kubectl takes them), and returns the arguments: -h prints usage on stdout,
// a mistake on stderr. done reports that the command should exit with code.
func parse(fs *flag.FlagSet, usage string, args []string, stdout, stderr io.Writer) (positional []string, code int, done bool) {
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, usage)
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printUsage(stdout)
				return nil, 0, true
			}
			printUsage(stderr)
			return nil, 1, true
		}
		if fs.NArg() == 0 {
			return positional, 0, false
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
