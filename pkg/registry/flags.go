package registry

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
)

// AddFlags registers the options an operator sets as flags of fs, with o's
// values as defaults. A zero duration takes New's default, which its help
// says; the bounds left zero take New's too (16 failing registries a
// namespace, 256 hosts named in the metrics).
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.Timeout, "registry-timeout", o.Timeout, "deadline of one registry read, retries included (default 30s)")
	fs.DurationVar(&o.WriteTimeout, "registry-write-timeout", o.WriteTimeout, "deadline of one image push (default none: a push that moves is never cut)")
	fs.Int64Var(&o.MinReadRate, "registry-min-read-rate", o.MinReadRate,
		"slowest average rate, in bytes a second, a layer download (flatten) may move at: its deadline is --registry-timeout plus its size at this rate (default 262144: 256 KiB/s)")
	fs.Int64Var(&o.MaxHeaderBytes, "registry-max-header-bytes", o.MaxHeaderBytes,
		"largest headers of one registry answer; a registry sending more fails the request (default 65536)")
	fs.DurationVar(&o.AnswerTimeout, "registry-answer-timeout", o.AnswerTimeout, "how long a registry read waits for an answer before the registry counts as hanging (default 5s; writes wait 60s after their upload)")
	fs.DurationVar(&o.StallTimeout, "registry-stall-timeout", o.StallTimeout, "an upload the registry takes no byte of for this long is cut (default 30s; a download is cut after the answer timeout without a byte)")
	fs.DurationVar(&o.MaxRetryAfterWait, "registry-max-retry-after-wait", o.MaxRetryAfterWait,
		"longest Retry-After a registry call waits out before sending again, holding every call to that repository (or registry, for answers about none) meanwhile; longer ones requeue (default 10s, negative: never wait)")
	fs.Func("insecure-registry", "a registry (HOST[:PORT], as in image references) that may be spoken to over plain HTTP; repeatable. Allowed loopback registries may too, no other may", func(v string) error {
		o.InsecureRegistries = append(o.InsecureRegistries, v)
		return nil
	})
	fs.BoolVar(&o.LoopbackRegistries, "allow-loopback-registries", o.LoopbackRegistries,
		"allow registries and token services on loopback addresses (localhost, 127.0.0.0/8, ::1: the controller's own pod), over plain HTTP too; for development and tests. Off, an object naming one is refused (RegistryNotAllowed)")
	fs.Func("registry-deny-network", "a network (CIDR) no registry request may go to, e.g. the cluster's pod and service networks; repeatable. Link-local networks (cloud metadata) are always denied",
		func(v string) error {
			network, err := netip.ParsePrefix(v)
			if err != nil {
				return err
			}
			// Addresses are compared unmapped: so is an IPv4-mapped network.
			if addr := network.Addr(); addr.Is4In6() && network.Bits() >= 96 {
				network = netip.PrefixFrom(addr.Unmap(), network.Bits()-96)
			}
			o.DeniedNetworks = append(o.DeniedNetworks, network.Masked())
			return nil
		})
	fs.Func("registry-ca-file", "a PEM file of CA certificates to trust beside the system's, for registries a private CA signed; repeatable", o.addCAFile)
	o.Circuits.HostsPerTenant = cmp.Or(o.Circuits.HostsPerTenant, 16)
	fs.Func("max-failing-registries-per-namespace",
		"most failing registries the objects of one namespace (or the cluster kinds, together) wait on to answer again, each probed about every second; beyond, they retry on their own backoff (default 16)",
		func(v string) error {
			n, err := strconv.Atoi(v)
			if err == nil && n < 1 {
				err = errors.New("must be at least 1")
			}
			o.Circuits.HostsPerTenant = n
			return err
		})
	fs.IntVar(&o.MaxTags, "registry-max-tags", o.MaxTags,
		"most tags of a repository listed for a policy to choose a version from; an object following a repository with more waits (TooManyTags) (default 10000)")
	fs.IntVar(&o.NamedHosts, "registry-metric-hosts", cmp.Or(o.NamedHosts, 256),
		"most registries counted under their own name in the metrics (host label), given as they first answer; the others count as host=\"other\"")
	fs.Func("registry-metric-host", "a registry (HOST[:PORT]) counted under its own name in the metrics; repeatable. Given, only these are (--registry-metric-hosts no longer applies), so that no tenant's registry takes a name",
		func(v string) error {
			o.MetricHosts = append(o.MetricHosts, v)
			return nil
		})
	fs.Func("registry-remembered-blobs", "most (repository, blob) pairs remembered as held, so that pushes skip asking about them, each about 250 bytes; 0: none, every push asks (default 65536)",
		func(v string) error {
			n, err := strconv.Atoi(v)
			if err == nil && n < 0 {
				err = errors.New("must not be negative")
			}
			o.RememberedBlobs = cmp.Or(n, -1) // the option's 0 is its default
			return err
		})
}

// addCAFile adds the CA certificates of the PEM file at path, checked.
func (o *Options) addCAFile(path string) error {
	pem, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := CheckCACertificates(pem); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	o.CACertificates = append(append(o.CACertificates, pem...), '\n')
	return nil
}
