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
package registry
