package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/pkg/tagpolicy"
)

// ReasonNoMatchingTag: a repository has no tag its policy allows.
const ReasonNoMatchingTag = "NoMatchingTag"

// ChosenTags chooses the tags of one reconcile's followed images (sources
// with a policy) and keeps what it chose, for the status once the whole
// reconcile succeeded. A store's sources are read in parallel: it is safe
// for concurrent use.
type ChosenTags struct {
	previous []v1alpha1.ChosenTag
	now      func() time.Time

	mu     sync.Mutex
	chosen []v1alpha1.ChosenTag
}

// NewChosenTags starts a reconcile's choices; previous are those its
// object's status holds, whose chosenAt a choice made again keeps.
func NewChosenTags(previous []v1alpha1.ChosenTag) *ChosenTags {
	return &ChosenTags{previous: previous, now: time.Now}
}

// Source is an image to read as a reconcile found it.
type Source struct {
	// Ref is what to read: the spec's reference, or the chosen tag's
	// digest.
	Ref name.Reference
	// Named is how builders name it: the spec's reference, or the
	// repository at the chosen tag.
	Named string
	// Tag is the chosen tag; "" for a reference.
	Tag string
}

// Choose returns the source image names: image itself without a policy;
// with one, the repository's tag whose version is the highest the policy
// allows, at the digest it names now. The repository is listed every time:
// a new version is found by the reconcile a push (or a resync) brings.
//
// field is where the spec names the image (spec.sources[2]), for status.
func (c *ChosenTags) Choose(ctx context.Context, reg registry.Access, field, image string, policy *v1alpha1.TagPolicy) (Source, error) {
	if policy == nil {
		ref, err := name.ParseReference(image)
		if err != nil { // Validate parsed it already
			return Source{}, failure.Permanentf(registry.ReasonInvalidReference, "%v", err)
		}
		return Source{Ref: ref, Named: image}, nil
	}
	repo, p, err := compile(image, policy)
	if err != nil {
		return Source{}, err
	}
	tags, err := reg.ListTags(ctx, repo)
	if err != nil {
		return Source{}, err
	}
	choice, ok := p.Choose(tags)
	if !ok {
		// As an image not pushed yet: waited for (and woken by a push).
		return Source{}, failure.Waitingf(ReasonNoMatchingTag, "%s has no tag of a version in %s, of its %d tags%s",
			image, p, len(tags), newestOf(tags))
	}
	tag := repo.Tag(choice.Tag)
	desc, err := reg.Resolve(ctx, tag)
	if err != nil {
		return Source{}, err
	}
	c.keep(v1alpha1.ChosenTag{Field: field, Image: image, Tag: choice.Tag, Version: choice.Version, LatestImage: desc.Ref.String()})
	return Source{Ref: desc.Ref, Named: tag.String(), Tag: choice.Tag}, nil
}

// compile parses what Validate checked.
func compile(image string, policy *v1alpha1.TagPolicy) (name.Repository, *tagpolicy.Policy, error) {
	repo, err := name.NewRepository(image)
	if err != nil {
		return name.Repository{}, nil, failure.Permanentf(registry.ReasonInvalidReference, "%v", err)
	}
	var pattern, extract string
	if f := policy.FilterTags; f != nil {
		pattern, extract = f.Pattern, f.Extract
	}
	p, err := tagpolicy.New(policy.Semver.Range, pattern, extract)
	if err != nil {
		return name.Repository{}, nil, failure.Permanentf(ReasonInvalidSpec, "%s: %v", image, err)
	}
	return repo, p, nil
}

// newestOf names a few of tags, for a message saying none matched: those
// last in the registry's (lexical) order, which are most often the newest.
func newestOf(tags []string) string {
	const shown = 5
	if len(tags) == 0 {
		return ""
	}
	last := tags[max(0, len(tags)-shown):]
	for i, t := range last {
		last[i] = fmt.Sprintf("%.40q", t) // a registry's text, quoted and cut
	}
	return " (last listed: " + strings.Join(last, ", ") + ")"
}

// keep records a choice; chosenAt is the previous one's when the same tag
// at the same digest was chosen before.
func (c *ChosenTags) keep(chosen v1alpha1.ChosenTag) {
	chosen.ChosenAt = metav1.NewTime(c.now().Truncate(time.Second))
	for _, p := range c.previous {
		if p.Field == chosen.Field && p.Image == chosen.Image && p.Tag == chosen.Tag && p.LatestImage == chosen.LatestImage {
			chosen.ChosenAt = p.ChosenAt
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.chosen = append(c.chosen, chosen)
}

// Status is what was chosen, for status.chosenTags: in the spec's order,
// whatever order the images were read in; nil when nothing follows.
func (c *ChosenTags) Status() []v1alpha1.ChosenTag {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.chosen)
	slices.SortFunc(out, func(a, b v1alpha1.ChosenTag) int { return compareFields(a.Field, b.Field) })
	return out
}

// compareFields orders field paths as the spec lists them: by name, then
// by index as a number (sources[2] before sources[10]).
func compareFields(a, b string) int {
	aName, aIndex, _ := strings.Cut(a, "[")
	bName, bIndex, _ := strings.Cut(b, "[")
	if c := strings.Compare(aName, bName); c != 0 {
		return c
	}
	i, _ := strconv.Atoi(strings.TrimSuffix(aIndex, "]"))
	j, _ := strconv.Atoi(strings.TrimSuffix(bIndex, "]"))
	return i - j
}
