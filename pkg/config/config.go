// Package config layers correlator's settings: defaults, then a YAML file,
// then CORRELATOR_* environment variables, then command-line flags. Every
// setting is a flag; the file and the environment name the same flags, so
// there is one list of settings and pflag does all the value parsing.
package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// EnvPrefix prefixes every environment variable: --audit-log is
// CORRELATOR_AUDIT_LOG.
const EnvPrefix = "CORRELATOR_"

// EnvName is the environment variable that sets flag name.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Apply sets every flag that was not given on the command line from the
// environment (lookup) or, failing that, from the YAML document file.
// Lists in the file set repeatable flags once per element; a
// comma-separated environment value does the same.
func Apply(fs *pflag.FlagSet, file []byte, lookup func(string) (string, bool)) error {
	values, err := parseFile(file)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		known[f.Name] = true
		if f.Changed {
			return
		}
		if v, ok := lookup(EnvName(f.Name)); ok {
			errs = append(errs, setAll(fs, f.Name, splitEnv(f, v), "environment variable "+EnvName(f.Name)))
			return
		}
		if vs, ok := values[f.Name]; ok {
			errs = append(errs, setAll(fs, f.Name, vs, "config file key "+f.Name))
		}
	})
	var unknown []string
	for k := range values {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		errs = append(errs, fmt.Errorf("reading config file: unknown keys %s", strings.Join(unknown, ", ")))
	}
	return errors.Join(errs...)
}

// parseFile reads a flat YAML mapping of flag names to scalars or lists.
func parseFile(file []byte) (map[string][]string, error) {
	out := map[string][]string{}
	if len(strings.TrimSpace(string(file))) == 0 {
		return out, nil
	}
	var raw map[string]any
	if err := yaml.Unmarshal(file, &raw); err != nil {
		return nil, fmt.Errorf("parsing config file: %w", err)
	}
	for k, v := range raw {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				s, err := scalar(k, e)
				if err != nil {
					return nil, err
				}
				out[k] = append(out[k], s)
			}
		default:
			s, err := scalar(k, x)
			if err != nil {
				return nil, err
			}
			out[k] = []string{s}
		}
	}
	return out, nil
}

func scalar(key string, v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool, float64, int, int64:
		return fmt.Sprint(x), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("parsing config file key %s: want a scalar or a list of scalars, got %T", key, v)
}

// splitEnv splits list-valued flags on commas; scalars stay whole.
func splitEnv(f *pflag.Flag, v string) []string {
	switch f.Value.Type() {
	case "stringArray", "stringSlice":
		return strings.Split(v, ",")
	}
	return []string{v}
}

func setAll(fs *pflag.FlagSet, name string, vs []string, from string) error {
	for _, v := range vs {
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("applying %s: %w", from, err)
		}
	}
	return nil
}
