package v1alpha1

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/pkg/apis"

	"github.com/buildsmith/buildsmith/pkg/tagpolicy"
)

// The CRD schemas reject what a schema can express (types, required fields,
// kinds, reserved label keys); Validate checks the rest, above all that image
// references parse as the registry client will parse them. The reconcilers run
// it first and report a failure as a permanent error in status.

// maxFieldErrors bounds how many errors one list reports: a status message
// listing ten thousand broken order entries helps nobody, and knative's
// FieldError aggregation is quadratic in the number of errors.
const maxFieldErrors = 10

// reservedLabelPrefix marks the labels the builder image assembly owns.
const reservedLabelPrefix = "io.buildpacks."

// Validate implements apis.Validatable.
func (c *ClusterStore) Validate(context.Context) *apis.FieldError {
	return c.Spec.validate().ViaField("spec")
}

func (s *ClusterStoreSpec) validate() *apis.FieldError {
	var errs *apis.FieldError
	if len(s.Sources) == 0 {
		errs = errs.Also(apis.ErrMissingField("sources"))
	}
	list := fieldErrorList{field: "sources"}
	firstIndex := make(map[string]int, len(s.Sources))
	for i, source := range s.Sources {
		ref, err := validateSource(source.Image, source.Policy)
		if err != nil {
			list.add(i, err)
			continue
		}
		// Compare parsed names so that "busybox:latest" and
		// "index.docker.io/library/busybox:latest" count as one source.
		if j, dup := firstIndex[ref.Name()]; dup {
			list.add(i, apis.ErrGeneric(fmt.Sprintf("duplicate source: same image as sources[%d]", j), "image"))
			continue
		}
		firstIndex[ref.Name()] = i
	}
	errs = errs.Also(list.result())
	if s.ServiceAccountRef != nil {
		errs = errs.Also(s.ServiceAccountRef.validate().ViaField("serviceAccountRef"))
	}
	return errs
}

// Validate implements apis.Validatable.
func (c *ClusterStack) Validate(context.Context) *apis.FieldError {
	return c.Spec.validate().ViaField("spec")
}

func (s *ClusterStackSpec) validate() *apis.FieldError {
	var errs *apis.FieldError
	if _, err := validateSource(s.BuildImage.Image, s.BuildImage.Policy); err != nil {
		errs = errs.Also(err.ViaField("buildImage"))
	}
	errs = errs.Also(s.RunImage.validate().ViaField("runImage"))
	for i, run := range s.AdditionalRunImages {
		errs = errs.Also(run.validate().ViaFieldIndex("additionalRunImages", i))
	}
	if s.ServiceAccountRef != nil {
		errs = errs.Also(s.ServiceAccountRef.validate().ViaField("serviceAccountRef"))
	}
	return errs
}

func (r *RunImageSource) validate() *apis.FieldError {
	_, errs := validateSource(r.Image, r.Policy)
	for i, mirror := range r.Mirrors {
		var err error
		if r.Policy != nil {
			_, err = name.NewRepository(mirror) // the chosen tag is the mirror's too
		} else {
			_, err = name.ParseReference(mirror)
		}
		if err != nil {
			errs = errs.Also(apis.ErrInvalidArrayValue(mirror, "mirrors", i))
		}
	}
	return errs
}

// Validate implements apis.Validatable.
func (c *ClusterLifecycle) Validate(context.Context) *apis.FieldError {
	_, errs := validateSource(c.Spec.Image, c.Spec.Policy)
	if c.Spec.ServiceAccountRef != nil {
		errs = errs.Also(c.Spec.ServiceAccountRef.validate().ViaField("serviceAccountRef"))
	}
	return errs.ViaField("spec")
}

// Validate implements apis.Validatable.
func (b *Builder) Validate(context.Context) *apis.FieldError {
	errs := b.Spec.BuilderSpec.validate(true)
	if name := b.Spec.ServiceAccountName; name != "" {
		errs = errs.Also(validateObjectName(name, "serviceAccountName"))
	}
	return errs.ViaField("spec")
}

// Validate implements apis.Validatable.
func (b *Buildpack) Validate(context.Context) *apis.FieldError {
	_, errs := validateSource(b.Spec.Image, b.Spec.Policy)
	if b.Spec.ServiceAccountName != "" {
		errs = errs.Also(validateObjectName(b.Spec.ServiceAccountName, "serviceAccountName"))
	}
	return errs.ViaField("spec")
}

// receiverTypes are the types a Receiver may have.
var receiverTypes = []string{ReceiverDistribution, ReceiverHarbor, ReceiverDockerHub, ReceiverQuay, ReceiverGitHub,
	ReceiverACR, ReceiverGCR, ReceiverGeneric, ReceiverGenericHMAC}

// Validate implements apis.Validatable.
func (r *Receiver) Validate(context.Context) *apis.FieldError {
	var errs *apis.FieldError
	if !slices.Contains(receiverTypes, r.Spec.Type) {
		errs = apis.ErrInvalidValue(r.Spec.Type, "type", "must be one of "+strings.Join(receiverTypes, ", "))
	}
	errs = errs.Also(validateObjectName(r.Spec.SecretRef.Name, "secretRef.name"))
	if len(r.Spec.Resources) > maxReceiverResources {
		errs = errs.Also(apis.ErrOutOfBoundsValue(len(r.Spec.Resources), 0, maxReceiverResources, "resources"))
	}
	for i, res := range r.Spec.Resources {
		switch res.Kind {
		case "ClusterStore", "ClusterStack", "ClusterLifecycle", "Buildpack":
		default:
			errs = errs.Also(apis.ErrInvalidValue(res.Kind, "kind", "must be ClusterStore, ClusterStack, ClusterLifecycle or Buildpack").ViaFieldIndex("resources", i))
		}
		if res.Name != "" {
			errs = errs.Also(validateObjectName(res.Name, "name").ViaFieldIndex("resources", i))
		}
	}
	return errs.ViaField("spec")
}

// maxReceiverResources bounds a Receiver's resources, as the CRD does.
const maxReceiverResources = 64

// Validate implements apis.Validatable.
func (b *ClusterBuilder) Validate(context.Context) *apis.FieldError {
	errs := b.Spec.BuilderSpec.validate(false)
	if b.Spec.ServiceAccountRef != nil {
		errs = errs.Also(b.Spec.ServiceAccountRef.validate().ViaField("serviceAccountRef"))
	}
	return errs.ViaField("spec")
}

// validate checks a builder's spec; namespaced: a Builder's (which may
// draw from its namespace's Buildpacks).
func (s *BuilderSpec) validate(namespaced bool) *apis.FieldError {
	errs := validateTag(s.Tag)
	errs = errs.Also(s.validateAdditionalTags())
	errs = errs.Also(validateRef(s.Stack.Kind, "ClusterStack", s.Stack.Name).ViaField("stack"))
	switch {
	case s.Store.Name != "":
		errs = errs.Also(validateRef(s.Store.Kind, "ClusterStore", s.Store.Name).ViaField("store"))
	case len(s.Sources) == 0:
		errs = errs.Also(apis.ErrGeneric("a builder needs a store or sources", "store", "sources"))
	}
	errs = errs.Also(s.validateSources(namespaced))
	if s.Lifecycle != nil {
		errs = errs.Also(validateRef(s.Lifecycle.Kind, "ClusterLifecycle", s.Lifecycle.Name).ViaField("lifecycle"))
	}
	errs = errs.Also(validateOrder(s.Order).ViaField("order"))
	if len(s.OrderExtensions) > 0 {
		errs = errs.Also(validateOrder(s.OrderExtensions).ViaField("orderExtensions"))
	}
	if s.System != nil {
		errs = errs.Also(s.System.validate().ViaField("system"))
	}
	if s.Flatten != nil {
		errs = errs.Also(s.Flatten.validate().ViaField("flatten"))
	}
	if s.Signing != nil {
		switch s.Signing.Format {
		case "", SignatureFormatSig, SignatureFormatBundle, SignatureFormatBoth:
		default:
			errs = errs.Also(apis.ErrInvalidValue(s.Signing.Format, "signing.format", "must be sig, bundle or both"))
		}
	}
	var reserved []string
	for key := range s.AdditionalLabels {
		if key == "" || strings.HasPrefix(key, reservedLabelPrefix) {
			reserved = append(reserved, key)
		}
	}
	sort.Strings(reserved)
	for _, key := range reserved {
		errs = errs.Also(apis.ErrInvalidKeyName(key, "additionalLabels",
			"label keys must be non-empty and may not start with "+reservedLabelPrefix))
	}
	return errs
}

// validateOrder returns the errors of an order, with paths relative to it.
func validateOrder(order []OrderEntry) *apis.FieldError {
	if len(order) == 0 {
		return apis.ErrMissingField(apis.CurrentField)
	}
	list := fieldErrorList{}
	for i, entry := range order {
		if len(entry.Group) == 0 {
			list.add(i, apis.ErrMissingField("group"))
			continue
		}
		first := map[string]int{}
		for j, ref := range entry.Group {
			switch earlier, dup := first[ref.ID]; {
			case ref.ID == "":
				list.add(i, apis.ErrMissingField("id").ViaFieldIndex("group", j))
			case dup:
				// The lifecycle would detect and build it twice, into one
				// layers directory.
				list.add(i, apis.ErrGeneric(fmt.Sprintf("duplicate buildpack in a group: same id as group[%d]", earlier), "id").
					ViaFieldIndex("group", j))
			default:
				first[ref.ID] = j
			}
			if err := validateExecEnv(ref.ExecEnv); err != nil {
				list.add(i, err.ViaFieldIndex("group", j))
			}
		}
	}
	return list.result()
}

// execEnvName is an execution environment's name (RFC 0134), or "*".
var execEnvName = regexp.MustCompile(`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`)

// IsExecEnvName says whether name may be in an order entry's execEnv.
func IsExecEnvName(name string) bool { return len(name) <= 63 && execEnvName.MatchString(name) }

// validateExecEnv checks an order entry's execEnv as the CRD does.
func validateExecEnv(envs []string) *apis.FieldError {
	if len(envs) > 8 {
		return apis.ErrGeneric(fmt.Sprintf("%d execution environments, more than 8", len(envs)), "execEnv")
	}
	for k, env := range envs {
		if !IsExecEnvName(env) {
			return apis.ErrInvalidArrayValue(env, "execEnv", k)
		}
	}
	return nil
}

// validate checks that every system buildpack has an id, and no id comes
// twice: the lifecycle would put it twice into every group.
func (s *SystemBuildpacks) validate() *apis.FieldError {
	var errs *apis.FieldError
	first := map[string]string{}
	for _, list := range []struct {
		field string
		refs  []SystemBuildpackRef
	}{{"pre", s.Pre}, {"post", s.Post}} {
		for i, ref := range list.refs {
			at := fmt.Sprintf("%s[%d]", list.field, i)
			switch earlier, dup := first[ref.ID]; {
			case ref.ID == "":
				errs = errs.Also(apis.ErrMissingField("id").ViaField(at))
			case dup:
				errs = errs.Also(apis.ErrGeneric("duplicate system buildpack: same id as "+earlier, "id").ViaField(at))
			default:
				first[ref.ID] = at
			}
		}
	}
	return errs
}

// validate checks that each buildpack is named as id or id@version, and
// once: in one group, or among the exceptions of all.
func (f *Flatten) validate() *apis.FieldError {
	var errs *apis.FieldError
	first := map[string]string{}
	check := func(name, at string) {
		id, version, pinned := strings.Cut(name, "@")
		switch earlier, dup := first[name]; {
		case id == "" || (pinned && version == ""):
			errs = errs.Also(apis.ErrInvalidValue(name, at, "a buildpack is named id or id@version"))
		case dup:
			errs = errs.Also(apis.ErrGeneric("named twice: also at "+earlier, at))
		default:
			first[name] = at
		}
	}
	for i, group := range f.Groups {
		for j, name := range group.Buildpacks {
			check(name, fmt.Sprintf("groups[%d].buildpacks[%d]", i, j))
		}
	}
	for i, name := range f.Except {
		check(name, fmt.Sprintf("except[%d]", i))
	}
	if len(f.Except) > 0 && !f.All {
		errs = errs.Also(apis.ErrGeneric("except leaves buildpacks out of all, which is not set", "except"))
	}
	return errs
}

// validateSource parses the image of a source: a reference, or with a
// policy a repository (whose reference, for comparing sources, is its
// name); errors have the paths "image" and "policy".
func validateSource(image string, policy *TagPolicy) (interface{ Name() string }, *apis.FieldError) {
	if policy == nil {
		return validateImage(image)
	}
	errs := policy.validate().ViaField("policy")
	if image == "" {
		return nil, errs.Also(apis.ErrMissingField("image"))
	}
	repo, err := name.NewRepository(image)
	if err != nil {
		return nil, errs.Also(apis.ErrInvalidValue(image, "image", "with a policy, a repository without tag or digest: "+err.Error()))
	}
	return repo, errs
}

// validate compiles the policy as the reconcilers will.
func (p *TagPolicy) validate() *apis.FieldError {
	if _, err := tagpolicy.New(p.Semver.Range, "", ""); err != nil {
		return apis.ErrInvalidValue(p.Semver.Range, "semver.range", err.Error())
	}
	if f := p.FilterTags; f != nil {
		if _, err := tagpolicy.New(p.Semver.Range, f.Pattern, f.Extract); err != nil {
			return apis.ErrGeneric(err.Error(), "filterTags")
		}
	}
	return nil
}

// validateImage parses an image reference; errors have the path "image".
func validateImage(image string) (name.Reference, *apis.FieldError) {
	if image == "" {
		return nil, apis.ErrMissingField("image")
	}
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, apis.ErrInvalidValue(image, "image", err.Error())
	}
	return ref, nil
}

// validateSources checks spec.sources: ClusterStores and, for a Builder,
// Buildpacks of its namespace, each named once (spec.store included).
func (s *BuilderSpec) validateSources(namespaced bool) *apis.FieldError {
	list := fieldErrorList{field: "sources"}
	named := map[SourceRef]string{}
	if s.Store.Name != "" {
		named[SourceRef{Kind: "ClusterStore", Name: s.Store.Name}] = "store"
	}
	for i, source := range s.Sources {
		kind := source.Kind
		if kind == "" {
			kind = "ClusterStore"
		}
		switch {
		case kind != "ClusterStore" && kind != "Buildpack":
			list.add(i, apis.ErrInvalidValue(source.Kind, "kind", "must be ClusterStore or Buildpack"))
			continue
		case kind == "Buildpack" && !namespaced:
			list.add(i, apis.ErrInvalidValue(source.Kind, "kind", "a ClusterBuilder draws from ClusterStores only: a Buildpack belongs to one namespace"))
			continue
		}
		if err := validateObjectName(source.Name, "name"); err != nil {
			list.add(i, err)
			continue
		}
		key := SourceRef{Kind: kind, Name: source.Name}
		if first, dup := named[key]; dup {
			list.add(i, apis.ErrGeneric(fmt.Sprintf("duplicate source: %s %s is %s already", kind, source.Name, first), "name"))
			continue
		}
		named[key] = fmt.Sprintf("sources[%d]", i)
	}
	return list.result()
}

func validateRef(kind, wantKind, objectName string) *apis.FieldError {
	var errs *apis.FieldError
	if kind != "" && kind != wantKind {
		errs = apis.ErrInvalidValue(kind, "kind", "must be "+wantKind)
	}
	return errs.Also(validateObjectName(objectName, "name"))
}

func (r *ServiceAccountRef) validate() *apis.FieldError {
	return validateObjectName(r.Name, "name").Also(validateNamespace(r.Namespace, "namespace"))
}

func validateObjectName(value, field string) *apis.FieldError {
	if value == "" {
		return apis.ErrMissingField(field)
	}
	if msgs := validation.IsDNS1123Subdomain(value); len(msgs) > 0 {
		return apis.ErrInvalidValue(value, field, msgs...)
	}
	return nil
}

func validateNamespace(value, field string) *apis.FieldError {
	if value == "" {
		return apis.ErrMissingField(field)
	}
	if msgs := validation.IsDNS1123Label(value); len(msgs) > 0 {
		return apis.ErrInvalidValue(value, field, msgs...)
	}
	return nil
}

// fieldErrorList collects the errors of a list's elements, keeping the first
// maxFieldErrors and counting the rest.
type fieldErrorList struct {
	field   string // the list's field name, or "" when the caller adds it
	errs    []*apis.FieldError
	dropped int
}

func (l *fieldErrorList) add(index int, err *apis.FieldError) {
	if len(l.errs) >= maxFieldErrors {
		l.dropped++
		return
	}
	if l.field == "" {
		l.errs = append(l.errs, err.ViaIndex(index))
	} else {
		l.errs = append(l.errs, err.ViaFieldIndex(l.field, index))
	}
}

func (l *fieldErrorList) result() *apis.FieldError {
	var errs *apis.FieldError
	errs = errs.Also(l.errs...)
	if l.dropped > 0 {
		path := l.field
		if path == "" {
			path = apis.CurrentField
		}
		errs = errs.Also(apis.ErrGeneric(fmt.Sprintf("and %d more invalid entries", l.dropped), path))
	}
	return errs
}
