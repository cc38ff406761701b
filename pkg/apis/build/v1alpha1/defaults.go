package v1alpha1

import "context"

// DefaultServiceAccountName is the ServiceAccount a Builder uses when its spec
// names none.
const DefaultServiceAccountName = "default"

// The CRD schemas apply the same defaults on the API server; these make the
// controller see identical objects however they were created.

// SetDefaults implements apis.Defaultable.
func (*ClusterStore) SetDefaults(context.Context) {}

// SetDefaults implements apis.Defaultable.
func (*ClusterStack) SetDefaults(context.Context) {}

// SetDefaults implements apis.Defaultable.
func (b *Buildpack) SetDefaults(context.Context) {
	if b.Spec.ServiceAccountName == "" {
		b.Spec.ServiceAccountName = DefaultServiceAccountName
	}
}

// SetDefaults implements apis.Defaultable.
func (*ClusterLifecycle) SetDefaults(context.Context) {}

// SetDefaults implements apis.Defaultable.
func (*Receiver) SetDefaults(context.Context) {}

// SetDefaults implements apis.Defaultable.
func (b *Builder) SetDefaults(context.Context) {
	b.Spec.setDefaults()
	if b.Spec.ServiceAccountName == "" {
		b.Spec.ServiceAccountName = DefaultServiceAccountName
	}
}

// SetDefaults implements apis.Defaultable.
func (b *ClusterBuilder) SetDefaults(context.Context) { b.Spec.setDefaults() }

func (s *BuilderSpec) setDefaults() {
	if s.Stack.Kind == "" {
		s.Stack.Kind = "ClusterStack"
	}
	if s.Store.Kind == "" && s.Store.Name != "" { // none: the sources alone
		s.Store.Kind = "ClusterStore"
	}
	if s.Lifecycle != nil && s.Lifecycle.Kind == "" {
		s.Lifecycle.Kind = "ClusterLifecycle"
	}
}
