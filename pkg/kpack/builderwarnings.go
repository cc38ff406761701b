package kpack

import (
	"slices"
	"strings"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// What a converted builder's warnings say of the Buildpacks and
// ClusterBuildpacks it draws from, and of the versions its order entries
// resolve to.

// reportUses says, at each entry drawing from a Buildpack or
// ClusterBuildpack, what it became; and at one naming an object without a
// version that could not be pinned, that buildsmith may take another
// version than kpack.
func (c *converter) reportUses(o *object, storeName string, uses []use) {
	sources := sourcesOf(storeName, uses)
	for i := 0; i < len(uses); i++ {
		u := uses[i]
		if u.source == (v1alpha1.SourceRef{}) {
			o.warn(u.field, "buildpack %s is in no Buildpack or ClusterBuildpack of the input, where kpack looks for it when a builder has no store; "+
				"name a source that holds it in spec.sources", u.id)
			continue
		}
		if u.named == (objectID{}) {
			// An id alone: the objects holding it are consecutive uses.
			n := 1
			for i+n < len(uses) && uses[i+n].field == u.field && uses[i+n].named == (objectID{}) && uses[i+n].bp != nil {
				n++
			}
			c.reportHolders(o, storeName, uses[i:i+n])
			i += n - 1
			continue
		}
		source := describeSources(storeName, uses[i:i+1])
		switch {
		case u.bp == nil && u.named.kind == "ClusterBuildpack":
			o.warn(u.field, "%s is not in the input: replaced by buildpack id %s, which buildsmith looks up in spec.store and spec.sources; "+
				"%s, the ClusterStore it becomes: convert it too, or the builder waits for it", u.named.path(), u.id, source)
		case u.bp == nil:
			o.warn(u.field, "%s is not in the input: replaced by buildpack id %s, which buildsmith looks up in spec.store and spec.sources; "+
				"%s: convert it too, or the builder waits for it", u.named.path(), u.id, source)
		default:
			what, fromStatus := "buildpack id "+u.id, ""
			if u.pinned {
				what += ", version " + u.version
			}
			switch {
			case u.idInStatus && u.pinned:
				fromStatus = " (both from its status)"
			case u.idInStatus:
				fromStatus = " (from its status)"
			case u.pinned:
				fromStatus = " (the version from its status)"
			}
			o.warn(u.field, "%s replaced by %s%s, which buildsmith looks up in spec.store and spec.sources; %s",
				u.named.path(), what, fromStatus, source)
		}
		if u.floats != "" && !poolIsOnly(u, storeName, sources) && !o.warned(u.field, floatsPhrase) {
			o.warn(u.field, "no version, and %s: buildsmith %s %s in spec.store and all of spec.sources, "+
				"not necessarily kpack's, the highest in %s; give the entry a version", u.floats, floatsPhrase, u.id, u.named.path())
		}
	}
}

// floatsPhrase is in the warning that an entry's version is not pinned.
const floatsPhrase = "takes the highest version of"

// reportHolders says, at an entry naming a buildpack by id alone, which
// objects of the input kpack finds it in (holders: one use each), and
// which sources they became.
func (c *converter) reportHolders(o *object, storeName string, holders []use) {
	u := holders[0]
	source := describeSources(storeName, holders)
	if len(holders) == 1 {
		o.warn(u.field, "buildpack %s: kpack finds it in %s; %s", u.id, u.bp.from.path(), source)
		return
	}
	var found []string
	for _, h := range holders {
		where := h.bp.from.path()
		if u.version == "" {
			where += " (" + strings.Join(h.bp.versionsOf(h.id), ", ") + ")"
		}
		found = append(found, where)
	}
	if u.version != "" {
		o.warn(u.field, "buildpack %s %s: kpack finds it in %s; %s", u.id, u.version, strings.Join(found, ", "), source)
		return
	}
	o.warn(u.field, "buildpack %s: kpack finds it in %s, and takes the highest version, as buildsmith does from spec.store and spec.sources; %s",
		u.id, strings.Join(found, ", "), source)
}

// describeSources says which of the builder's fields name the sources of
// uses: "spec.sources names Buildpack a, ClusterStore b", say.
func describeSources(storeName string, uses []use) string {
	var store, sources []string
	for _, u := range uses {
		s := u.source.Kind + " " + u.source.Name
		switch {
		case u.source.Kind == "ClusterStore" && u.source.Name == storeName:
			if !slices.Contains(store, s) {
				store = append(store, s)
			}
		case !slices.Contains(sources, s):
			sources = append(sources, s)
		}
	}
	var parts []string
	if len(store) > 0 {
		parts = append(parts, "spec.store names "+strings.Join(store, ", "))
	}
	if len(sources) > 0 {
		parts = append(parts, "spec.sources names "+strings.Join(sources, ", "))
	}
	return strings.Join(parts, ", and ")
}

// poolIsOnly says whether a builder's store (if any) and sources are all the
// object of u: then buildsmith's highest version is kpack's, pinned or not.
func poolIsOnly(u use, storeName string, sources []v1alpha1.SourceRef) bool {
	if storeName != "" && (u.source.Kind != "ClusterStore" || u.source.Name != storeName) {
		return false
	}
	for _, s := range sources {
		if s != u.source {
			return false
		}
	}
	return storeName != "" || len(sources) > 0
}
