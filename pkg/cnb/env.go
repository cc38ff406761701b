package cnb

import (
	"path"
	"strings"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// ReasonInvalidEnv is the reason of build-time environment errors.
const ReasonInvalidEnv = "InvalidEnv"

// buildConfigEnvDir is where the lifecycle reads operator-defined build-time
// variables (CNB_BUILD_CONFIG_DIR's default, /cnb/build-config, + "/env").
const buildConfigEnvDir = "cnb/build-config/env"

// Suffixes of build-config env files: what the lifecycle does when the
// user (<platform>/env) or a buildpack also sets the variable.
const (
	EnvDefault  = "default"  // set only if nobody else did; also what no suffix means here
	EnvOverride = "override" // always this value
	EnvAppend   = "append"   // after the other value, joined by Delim
	EnvPrepend  = "prepend"  // before the other value, joined by Delim
)

// EnvVar is one build-time environment variable of a builder, what pack
// reads from [[build.env]] in builder.toml.
type EnvVar struct {
	Name  string
	Value string
	// Suffix is one of the Env* constants, or empty (the same as default).
	Suffix string
	// Delim joins Value to the other value, for append and prepend only.
	// Empty joins them directly.
	Delim string
}

// ValidateEnv checks variables before they become files. Errors are
// Permanent with reason InvalidEnv and name the variable.
func ValidateEnv(env []EnvVar) error {
	files := map[string]bool{}
	delims := map[string]string{}
	for _, v := range env {
		if err := validateEnvVar(v); err != nil {
			return err
		}
		file := envFileName(v)
		if files[file] {
			return failure.Permanentf(ReasonInvalidEnv, "env %s with suffix %q is given twice", v.Name, v.Suffix)
		}
		files[file] = true
		// One NAME.delim file serves both append and prepend.
		if v.Delim != "" {
			if d, ok := delims[v.Name]; ok && d != v.Delim {
				return failure.Permanentf(ReasonInvalidEnv, "env %s has two delimiters, %q and %q: the lifecycle reads one for all its suffixes", v.Name, d, v.Delim)
			}
			delims[v.Name] = v.Delim
		}
	}
	return nil
}

func validateEnvVar(v EnvVar) error {
	switch {
	case v.Name == "":
		return failure.Permanentf(ReasonInvalidEnv, "an env has no name")
	case strings.ContainsAny(v.Name, "=\x00"):
		return failure.Permanentf(ReasonInvalidEnv, "env name %q contains %q or a NUL", v.Name, "=")
	case strings.Contains(v.Name, "/"):
		return failure.Permanentf(ReasonInvalidEnv, "env name %q contains a /: it is a file name", v.Name)
	case strings.Contains(v.Name, "."):
		// The lifecycle reads "A.B" as variable A with suffix B.
		return failure.Permanentf(ReasonInvalidEnv, "env name %q contains a dot, which the lifecycle would read as a suffix", v.Name)
	case strings.HasPrefix(v.Name, "CNB_"):
		return failure.Permanentf(ReasonInvalidEnv, "env name %q: CNB_ variables are the lifecycle's and the platform's", v.Name)
	}
	switch v.Suffix {
	case "", EnvDefault, EnvOverride:
		if v.Delim != "" {
			return failure.Permanentf(ReasonInvalidEnv, "env %s has a delimiter but suffix %q: only append and prepend use one", v.Name, v.Suffix)
		}
	case EnvAppend, EnvPrepend:
	default:
		return failure.Permanentf(ReasonInvalidEnv, "env %s has suffix %q; it must be one of %s, %s, %s, %s or empty",
			v.Name, v.Suffix, EnvDefault, EnvOverride, EnvAppend, EnvPrepend)
	}
	return nil
}

// envFileName is NAME or NAME.<suffix>, as pack names them.
func envFileName(v EnvVar) string {
	if v.Suffix == "" {
		return v.Name
	}
	return v.Name + "." + v.Suffix
}

// envEntries are the files of /cnb/build-config/env/: one per variable
// holding its value as is (no newline: the lifecycle takes the whole file),
// and NAME.delim holding the delimiter where there is one. Files are 0644
// and root's, like the rest of /cnb. No variables, no entries: builders
// without env keep their digests.
func envEntries(env []EnvVar) ([]tarEntry, error) {
	if len(env) == 0 {
		return nil, nil
	}
	if err := ValidateEnv(env); err != nil {
		return nil, err
	}
	entries := []tarEntry{
		{path: path.Dir(buildConfigEnvDir), mode: 0o755},
		{path: buildConfigEnvDir, mode: 0o755},
	}
	delims := map[string]bool{}
	for _, v := range env {
		entries = append(entries, tarEntry{path: path.Join(buildConfigEnvDir, envFileName(v)), mode: 0o644, content: []byte(v.Value)})
		if v.Delim != "" && !delims[v.Name] {
			delims[v.Name] = true
			entries = append(entries, tarEntry{path: path.Join(buildConfigEnvDir, v.Name+".delim"), mode: 0o644, content: []byte(v.Delim)})
		}
	}
	return entries, nil
}
