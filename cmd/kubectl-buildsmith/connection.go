package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// defaultRequestTimeout is --request-timeout by default: it bounds one
// request, so that a hung API server does not hang the command.
const defaultRequestTimeout = 30 * time.Second

// clusterFlags are the flags of the commands that talk to a cluster:
// kubectl's connection flags, with kubectl's names and meanings
// (--kubeconfig, --context, --cluster, --user, -n/--namespace, -s/--server,
// --token, --as, --as-group, --as-uid, --as-user-extra, the TLS flags,
// --request-timeout, --disable-compression), bound by client-go's clientcmd
// as kubectl's own are.
type clusterFlags struct {
	rules     *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
}

// register adds the flags to a command's flags. The commands parse with the
// flag package (so -flag and --flag alike, before and after the
// arguments); clientcmd binds its flags to a pflag.FlagSet, from which they
// are copied.
func (f *clusterFlags) register(fs *flag.FlagSet) {
	f.rules = clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&f.rules.ExplicitPath, "kubeconfig", "", "the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s" // as kubectl's
	names.ContextOverrideFlags.Namespace.Description = "the namespace (default: the context's)"
	names.CurrentContext.Description = "the kubeconfig context to use"
	names.Timeout.Default = defaultRequestTimeout.String()
	// Not kubectl's: basic authentication is gone from Kubernetes, and a
	// proxy is the kubeconfig's to name.
	names.AuthOverrideFlags.Username.LongName = ""
	names.AuthOverrideFlags.Password.LongName = ""
	names.ClusterOverrideFlags.ProxyURL.LongName = ""
	bound := pflag.NewFlagSet("", pflag.ContinueOnError)
	clientcmd.BindOverrideFlags(&f.overrides, bound, names)
	bound.VisitAll(func(pf *pflag.Flag) { addFlag(fs, pf) })
	fs.Func("as-user-extra", "User extras to impersonate for the operation, KEY=VALUE; this flag can be repeated to specify multiple values for the same key.", func(s string) error {
		key, value, ok := strings.Cut(s, "=")
		if !ok || key == "" {
			return fmt.Errorf("%q is not KEY=VALUE", s)
		}
		extra := &f.overrides.AuthInfo.ImpersonateUserExtra
		if *extra == nil {
			*extra = map[string][]string{}
		}
		(*extra)[key] = append((*extra)[key], value)
		return nil
	})
}

// addFlag adds a flag of a pflag.FlagSet to fs: under its shorthand with
// its description and under its name as "same as -X" (as the commands' own
// -n and -A are), or under its name alone.
func addFlag(fs *flag.FlagSet, pf *pflag.Flag) {
	v := &goValue{pf.Value}
	usage := pf.Usage
	if pf.Shorthand != "" {
		fs.Var(v, pf.Shorthand, usage)
		usage = "same as -" + pf.Shorthand
	}
	fs.Var(v, pf.Name, usage)
	// The help prints a default that differs from the zero goValue's "";
	// false and [] (pflag's empty list) are no defaults worth printing.
	if pf.DefValue == "false" || pf.DefValue == "[]" {
		for _, name := range []string{pf.Shorthand, pf.Name} {
			if g := fs.Lookup(name); g != nil {
				g.DefValue = ""
			}
		}
	}
}

// goValue is a pflag value as a flag.Value. It is a boolean flag (given
// without a value) when pflag's is, and its zero value prints as "": the
// flag package makes one to tell whether a flag has a default to print,
// and pflag's zero values may panic when printed.
type goValue struct{ v pflag.Value }

func (g *goValue) String() string {
	if g.v == nil {
		return ""
	}
	return g.v.String()
}

func (g *goValue) Set(s string) error { return g.v.Set(s) }

func (g *goValue) IsBoolFlag() bool { return g.v != nil && g.v.Type() == "bool" }

// config returns the client configuration and the namespace to use.
func (f *clusterFlags) config() (*rest.Config, string, error) {
	config := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(f.rules, &f.overrides)
	rest, err := config.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	namespace, _, err := config.Namespace()
	if err != nil {
		return nil, "", err
	}
	return rest, namespace, nil
}

// client returns the client and the namespace to use.
func (f *clusterFlags) client() (dynamic.Interface, string, error) {
	rest, namespace, err := f.config()
	if err != nil {
		return nil, "", err
	}
	c, err := dynamic.NewForConfig(rest)
	if err != nil {
		return nil, "", err
	}
	return c, namespace, nil
}
