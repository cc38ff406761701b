// Package registry is buildsmith's one way to talk to OCI registries. It wraps
// go-containerregistry's remote package with short in-call retries, deadlines
// on every operation, request accounting, a circuit per failing place, credentials
// from Kubernetes ServiceAccounts, and — above all — one classification of
// every failure, so that no other package inspects a ggcr or network error.
//
// # The three classes
//
// Every error a Client returns is a *failure.Error with a Class and a Reason
// (the CamelCase reason a condition shows). Classify finds it under any
// wrapping, and classifies other errors by the same rules:
//
//   - Transient: the registry or the network failed and will likely recover
//     without anyone doing anything — connection refused or reset, DNS
//     failures, timeouts, EOF mid-response, HTTP 408, 429 and 5xx. Reasons
//     RegistryUnavailable and RateLimited. The place that failed (a
//     repository, or the registry) gets an open circuit (see Circuits): the
//     caller waits on it, and is woken the moment a probe gets an answer;
//     other transient errors are retried with a growing delay (never sooner
//     than the registry's Retry-After, the error's RetryAfter).
//   - Waiting: the request was fine but something it needs is not there yet —
//     an image or tag that does not exist (404), credentials that are missing
//     or refused (401, 403), a ServiceAccount or Secret that does not exist,
//     a certificate the registry presents that is not trusted. Reasons
//     ImageNotFound, Unauthorized, ServiceAccountNotFound, SecretNotFound,
//     CertificateInvalid. Nobody can tell whether this fixes itself (someone
//     may be pushing the image right now), so the caller polls slowly and
//     retries at once when a Secret or ServiceAccount it depends on changes.
//   - Permanent: retrying cannot help until a person changes the input — a
//     reference that does not parse, a manifest or config that is not valid,
//     a secret whose docker config is malformed, an index without the wanted
//     platform, a registry that rejects what we send (other 4xx). Reasons
//     InvalidReference, InvalidImage, InvalidSecret, PlatformNotFound,
//     RegistryRejected. The caller reports Stalled.
//
// Errors the package cannot place are Transient with reason RegistryError: a
// retry with backoff is cheap, and a wrong Stalled would leave a builder
// broken until someone notices.
//
// # What a status means, and who retries
//
// meaningOf (statuses.go) is the one table of what each HTTP status means:
// whether it is an outage, whether it is retried within the call, whether
// its Retry-After counts, and its class and reason. Four mechanisms retry,
// each owning one horizon:
//
//   - Within the call (session.go retryInCall, for ggcr's reads and for
//     pushes): a status the table retries, or a connection cut short, a few
//     times within a second (Options.Retry). Not on a host with an open
//     circuit, nor once the call met a Retry-After.
//   - Retry-After holds (retryafter.go): a 429 or 503 naming a wait up to
//     Options.MaxRetryAfterWait is waited out and the request sent again;
//     every call to the same place waits with it. A longer one fails the
//     call, and the error carries it.
//   - Circuits (circuit.go, prober.go): an outage opens its place's circuit;
//     calls to it fail at once, Transient with the reason that opened it and
//     a PlaceError naming the place, and one prober per place asks again
//     with a growing delay, closing the circuit, and waking every caller
//     waiting on it, at the first answer that is not an outage.
//   - The caller's requeue (reconciler.Policy), by the error's class:
//     Transient with a growing delay (never before its Retry-After),
//     Waiting as a slow poll, Permanent not at all.
//
// # Where things are
//
//   - client.go: Options, New, and the transport chain (Client.layers),
//     built from the wire up, one line per layer; session.go: Client.do,
//     which every operation runs in, and the in-call retry; call.go: what a
//     call's requests met.
//   - statuses.go: what each HTTP status means; errors.go: Classify.
//   - The layers, bottom up: stall.go (stalls cut), limits.go (sizes cut),
//     stats.go (requests and bytes counted), retryafter.go (Retry-After
//     noted, then waited out), gate.go (nothing into an open circuit),
//     pingcache.go, hostpolicy.go; place.go: the place a request is about.
//   - Circuits: circuit.go (trip, refuse, Open), circuitstate.go
//     (the state machine, pure), circuittick.go (the prober's half of it),
//     prober.go (the probes sent), waiters.go (Wait: who waits on what).
//   - Operations: read.go, image.go, imagecache.go (reads); push.go,
//     pushexchange.go, blobmemory.go, traits.go, write.go (pushes); copy.go,
//     referrers.go, tags.go; keychain.go (credentials); flags.go.
package registry
