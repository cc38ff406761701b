package bench

import (
	"cmp"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// pushPhase is one phase of scenario 16: every request the registry saw
// in it, and how many builders (or signatures) it is divided by.
type pushPhase struct {
	per  int // builders pushed (or checked) in the phase
	took time.Duration
	ok   bool
	reqs []*registrytest.Request
	cost cost
}

func (p pushPhase) perBuilder() float64 { return float64(p.cost.requests) / float64(max(p.per, 1)) }

// pushRequestsRun is what a run of scenario 16 (or of its smoke: phases a,
// b and e only) measured.
type pushRequestsRun struct {
	k, kNew int
	w       *world
	f       *registrytest.Registry

	layers int      // L: layers of a builder image, from its manifest
	config v1.Hash  // a builder's config blob
	digest []string // a builder's layer digests, in order
	// fromSources: how many of them are layers of the store's, stack's
	// and lifecycle's images (the others the controller makes).
	fromSources int

	warmup      pushPhase // the first builder (probe, lifecycle read)
	own         pushPhase // a: K builders, a repository each
	sharedFirst pushPhase // the first builder of builders/shared
	shared      pushPhase // b: K builders more in builders/shared
	patch       pushPhase // c: stack patch, every builder of a and b rebuilt
	signPush    pushPhase // the builder of d pushed, unsigned
	secret      pushPhase // d: the key Secret created, not yet listed
	sign        pushPhase // d: the Secret listed by the ServiceAccount
	signature   pushPhase // d: the reconcile that signs, without its HEAD of the builder's tag
	signLater   pushPhase // d: later reconciles, without their HEADs of the tag
	// signReconciles: the reconciles of d's builder in the sign phase (its
	// HEADs of the tag).
	signReconciles int
	resync         pushPhase // e
}

const sharedRepo = "builders/shared"

func sharedTag(i int) string { return fmt.Sprintf("%s:b-%04d", sharedRepo, i) }

// runPushRequests runs the phases; all adds the stack patch (c) and the
// signature (d).
func runPushRequests(t *testing.T, k, kNew int, all bool) *pushRequestsRun {
	r := &pushRequestsRun{k: k, kNew: kNew}
	r.f = registrytest.New(t)
	f := r.f
	seed(t, f.Addr)
	startController(t, "--builder-attestations=none") // (d) is one signature alone: § 19 adds attestations
	w := newWorld(t, f.Addr)
	r.w = w
	w.waitStoreStackReady(t, 60*time.Second)
	timeout := max(time.Minute, time.Duration(k)*time.Second)

	// measure resets the traffic, runs the phase, lets late requeues and
	// status writes settle, and keeps what the registry saw.
	measure := func(per int, run func() (time.Duration, bool)) pushPhase {
		t.Helper()
		f.Traffic().Reset()
		took, ok := run()
		time.Sleep(time.Second)
		reqs := f.Traffic().Requests()
		return pushPhase{per: per, took: took, ok: ok, reqs: reqs, cost: w.cost(reqs)}
	}

	// Warm-up: the first builder of the controller pays the probe of the
	// registry (once per registry and process) and reads the lifecycle.
	r.warmup = measure(1, func() (time.Duration, bool) {
		w.createBuilders(t, 0, 1, w.order())
		return w.waitBuildersReady(t, 1, timeout)
	})
	if !r.warmup.ok {
		t.Fatal("the warm-up builder is not Ready")
	}

	// a. K builders, each in a repository of its own (builders/b-0001 …).
	r.own = measure(k, func() (time.Duration, bool) {
		w.createBuilders(t, 1, k+1, w.order())
		return w.waitBuildersReady(t, k+1, timeout)
	})
	r.readBuilder(t, builderRepo(1)+":latest")

	// b. K builders sharing one repository, after a first one there.
	sw := w.inNamespace(t, w.name+"-shared", f.Addr)
	r.sharedFirst = measure(1, func() (time.Duration, bool) {
		sw.createBuildersAt(t, 0, 1, w.order(), sharedTag)
		return sw.waitBuildersReady(t, 1, timeout)
	})
	r.shared = measure(k, func() (time.Duration, bool) {
		sw.createBuildersAt(t, 1, k+1, w.order(), sharedTag)
		return sw.waitBuildersReady(t, k+1, timeout)
	})

	if all && r.own.ok && r.shared.ok {
		// c. A stack patch: kNew new layers on the build and run images at
		// the stack's tags, the ClusterStack asked to look again; until
		// every builder of a and b (and the two first ones) is pushed anew.
		before := builderImages(t)
		patchStack(t, f.Addr, kNew, "2")
		rebuilt := 2 * (k + 1)
		r.patch = measure(rebuilt, func() (time.Duration, bool) {
			annotate(t, "clusterstack", w.name)
			return waitAllBuilders(t, rebuilt, timeout, func(latest map[string]string) bool {
				for key, image := range latest {
					if image == before[key] {
						return false
					}
				}
				return len(latest) >= rebuilt
			})
		})

		// d. One signature: a builder pushed without a key; the key Secret
		// created (a reconcile, one HEAD of the tag); then listed by the
		// ServiceAccount, which signs the builder already pushed.
		dw := w.inNamespace(t, w.name+"-signed", f.Addr)
		private, _ := cosigntest.KeyPair(t, "bench")
		r.signPush = measure(1, func() (time.Duration, bool) {
			dw.createBuildersAt(t, 0, 1, w.order(), func(int) string { return "builders/signed:latest" })
			return dw.waitBuildersReady(t, 1, timeout)
		})
		r.secret = measure(1, func() (time.Duration, bool) {
			createSigningSecret(t, dw.ns, private)
			// The reconcile the Secret causes, if any, asks about the tag.
			return waitAsked(f, time.Now(), 10*time.Second, 200*time.Millisecond, 1, tagAsked(map[string]bool{"builders/signed:latest": true}))
		})
		r.sign = measure(1, func() (time.Duration, bool) {
			useSigningSecret(t, dw.ns)
			return waitSigned(t, dw.ns, 1, 1)
		})
		// A reconcile of the builder begins with a HEAD of its tag, and one
		// builder's reconciles never overlap: the signature is what comes
		// between the first two; what follows the second is a later
		// reconcile's.
		var sig, later []*registrytest.Request
		reconciles := 0
		for _, q := range r.sign.reqs {
			switch {
			case q.Kind == "manifest" && q.Repo == "builders/signed" && q.Ref == "latest":
				reconciles++
			case reconciles <= 1:
				sig = append(sig, q)
			default:
				later = append(later, q)
			}
		}
		r.signature = pushPhase{per: 1, took: r.sign.took, ok: r.sign.ok, reqs: sig, cost: w.cost(sig)}
		r.signLater = pushPhase{per: 1, reqs: later, cost: w.cost(later)}
		r.signReconciles = reconciles
	}

	// e. A resync of every builder: each tag asked about once.
	tags := map[string]bool{}
	for i := range k + 1 {
		tags[builderRepo(i)+":latest"] = true
		tags[sharedTag(i)] = true
	}
	if all {
		tags["builders/signed:latest"] = true
	}
	r.resync = measure(len(tags), func() (time.Duration, bool) {
		begin := time.Now()
		annotate(t, "builders", "--all", "-A")
		return waitAsked(f, begin, timeout, 200*time.Millisecond, len(tags), tagAsked(tags))
	})
	return r
}

// annotate asks the objects kubectl names (e.g. "builders --all -A") to
// reconcile now, as § 1 and § 12 do.
func annotate(t testing.TB, args ...string) {
	t.Helper()
	args = append(append([]string{"annotate"}, args...), "--overwrite", "bench.buildsmith.dev/resync="+time.Now().Format(time.RFC3339Nano))
	if out, err := env.Kubectl(args...).CombinedOutput(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// tagAsked is waitAsked's tag for the builder tags ("repository:tag") of
// tags.
func tagAsked(tags map[string]bool) func(*registrytest.Request) string {
	return func(q *registrytest.Request) string {
		if key := q.Repo + ":" + q.Ref; q.Kind == "manifest" && tags[key] {
			return key
		}
		return ""
	}
}

// readBuilder reads a builder image's manifest (L, its blobs).
func (r *pushRequestsRun) readBuilder(t *testing.T, tag string) {
	t.Helper()
	m := manifestOf(t, r.f.Addr+"/"+tag)
	r.layers, r.config = len(m.Layers), m.Config.Digest
	// The layers of the images seed pushed: what a builder may mount.
	sources := []string{"buildsmith/lifecycle:0.21.0", "stack/build:1", "stack/run:1"}
	for i := range buildpacks {
		sources = append(sources, fmt.Sprintf("buildpacks/bp-%d:1", i))
	}
	mountable := map[string]bool{}
	for _, src := range sources {
		for _, l := range manifestOf(t, r.f.Addr+"/"+src).Layers {
			mountable[l.Digest.String()] = true
		}
	}
	r.fromSources = 0
	for _, l := range m.Layers {
		r.digest = append(r.digest, l.Digest.String())
		if mountable[l.Digest.String()] {
			r.fromSources++
		}
	}
}

func manifestOf(t *testing.T, tag string) *v1.Manifest {
	t.Helper()
	ref, err := name.ParseReference(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// probe counts the requests of the registry probe (manifestchecks.go) in
// reqs: its manifest PUTs by digest and the upload of its blob.
func probe(reqs []*registrytest.Request) (manifestPuts, blobUploads int) {
	for _, q := range reqs {
		switch {
		case q.Kind == "manifest" && q.Method == http.MethodPut && strings.HasPrefix(q.Ref, "sha256:"):
			manifestPuts++
		case q.Kind == "upload" && q.Method == http.MethodPut && q.Ref == probeBlobDigest:
			blobUploads++
		}
	}
	return manifestPuts, blobUploads
}

// probeBlobDigest is the digest of the probe's blob, "{}".
const probeBlobDigest = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"

// perKind renders a count by kind divided by n, largest first.
func perKind(m map[string]int, n int) string {
	return renderKinds(m, func(v int) string { return trim(float64(v) / float64(max(n, 1))) })
}

// trim renders v with one decimal, or none when it is whole.
func trim(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprint(int64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

// uploadsByRole splits the finished uploads (PUT ?digest=) of reqs into
// the builder's layers, its config and the rest.
func (r *pushRequestsRun) uploadsByRole(reqs []*registrytest.Request) (layers, configs, other int) {
	isLayer := map[string]bool{}
	for _, d := range r.digest {
		isLayer[d] = true
	}
	for _, q := range reqs {
		if q.Kind != "upload" || q.Method != http.MethodPut || q.Ref == "" {
			continue
		}
		switch {
		case isLayer[q.Ref]:
			layers++
		case q.Ref == r.config.String():
			configs++
		default:
			other++
		}
	}
	return layers, configs, other
}

// byRepo splits reqs by the repository group they address: the builder
// repositories of their own (builders/b-*), builders/shared, the store's,
// stack's and lifecycle's, and the rest.
func (r *pushRequestsRun) byRepo(reqs []*registrytest.Request) (own, shared, sources, other []*registrytest.Request) {
	for _, q := range reqs {
		switch {
		case strings.HasPrefix(q.Repo, "builders/b-"):
			own = append(own, q)
		case q.Repo == sharedRepo:
			shared = append(shared, q)
		case r.w.sharedRepos[q.Repo]:
			sources = append(sources, q)
		default:
			other = append(other, q)
		}
	}
	return own, shared, sources, other
}

// TestPushRequestsSmoke is the small version of scenario 16 that `make
// test` runs: 3 builders in repositories of their own, 3 in one shared
// repository, a resync. It fails if pushes lost the blob memory (a builder
// into a repository holding its layers would ask about them) or the mounts
// (a builder into a new repository would ask about or upload the store's
// and stack's layers).
func TestPushRequestsSmoke(t *testing.T) {
	if full {
		t.Skip("BENCH=1 runs the full scenarios")
	}
	const k = 3
	r := runPushRequests(t, k, 0, false)
	for _, p := range []struct {
		name string
		ph   pushPhase
	}{{"warm-up", r.warmup}, {"a", r.own}, {"b (first)", r.sharedFirst}, {"b", r.shared}, {"e", r.resync}} {
		name, ph := p.name, p.ph
		t.Logf("%s: %d requests for %d builders (%s)", name, ph.cost.requests, ph.per, kinds(ph.cost.byKind))
		if !ph.ok {
			t.Errorf("phase %s did not finish", name)
		}
	}
	t.Logf("L = %d layers", r.layers)

	// The probe: once, at the first push.
	if puts, _ := probe(r.warmup.reqs); puts == 0 {
		t.Errorf("the first push did not probe the registry (no manifest PUT by digest)")
	}
	for name, ph := range map[string]pushPhase{"a": r.own, "b": r.shared} {
		if puts, _ := probe(ph.reqs); puts != 0 {
			t.Errorf("phase %s probed the registry again (%d manifest PUTs by digest)", name, puts)
		}
		if n := ph.cost.byKind["HEAD blob"]; n != 0 {
			t.Errorf("phase %s: %d HEAD blob requests, want none (mounts and the memory stand in for them)", name, n)
		}
		if ph.cost.manifestPuts != k {
			t.Errorf("phase %s: %d manifest PUTs for %d builders", name, ph.cost.manifestPuts, k)
		}
	}
	// a: the store's, stack's and lifecycle's layers mounted, not uploaded;
	// only what the controller makes (its layers and the config) is.
	layers, _, other := r.uploadsByRole(r.own.reqs)
	fromSources := r.fromSources
	if r.own.cost.mounts < k*fromSources || fromSources == 0 {
		t.Errorf("phase a: %d mounts for %d builders, want at least %d each (the layers read from the store, stack and lifecycle)",
			r.own.cost.mounts, k, fromSources)
	}
	if layers > k*(r.layers-fromSources) || other > 0 {
		t.Errorf("phase a: %d layer uploads (%d other) for %d builders, want at most the %d layers the controller makes each",
			layers, other, k, r.layers-fromSources)
	}
	if per := r.shared.perBuilder(); per > 4 {
		t.Errorf("phase b: %.1f requests per builder into a repository holding its layers, want ≤ 4 (%s)", per, kinds(r.shared.cost.byKind))
	}
	if r.resync.cost.requests != r.resync.per {
		t.Errorf("phase e: %d requests for %d builders at a resync, want 1 each (%s)", r.resync.cost.requests, r.resync.per, kinds(r.resync.cost.byKind))
	}
}

// TestPushRequests is scenario 16: the requests of issue 29's table.
// BENCH_PUSH_K (default 20) builders per phase, BENCH_PUSH_NEW_LAYERS (2)
// new layers in the stack patch.
func TestPushRequests(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	k, kNew := envInt("BENCH_PUSH_K", 20), envInt("BENCH_PUSH_NEW_LAYERS", 2)
	r := runPushRequests(t, k, kNew, true)
	addSection(r.section())
}

func (r *pushRequestsRun) section() *section {
	k, kNew, L := r.k, r.kNew, r.layers
	s := &section{title: "16. Registry requests per push (issue 29)",
		what: fmt.Sprintf("One fresh registry (ggcr in-memory behind registrytest.New, which mounts across repositories and refuses a "+
			"manifest naming a blob it lacks, as the distribution registry does) and controller (default flags, --disable-ha); "+
			"the store and stack Ready first; then phases, each counting every request the registry saw in it. A warm-up builder "+
			"first (builders/b-0000): the first push pays the once-per-registry probe and the lifecycle read, and is reported "+
			"apart, not in (a). (a) K = %d builders each in a repository of its own (builders/b-0001 …), cold; L is read from "+
			"the registry (the layers of builders/b-0001's manifest). (b) one builder in builders/shared, then K = %d more there "+
			"(tags b-0001 …). (c) new build and run images with k = %d new layers each pushed to the stack's tags and the "+
			"ClusterStack annotated, until all %d builders of the warm-up, (a) and (b) have a new latestImage; divided by %d, the "+
			"stack's reads included. (d) a builder pushed without a key in a namespace of its own; the cosign key Secret created "+
			"(then up to 10 s for a reconcile that causes to ask about the tag); then the Secret listed by the ServiceAccount, which signs the builder "+
			"already pushed: the signature is the requests of the reconcile that signs (each reconcile of the builder begins with "+
			"a HEAD of its tag, and a builder's reconciles never overlap), without that HEAD. (e) every builder "+
			"annotated; until each tag was asked about and the registry was quiet for 2 s. Before: the figures the issue took "+
			"from § 12 and § 13.", k, k, kNew, 2*(k+1), 2*(k+1)),
		header: []string{"case", "before (§ 12/§ 13, as the issue lists)", "target", "measured (requests per builder)", "met?"}}

	verdict := func(ok bool, why string) string {
		if ok {
			return "met"
		}
		return "not met, because " + why
	}
	// a.
	layerUp, configUp, _ := r.uploadsByRole(r.own.reqs)
	made := L - r.fromSources
	aWant := L + 3
	s.rows = append(s.rows, []string{
		fmt.Sprintf("(a) new builder in a repository of its own, L = %d layers", L), "not measured",
		fmt.Sprintf("≤ L + 3 = %d", aWant), trim(r.own.perBuilder()),
		verdict(r.own.ok && r.own.perBuilder() <= float64(aWant), fmt.Sprintf(
			"per builder: %s. %d of the L = %d layers are the store's, stack's and lifecycle's, mounted (one request each); "+
				"the other %d are layers the controller makes (the directories and the order and stack TOML), the same in "+
				"every builder and held by every builder repository pushed before, yet uploaded (POST, PUT: %s layer uploads "+
				"per builder) as the push mounts only layers it read from a repository, not ones it uploaded to another; with the config "+
				"(POST, PUT: %s) and the manifest PUT that is L + %d + 3 = %d; the HEAD manifest (%s) is a second reconcile of "+
				"the new builder, which looks up the tag it has just pushed",
			perKind(r.own.cost.byKind, k), r.fromSources, L, made, trim(float64(layerUp)/float64(k)),
			trim(float64(configUp)/float64(k)), made, L+made+3, trim(float64(r.own.cost.byKind["HEAD manifest"])/float64(k)))),
	})
	// b.
	s.rows = append(s.rows, []string{"(b) new builder, repository already holds its layers (builders/shared:b-i)", "18.2", "≤ 4",
		trim(r.shared.perBuilder()),
		verdict(r.shared.ok && r.shared.perBuilder() <= 4, "per builder: "+perKind(r.shared.cost.byKind, k))})
	// c.
	if r.patch.per > 0 {
		own, shared, sources, other := r.byRepo(r.patch.reqs)
		ownPer := float64(len(own)) / float64(k+1)
		c := fmt.Sprintf("%s (a repository of its own: %s per builder; builders/shared: %s per builder; the stack's reads: %d in all; other: %d)",
			trim(r.patch.perBuilder()), trim(ownPer), trim(float64(len(shared))/float64(k+1)), len(sources), len(other))
		want := float64(kNew + 3)
		s.rows = append(s.rows, []string{fmt.Sprintf("(c) stack patch, k = %d new base layers", kNew), "18.0",
			fmt.Sprintf("≤ k + 3 = %d", kNew+3), c,
			verdict(r.patch.ok && r.patch.perBuilder() <= want && ownPer <= want,
				"per rebuilt builder: "+perKind(r.patch.cost.byKind, r.patch.per))})
	}
	// d.
	if r.sign.per > 0 {
		measured := fmt.Sprintf("%d (the reconcile that signs, without its HEAD of the builder's tag); the phase: %d = %d HEADs of the "+
			"builder's tag (%d reconciles) + %d + %d of later reconciles", r.signature.cost.requests, r.sign.cost.requests,
			r.signReconciles, r.signReconciles, r.signature.cost.requests, r.signLater.cost.requests)
		why := fmt.Sprintf("the signing reconcile's requests are %s: beside the floor's two small blobs (POST, PUT each) and "+
			"one manifest PUT, a HEAD of the signature tag before (to keep a signature already there rather than add it "+
			"again) and one after (that no other writer replaced the tag meanwhile): %d HEAD manifest",
			sequence(r.signature.reqs), r.signature.cost.byKind["HEAD manifest"])
		if r.signLater.cost.requests > 0 {
			why += fmt.Sprintf("; and a later reconcile of the builder read the signature tag again (its HEAD of the "+
				"builder's tag aside), as a reconcile does when the status it reads records no signature (here, it seems, "+
				"the status write was not yet in its informer's cache): %s", sequence(r.signLater.reqs))
		}
		s.rows = append(s.rows, []string{"(d) one signature", "12", "≤ 5", measured,
			verdict(r.signature.ok && r.signature.cost.requests <= 5 && r.signLater.cost.requests == 0, why)})
	}
	// e.
	s.rows = append(s.rows, []string{"(e) unchanged builder at a resync", "1", "1",
		fmt.Sprintf("%s (%d requests, %d builders)", trim(r.resync.perBuilder()), r.resync.cost.requests, r.resync.per),
		verdict(r.resync.ok && r.resync.cost.requests <= r.resync.per, "by kind: "+kinds(r.resync.cost.byKind))})

	puts, ups := probe(r.warmup.reqs)
	s.notes = append(s.notes,
		fmt.Sprintf("Warm-up builder (not in (a)): %d requests: %s; of them the probe, %d requests: %d manifest PUTs by digest "+
			"(answered %s) and %d upload of its blob (POST, PUT); and %d reads of the lifecycle image. Without the probe the "+
			"warm-up costs what a builder of (a) does, plus those reads.",
			r.warmup.cost.requests, kinds(r.warmup.cost.byKind), puts+2*ups, puts, refusals(r.warmup.reqs), ups, r.warmup.cost.sharedReads),
		fmt.Sprintf("(a) %d builders: %d requests: %s.", k, r.own.cost.requests, kinds(r.own.cost.byKind)),
		fmt.Sprintf("(b) the first builder of builders/shared: %d requests: %s; the %d after it: %d requests: %s.",
			r.sharedFirst.cost.requests, kinds(r.sharedFirst.cost.byKind), k, r.shared.cost.requests, kinds(r.shared.cost.byKind)))
	if r.patch.per > 0 {
		own, shared, sources, _ := r.byRepo(r.patch.reqs)
		s.notes = append(s.notes, fmt.Sprintf("(c) %d builders rebuilt in %s: %d requests: %s. Own repositories (%d builders): %s; "+
			"builders/shared (%d builders): %s; store, stack and lifecycle: %s.", r.patch.per, r.patch.took.Round(100*time.Millisecond),
			r.patch.cost.requests, kinds(r.patch.cost.byKind), k+1, kinds(registrytest.Summarize(own).ByKind), k+1,
			kinds(registrytest.Summarize(shared).ByKind), kinds(registrytest.Summarize(sources).ByKind)))
	}
	if r.sign.per > 0 {
		s.notes = append(s.notes, fmt.Sprintf("(d) the builder pushed unsigned: %d requests (%s); the key Secret created: %d (%s); "+
			"the Secret listed: %d (%s), in order: %s.", r.signPush.cost.requests, kinds(r.signPush.cost.byKind),
			r.secret.cost.requests, cmp.Or(kinds(r.secret.cost.byKind), "none"), r.sign.cost.requests, kinds(r.sign.cost.byKind), sequence(r.sign.reqs)))
	}
	s.notes = append(s.notes, fmt.Sprintf("(e) %d builders: %d requests: %s.", r.resync.per, r.resync.cost.requests, kinds(r.resync.cost.byKind)))
	s.targets = []target{{"every phase done", "all builders Ready (rebuilt, signed, asked about)",
		fmt.Sprint(r.warmup.ok && r.own.ok && r.sharedFirst.ok && r.shared.ok && r.patch.ok && r.signPush.ok && r.sign.ok && r.resync.ok),
		r.warmup.ok && r.own.ok && r.sharedFirst.ok && r.shared.ok && r.patch.ok && r.signPush.ok && r.sign.ok && r.resync.ok}}
	return s
}

// refusals lists the status codes of the manifest PUTs by digest.
func refusals(reqs []*registrytest.Request) string {
	var out []string
	for _, q := range reqs {
		if q.Kind == "manifest" && q.Method == http.MethodPut && strings.HasPrefix(q.Ref, "sha256:") {
			out = append(out, fmt.Sprint(q.Status()))
		}
	}
	return strings.Join(out, ", ")
}

// sequence lists reqs in order as "METHOD kind ref status".
func sequence(reqs []*registrytest.Request) string {
	var out []string
	for _, q := range reqs {
		ref := q.Ref
		if len(ref) > 19 && strings.HasPrefix(ref, "sha256") { // a digest, or a signature tag
			suffix := ""
			if i := strings.LastIndex(ref, "."); i > 19 {
				suffix = ref[i:]
			}
			ref = ref[:19] + "…" + suffix
		}
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s %d", q.Method, q.Kind, ref, q.Status())))
	}
	return strings.Join(out, "; ")
}
