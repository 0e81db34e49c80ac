package alert

import (
	_ "embed"
	"fmt"
)

//go:embed rules/default.yaml
var defaultRulesYAML []byte

// DefaultOptions tune the shipped rules.
type DefaultOptions struct {
	// ShellAllowGroups replace the interactive-shell rule's allow-list
	// (default system:masters); empty keeps the default.
	ShellAllowGroups []string
}

// DefaultRules returns the shipped rules (rules/default.yaml).
func DefaultRules() []Rule {
	rules, _ := DefaultRulesWith(DefaultOptions{})
	return rules
}

// DefaultRulesWith returns the shipped rules, tuned.
func DefaultRulesWith(o DefaultOptions) ([]Rule, error) {
	rules, err := ParseRules(defaultRulesYAML)
	if err != nil {
		panic(fmt.Sprintf("embedded default rules do not parse: %v", err)) // a build defect, caught by tests
	}
	if len(o.ShellAllowGroups) == 0 {
		return rules, nil
	}
	for i := range rules {
		if rules[i].Name == "interactive-shell" {
			p := &Patterns{Glob: o.ShellAllowGroups}
			if err := p.compile(); err != nil {
				return nil, fmt.Errorf("compiling shell allow groups: %w", err)
			}
			rules[i].Match.Not = &Match{Group: p}
		}
	}
	return rules, nil
}
