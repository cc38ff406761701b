package kpack

import (
	"fmt"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// clusterBuildpackSuffix makes the name of a ClusterBuildpack's ClusterStore
// (clusterStoreName): never the ClusterBuildpack's own, which a ClusterStore
// converted from another input, or already in the cluster, may have.
const clusterBuildpackSuffix = "-clusterbuildpack"

// buildpack is a Buildpack or ClusterBuildpack of the input: a buildpackage
// image that kpack builders may name in their order. A Buildpack becomes
// buildsmith's Buildpack, of the same namespace and name; a ClusterBuildpack
// a ClusterStore of that one image, named by clusterStoreName. Builders that
// draw from it name it in spec.sources (source).
type buildpack struct {
	from   *object
	source v1alpha1.SourceRef
	image  string
	// listed are the buildpacks its status lists; roots are the ids of
	// those no other's order names: what kpack uses for an entry that names
	// the object without an id.
	listed []v1alpha1.BuildpackRef
	roots  []string
}

// reserveStoreNames records, before anything is converted, the names a
// ClusterBuildpack's ClusterStore may not take: those of the input's
// ClusterStores (any apiVersion, converted or not) and of the stores its
// builders name; then names the ClusterStore of each ClusterBuildpack, in
// the order of the input (clusterStoreName).
func (c *converter) reserveStoreNames(objects []*object) {
	for _, o := range objects {
		apiVersion, _ := o.doc.obj["apiVersion"].(string)
		switch {
		case clusterKindOf(o) == "ClusterStore", apiVersion == v1alpha1.SchemeGroupVersion.String() && o.kind == "ClusterStore":
			c.storeNames[o.name] = true
		case o.role.isBuilder():
			switch store := mapAt(o.doc.obj, "spec")["store"].(type) {
			case string:
				c.storeNames[store] = true
			case map[string]any:
				if name, _ := store["name"].(string); name != "" {
					c.storeNames[name] = true
				}
			}
		}
	}
	for _, o := range objects {
		if o.role == toClusterBuildpack && o.name != "" {
			c.clusterStoreName(o.name)
		}
	}
}

// clusterStoreName is the name of the ClusterStore a ClusterBuildpack
// becomes: <name>-clusterbuildpack, so that converting ClusterBuildpacks
// and ClusterStores in separate batches (or beside the cluster's) never
// makes two ClusterStores of one name, the second overwriting the first
// when applied; if a ClusterStore of the input, a store a builder of the
// input names or another ClusterBuildpack's ClusterStore named so far has
// that name, <name>-clusterbuildpack-2, -3…. Those of the input's
// ClusterBuildpacks are named first, in the order of the input; one a
// builder names that is not in the input gets the name converting it with
// this input would give it.
func (c *converter) clusterStoreName(clusterBuildpack string) string {
	if storeName, ok := c.clusterBuildpackStores[clusterBuildpack]; ok {
		return storeName
	}
	storeName := clusterBuildpack + clusterBuildpackSuffix
	for i := 2; c.storeNames[storeName]; i++ {
		storeName = fmt.Sprintf("%s%s-%d", clusterBuildpack, clusterBuildpackSuffix, i)
	}
	c.clusterBuildpackStores[clusterBuildpack] = storeName
	c.storeNames[storeName] = true
	return storeName
}

// convertBuildpack converts a Buildpack to buildsmith's Buildpack, and a
// ClusterBuildpack to a ClusterStore of its image, and keeps what builders
// need to know of it.
func (c *converter) convertBuildpack(o *object) {
	clusterScoped := o.role == toClusterBuildpack
	status := mapAt(o.doc.obj, "status") // metadata drops it
	meta := metadata(o, clusterScoped)
	spec := o.root.mapping("spec")
	bp := &buildpack{from: o, image: spec.str("image")}
	bp.listed, bp.roots = statusBuildpacks(status)

	var converted buildsmithObject
	if clusterScoped {
		store := &v1alpha1.ClusterStore{TypeMeta: typeMeta("ClusterStore"), ObjectMeta: meta}
		store.Spec.ServiceAccountRef = serviceAccountRef(spec, "serviceAccountRef")
		if bp.image != "" {
			store.Spec.Sources = []v1alpha1.ImageSource{{Image: bp.image}}
		}
		if meta.Name != "" {
			store.Name = c.clusterStoreName(meta.Name)
		}
		if store.Name != meta.Name+clusterBuildpackSuffix {
			o.warn("metadata.name", "a ClusterStore of the input, or a store a builder of the input names, has the name %s%s: becomes ClusterStore %s",
				meta.Name, clusterBuildpackSuffix, store.Name)
		}
		bp.source = v1alpha1.SourceRef{Kind: "ClusterStore", Name: store.Name}
		converted = store
	} else {
		b := &v1alpha1.Buildpack{TypeMeta: typeMeta("Buildpack"), ObjectMeta: meta}
		b.Spec.Image, b.Spec.ServiceAccountName = bp.image, spec.str("serviceAccountName")
		bp.source = v1alpha1.SourceRef{Kind: "Buildpack", Name: meta.Name}
		converted = b
	}
	// As builders name it: a ClusterBuildpack without the namespace
	// metadata dropped.
	id := objectID{o.kind, meta.Namespace, meta.Name}
	if _, dup := c.buildpacks[id]; !dup && id.name != "" {
		// A second of the same name is an error (checkDuplicates).
		c.buildpacks[id] = bp
		c.buildpackList = append(c.buildpackList, bp)
	}

	_, imageErr := name.ParseReference(bp.image)
	switch {
	case bp.image == "":
		o.omit("spec.image", "not converted: missing")
	case imageErr != nil:
		o.omit("spec.image", "not converted: %v", imageErr)
	case converted.GetName() != meta.Name && len(validation.IsDNS1123Subdomain(converted.GetName())) > 0:
		o.omit("metadata.name", "not converted: its ClusterStore cannot be named %s: %s",
			converted.GetName(), validation.IsDNS1123Subdomain(converted.GetName())[0])
	default:
		if err := validate(converted); err != nil {
			o.omit("", "not converted: not a valid %s: %v", converted.GetObjectKind().GroupVersionKind().Kind, err)
		}
	}
	if o.omitted {
		// Kept, left out, so that builders naming it are told
		// (warnUnconvertedRefs).
		c.outputs = append(c.outputs, &output{from: o, converted: converted, omitted: true})
		return
	}
	c.emit(o, converted)
}

// statusBuildpacks reads the buildpacks a Buildpack's status lists, and the
// ids of the roots among them.
func statusBuildpacks(status map[string]any) (listed []v1alpha1.BuildpackRef, roots []string) {
	named := map[string]bool{} // ids in some buildpack's order
	for _, item := range asList(status["buildpacks"]) {
		bp := asMap(item)
		id, _ := bp["id"].(string)
		version, _ := bp["version"].(string)
		if id == "" {
			continue
		}
		listed = append(listed, v1alpha1.BuildpackRef{ID: id, Version: version})
		for _, entry := range asList(bp["order"]) {
			for _, ref := range asList(asMap(entry)["group"]) {
				if id, _ := asMap(ref)["id"].(string); id != "" {
					named[id] = true
				}
			}
		}
	}
	for _, bp := range listed {
		if !named[bp.ID] && !slices.Contains(roots, bp.ID) {
			roots = append(roots, bp.ID)
		}
	}
	return listed, roots
}

// holdersOf returns where kpack looks for a buildpack an entry names by id
// alone, besides the builder's store: every converted Buildpack of the
// builder's namespace (none for a ClusterBuilder), then every converted
// ClusterBuildpack, each in the order of the input, whose status lists the
// id (at the entry's version, when it has one). kpack pools them all and
// takes the highest version; so does buildsmith, from its store and
// sources, once they are all sources.
func (c *converter) holdersOf(namespace string, clusterScoped bool, r v1alpha1.BuildpackRef) []*buildpack {
	var holders []*buildpack
	for _, kind := range []string{"Buildpack", "ClusterBuildpack"} {
		if kind == "Buildpack" && clusterScoped {
			continue
		}
		for _, bp := range c.buildpackList {
			if bp.from.kind != kind || bp.from.omitted || (kind == "Buildpack" && bp.from.namespace != namespace) {
				continue
			}
			if slices.ContainsFunc(bp.listed, func(l v1alpha1.BuildpackRef) bool {
				return l.ID == r.ID && (r.Version == "" || l.Version == r.Version)
			}) {
				holders = append(holders, bp)
			}
		}
	}
	return holders
}

// versionsOf lists the versions of a buildpack that bp's status lists,
// each once, in the order listed.
func (bp *buildpack) versionsOf(id string) []string {
	var versions []string
	for _, l := range bp.listed {
		if l.ID == id && l.Version != "" && !slices.Contains(versions, l.Version) {
			versions = append(versions, l.Version)
		}
	}
	return versions
}

// kpackVersion is the version of buildpack id that kpack takes for an
// entry naming object named (bp; nil when not in the input) without a
// version: the highest of that id the object holds, as its status lists
// it. "" when that cannot be known offline; why then says why.
func kpackVersion(bp *buildpack, named objectID, id string) (version, why string) {
	switch {
	case bp == nil:
		return "", fmt.Sprintf("%s is not in the input", named.path())
	case len(bp.listed) == 0:
		return "", fmt.Sprintf("the input holds no status of %s listing its buildpacks", named.path())
	}
	versions := bp.versionsOf(id)
	if len(versions) == 0 {
		return "", fmt.Sprintf("the status of %s does not list %s (kpack would not find it there)", named.path(), id)
	}
	var best *semver.Version
	for _, v := range versions {
		parsed, err := semver.NewVersion(v)
		if err != nil {
			if len(versions) == 1 {
				return v, "" // the one there is, semantic or not
			}
			return "", fmt.Sprintf("the status of %s lists versions of %s that are not all semantic versions (%s)", named.path(), id, strings.Join(versions, ", "))
		}
		if best == nil || parsed.GreaterThan(best) {
			best, version = parsed, v
		}
	}
	return version, ""
}
