package packconfig

import (
	"fmt"
	"slices"
	"strings"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// order reads [[order]] or [[order-extensions]]; paths are where each
// entry of each group is in the file.
func (c *converter) order(root *table, key, what string) (order []v1alpha1.OrderEntry, paths [][]string) {
	for _, entry := range root.tables(key) {
		var group []v1alpha1.BuildpackRef
		var groupPaths []string
		first := map[string]string{}
		for _, ref := range entry.tables("group") {
			r := v1alpha1.BuildpackRef{ID: ref.str("id"), Version: ref.str("version"), Optional: ref.boolean("optional"), ExecEnv: c.execEnv(ref)}
			if r.ID == "" {
				c.warn(ref.path, "no id: an order names each %s by id; dropped", what)
				continue
			}
			if at, dup := first[r.ID]; dup {
				c.warn(ref.path, "%s is in the group already (%s): an id may be once in a group; dropped", r.ID, at)
				continue
			}
			first[r.ID] = ref.path
			group = append(group, r)
			groupPaths = append(groupPaths, ref.path)
		}
		if len(group) == 0 {
			c.warn(entry.path, "no %s in the group; dropped", what)
			continue
		}
		order = append(order, v1alpha1.OrderEntry{Group: group})
		paths = append(paths, groupPaths)
	}
	if key == "order-extensions" && len(order) > maxExtensions {
		c.warn(fmt.Sprintf("%s[%d]", key, maxExtensions), "%d groups, more than buildsmith's %d; these dropped", len(order), maxExtensions)
		order, paths = order[:maxExtensions], paths[:maxExtensions]
	}
	return order, paths
}

// maxExecEnv bounds an entry's exec-env, as the API does.
const maxExecEnv = 8

// execEnv takes an order entry's exec-env, leaving out what the API would
// refuse, with a warning each.
func (c *converter) execEnv(ref *table) []string {
	var out []string
	for i, env := range ref.strs("exec-env") {
		at := fmt.Sprintf("%s[%d]", ref.at("exec-env"), i)
		switch {
		case !v1alpha1.IsExecEnvName(env):
			c.warn(at, "%q is not an execution environment's name (lower-case letters, digits and dashes, or *); dropped", env)
		case slices.Contains(out, env):
			c.warn(at, "%s is listed already; dropped", env)
		case len(out) == maxExecEnv:
			c.warn(at, "more than buildsmith's %d execution environments an entry; dropped", maxExecEnv)
		default:
			out = append(out, env)
		}
	}
	return out
}

// inferVersions gives an order entry without a version the version its id
// has among modules when they name one, as pack does; buildsmith would
// take the store's highest, which is what an entry gets when they name
// several (pack refuses that).
func (c *converter) inferVersions(order []v1alpha1.OrderEntry, paths [][]string, modules []module) {
	versions := map[string][]string{}
	for _, m := range modules {
		if m.id != "" && m.version != "" && m.image != "" && !slices.Contains(versions[m.id], m.version) {
			versions[m.id] = append(versions[m.id], m.version)
		}
	}
	for i := range order {
		for j := range order[i].Group {
			r := &order[i].Group[j]
			switch v := versions[r.ID]; {
			case r.Version != "" || len(v) == 0:
			case len(v) == 1:
				r.Version = v[0]
			default:
				c.warn(paths[i][j], "no version, and the buildpackages are of several versions of %s (%s), which pack refuses: the builder takes the highest the ClusterStore has",
					r.ID, strings.Join(v, ", "))
			}
		}
	}
}

// unchecked warns about modules whose id or version pack checks against
// the buildpackage and nothing here does: a ClusterStore takes whatever
// its images hold, and only an order entry naming the buildpack makes the
// builder fail when the store lacks it.
func (c *converter) unchecked(modules []module, order []v1alpha1.OrderEntry, system *v1alpha1.SystemBuildpacks) {
	var refs []v1alpha1.BuildpackRef
	for _, entry := range order {
		refs = append(refs, entry.Group...)
	}
	if system != nil {
		for _, r := range slices.Concat(system.Pre, system.Post) {
			refs = append(refs, v1alpha1.BuildpackRef{ID: r.ID, Version: r.Version})
		}
	}
	for _, m := range modules {
		if m.image == "" || (m.id == "" && m.version == "") {
			continue
		}
		if slices.ContainsFunc(refs, func(r v1alpha1.BuildpackRef) bool {
			return (m.id == "" || r.ID == m.id) && (m.version == "" || r.Version == m.version)
		}) {
			continue
		}
		c.warn(m.path, "pack checks that %s holds %s; a ClusterStore takes whatever its images hold, and as no order entry names %s, nothing checks it; dropped", m.image, m, m)
	}
}

// system reads [system]: [system.pre] and [system.post], each with a list
// of buildpacks.
func (c *converter) system(t *table) *v1alpha1.SystemBuildpacks {
	var system v1alpha1.SystemBuildpacks
	first := map[string]string{}
	for _, part := range []struct {
		key  string
		refs *[]v1alpha1.SystemBuildpackRef
	}{{"pre", &system.Pre}, {"post", &system.Post}} {
		for _, ref := range t.table(part.key).tables("buildpacks") {
			r := v1alpha1.SystemBuildpackRef{ID: ref.str("id"), Version: ref.str("version")}
			optional := ref.boolean("optional")
			switch at, dup := first[r.ID]; {
			case r.ID == "":
				c.warn(ref.path, "no id: system buildpacks are named by id; dropped")
			case dup:
				c.warn(ref.path, "%s is a system buildpack already (%s), and the lifecycle would run it twice; dropped", r.ID, at)
			case optional:
				// Required, it would fail every group whose app it does not
				// detect. pack writes optional = true into system.toml, but
				// lifecycle 0.21 does not read it (files.SystemBuildpack is
				// an id and a version).
				c.warn(ref.path, "optional: the lifecycle (0.21) reads no optional in /cnb/system.toml and runs every system buildpack as required, so one that does not pass detection would fail every group; dropped")
			case len(*part.refs) == maxSystem:
				c.warn(ref.path, "more than buildsmith's %d system buildpacks in %s; dropped", maxSystem, part.key)
			default:
				first[r.ID] = ref.path
				*part.refs = append(*part.refs, r)
			}
		}
	}
	if len(system.Pre)+len(system.Post) == 0 {
		return nil
	}
	return &system
}
