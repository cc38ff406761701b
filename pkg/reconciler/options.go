package reconciler

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Options are the retry knobs, shared by all reconcilers.
type Options struct {
	// RetryBaseDelay and RetryMaxDelay bound the per-object exponential
	// backoff after transient errors.
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// PollInterval is how often an object waiting for something (an image,
	// credentials, a dependency) looks again by itself.
	PollInterval time.Duration
	// ResyncInterval is how often a Ready object is reconciled again, to
	// notice tags that moved. 0 disables it.
	ResyncInterval time.Duration
	// CredentialNamespaces, when set, are the only namespaces whose
	// ServiceAccounts the cluster kinds may name: whoever may create a
	// ClusterStore must not get to push with kube-system's credentials.
	// Empty: any namespace (kpack's behaviour).
	CredentialNamespaces []string
	// Secrets bounds what tenants' ServiceAccounts make the controller read
	// and watch (see SecretLimits).
	Secrets SecretLimits
	// MaxObjectSeries bounds the series of buildsmith_object_info, one an
	// object: tenants choose how many objects there are.
	MaxObjectSeries int
}

// DefaultOptions are the defaults of the flags.
func DefaultOptions() Options {
	return Options{RetryBaseDelay: time.Second, RetryMaxDelay: 5 * time.Minute,
		PollInterval: time.Minute, ResyncInterval: 10 * time.Minute, Secrets: DefaultSecretLimits(), MaxObjectSeries: 5000}
}

// AddFlags registers the options as flags, with o's values as defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.RetryBaseDelay, "retry-base-delay", o.RetryBaseDelay, "first retry delay after a transient error; doubles per failure")
	fs.DurationVar(&o.RetryMaxDelay, "retry-max-delay", o.RetryMaxDelay, "cap of the retry delay after transient errors")
	fs.DurationVar(&o.PollInterval, "poll-interval", o.PollInterval, "how often an object waiting for an image, credentials or a dependency looks again")
	fs.DurationVar(&o.ResyncInterval, "resync-interval", o.ResyncInterval, "how often Ready stores and stacks are checked for moved tags (0: never)")
	o.Secrets.AddFlags(fs)
	fs.IntVar(&o.MaxObjectSeries, "metrics-max-objects", o.MaxObjectSeries, "most series of buildsmith_object_info (one an object) a replica exports; "+
		"beyond it the Ready objects are left out first, and buildsmith_objects still counts every one")
	fs.Func("cluster-credential-namespaces", "comma-separated namespaces whose ServiceAccounts (registry credentials and signing keys) "+
		"ClusterStores, ClusterStacks, ClusterLifecycles and ClusterBuilders may use; repeatable (default: any)",
		namespaceList(&o.CredentialNamespaces))
}

// namespaceList is the parser of a flag listing namespaces, comma-separated
// and repeatable, into dst. A blank value is refused rather than meaning
// "any namespace", and so is a name no namespace can have.
func namespaceList(dst *[]string) func(string) error {
	return func(v string) error {
		added := 0
		for _, ns := range strings.Split(v, ",") {
			if ns = strings.TrimSpace(ns); ns == "" {
				continue
			}
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return fmt.Errorf("%q is not a namespace: %s", ns, strings.Join(errs, "; "))
			}
			if !slices.Contains(*dst, ns) {
				*dst = append(*dst, ns)
			}
			added++
		}
		if added == 0 {
			return fmt.Errorf("no namespace in %q", v)
		}
		return nil
	}
}
