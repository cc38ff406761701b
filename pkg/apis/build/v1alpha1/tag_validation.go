package v1alpha1

import (
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"knative.dev/pkg/apis"
)

// MaxAdditionalTags bounds spec.additionalTags: each is a push (a copy, to
// another registry) and, in another repository, its own signatures.
const MaxAdditionalTags = 16

// validateAdditionalTags checks that each additional tag is a tag, named
// once, and not the builder's own.
func (s *BuilderSpec) validateAdditionalTags() *apis.FieldError {
	if len(s.AdditionalTags) > MaxAdditionalTags {
		return apis.ErrOutOfBoundsValue(len(s.AdditionalTags), 0, MaxAdditionalTags, "additionalTags")
	}
	list := fieldErrorList{field: "additionalTags"}
	// Host names are case-insensitive, tags not.
	key := func(t name.Tag) string { return strings.ToLower(t.Context().Name()) + ":" + t.TagStr() }
	seen := map[string]bool{}
	if own, err := name.NewTag(s.Tag); err == nil {
		seen[key(own)] = true
	}
	for i, tag := range s.AdditionalTags {
		parsed, problem := parseTag(tag)
		switch {
		case problem != "":
			list.add(i, apis.ErrInvalidValue(tag, apis.CurrentField, problem))
		case seen[key(parsed)]:
			list.add(i, apis.ErrInvalidValue(tag, apis.CurrentField, "names the same tag as spec.tag or an earlier additional tag"))
		default:
			seen[key(parsed)] = true
		}
	}
	return list.result()
}

func validateTag(tag string) *apis.FieldError {
	if tag == "" {
		return apis.ErrMissingField("tag")
	}
	if _, problem := parseTag(tag); problem != "" {
		return apis.ErrInvalidValue(tag, "tag", problem)
	}
	return nil
}

// parseTag parses a builder's tag, or says what is wrong with it.
func parseTag(tag string) (name.Tag, string) {
	parsed, err := name.NewTag(tag)
	switch {
	case err == nil:
		return parsed, ""
	case isDigest(tag):
		return name.Tag{}, "must be a tag, not a digest"
	}
	return name.Tag{}, err.Error()
}

func isDigest(ref string) bool {
	_, err := name.NewDigest(ref)
	return err == nil
}
